import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What each conversation stores, so that its size limit is checked from one row before a
 * chat request holds money: `content_bytes` is the UTF-8 bytes of its messages' content
 * plus the JSON of their tool calls, kept by `ConversationsService.appendTurn` in the same
 * UPDATE as the other counters. Existing conversations are counted once here.
 */
export class ConversationLimits1764000900000 implements MigrationInterface {
  name = 'ConversationLimits1764000900000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE conversations ADD COLUMN content_bytes bigint NOT NULL DEFAULT 0 CHECK (content_bytes >= 0)`,
    );
    // octet_length reads the size of a TOASTed value without decompressing it.
    await queryRunner.query(`
      UPDATE conversations c
         SET content_bytes = stored.bytes
        FROM (SELECT conversation_id,
                     sum(octet_length(content) + coalesce(octet_length(tool_calls::text), 0)) AS bytes
                FROM conversation_messages
               GROUP BY conversation_id) stored
       WHERE stored.conversation_id = c.id`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE conversations DROP COLUMN content_bytes`);
  }
}
