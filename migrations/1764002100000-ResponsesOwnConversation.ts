import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `responses.owns_conversation`: whether the response belongs to a conversation that the
 * Responses API created for it (`store: true` without `conversation`, and the responses that
 * continue it with `previous_response_id`). Only such a conversation is deleted with its
 * last response; one the client brought with `conversation` keeps its other turns. Rows
 * stored before this are false: their conversations are never deleted by a response's
 * deletion, which loses nothing.
 */
export class ResponsesOwnConversation1764002100000 implements MigrationInterface {
  name = 'ResponsesOwnConversation1764002100000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE responses ADD COLUMN owns_conversation boolean NOT NULL DEFAULT false`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE responses DROP COLUMN owns_conversation`);
  }
}
