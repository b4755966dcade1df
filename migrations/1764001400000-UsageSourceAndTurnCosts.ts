import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Where a request came from, and what each conversation turn cost.
 *
 * `usage_records.source`: `api` (a key), `dashboard` (the playground, as the signed-in
 * person), `widget` (reserved for an embedded chat widget). Existing rows are `api`: before
 * this, only the API could make requests. A constant default adds the column without
 * rewriting the table.
 *
 * `conversation_messages.cost_millicents` and `tools_used`: set on the last message of a
 * turn (the reply), so that a transcript shows what each answer cost and which server tools
 * it ran, also after the usage records are gone (they are kept USAGE_RETENTION_DAYS only).
 * Null on the other messages and on turns stored before this migration.
 */
export class UsageSourceAndTurnCosts1764001400000 implements MigrationInterface {
  name = 'UsageSourceAndTurnCosts1764001400000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records ADD COLUMN source text NOT NULL DEFAULT 'api'`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source IN ('api', 'dashboard', 'widget'))`,
    );
    await queryRunner.query(`ALTER TABLE conversation_messages ADD COLUMN cost_millicents numeric(20, 6)`);
    await queryRunner.query(`ALTER TABLE conversation_messages ADD COLUMN tools_used text[]`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE conversation_messages DROP COLUMN tools_used`);
    await queryRunner.query(`ALTER TABLE conversation_messages DROP COLUMN cost_millicents`);
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(`ALTER TABLE usage_records DROP COLUMN source`);
  }
}
