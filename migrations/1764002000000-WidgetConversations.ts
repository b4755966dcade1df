import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * A conversation's source may be `widget`: a visitor's conversation with an embedded chat
 * widget, so that the dashboard and `/v1/conversations` tell them from API ones. Widget
 * conversations stored before this (as `api`, with `metadata.widget` set) are relabelled.
 */
export class WidgetConversations1764002000000 implements MigrationInterface {
  name = 'WidgetConversations1764002000000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE conversations DROP CONSTRAINT conversations_source_check`);
    await queryRunner.query(`ALTER TABLE conversations ADD CONSTRAINT conversations_source_check CHECK (source IN ('api', 'dashboard', 'widget'))`);
    await queryRunner.query(
      `UPDATE conversations c SET source = 'widget' FROM widget_conversations w WHERE w.conversation_id = c.id AND c.source = 'api'`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE conversations SET source = 'api' WHERE source = 'widget'`);
    await queryRunner.query(`ALTER TABLE conversations DROP CONSTRAINT conversations_source_check`);
    await queryRunner.query(`ALTER TABLE conversations ADD CONSTRAINT conversations_source_check CHECK (source IN ('api', 'dashboard'))`);
  }
}
