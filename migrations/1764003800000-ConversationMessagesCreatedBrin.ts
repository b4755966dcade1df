import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Conversation search ranks only the newest matches, read back in time a span at a time. For
 * a word too rare for a backward scan of `(workspace_id, created_at)` to reach the bound soon,
 * the GIN index finds its messages; this BRIN index on `created_at` (messages are appended in
 * time order, so its block ranges are tight) cuts them to the span's blocks before any row is
 * read. About 20 kB per million messages; building it reads the table once (under a second
 * per million rows on a 2-CPU machine), CONCURRENTLY: writes to the table never wait for it.
 */
export class ConversationMessagesCreatedBrin1764003800000 implements MigrationInterface {
  name = 'ConversationMessagesCreatedBrin1764003800000';
  /** CREATE INDEX CONCURRENTLY cannot run in a transaction. */
  transaction = false;

  public async up(queryRunner: QueryRunner): Promise<void> {
    // A run that stopped half way leaves an invalid index behind.
    await queryRunner.query(`DROP INDEX CONCURRENTLY IF EXISTS conversation_messages_created_brin_idx`);
    await queryRunner.query(
      `CREATE INDEX CONCURRENTLY conversation_messages_created_brin_idx ON conversation_messages USING brin (created_at)`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX conversation_messages_created_brin_idx`);
  }
}
