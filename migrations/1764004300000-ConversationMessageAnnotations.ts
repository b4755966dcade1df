import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `conversation_messages.annotations`: an answer's citations of the sources its server tools
 * returned (OpenAI's `message.annotations`: url_citation, and file_citation for documents),
 * kept with the reply so that the dashboard and the widget can show its sources later. Null
 * when the answer had none, and on every message stored before.
 */
export class ConversationMessageAnnotations1764004300000 implements MigrationInterface {
  name = 'ConversationMessageAnnotations1764004300000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE conversation_messages ADD COLUMN annotations jsonb`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE conversation_messages DROP COLUMN annotations`);
  }
}
