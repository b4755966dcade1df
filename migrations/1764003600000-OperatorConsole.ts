import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The operator console (docs/dashboard.md, "Operator console"): who is an operator, a
 * workspace's status (a suspended one's keys and widgets are refused), and the audit log of
 * what operators did. Failed requests by error code are read platform-wide from a partial
 * index of the failed requests only, never from a scan of usage_records; the figures of
 * yesterday and today from the daily totals through an index on the day (its column never
 * changes, so the totals' updates stay HOT: a new row per workspace, day and model adds one
 * index entry, nothing else does).
 */
export class OperatorConsole1764003600000 implements MigrationInterface {
  name = 'OperatorConsole1764003600000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE users ADD COLUMN is_operator boolean NOT NULL DEFAULT false`);
    await queryRunner.query(
      `ALTER TABLE workspaces ADD COLUMN status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended'))`,
    );
    await queryRunner.query(`
      CREATE TABLE operator_audit_log (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        -- Kept when the operator's account or the workspace is deleted: the email says who.
        operator_id uuid REFERENCES users(id) ON DELETE SET NULL,
        operator_email text NOT NULL,
        action text NOT NULL,
        workspace_id uuid REFERENCES workspaces(id) ON DELETE SET NULL,
        before jsonb,
        after jsonb,
        reason text,
        at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`CREATE INDEX operator_audit_log_at_idx ON operator_audit_log (at DESC, id DESC)`);
    await queryRunner.query(
      `CREATE INDEX operator_audit_log_workspace_idx ON operator_audit_log (workspace_id, at DESC, id DESC)`,
    );
    await queryRunner.query(
      `CREATE INDEX usage_records_errors_created_idx ON usage_records (created_at, error_code) WHERE status = 'error'`,
    );
    await queryRunner.query(`CREATE INDEX usage_daily_totals_day_idx ON usage_daily_totals (day)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX usage_daily_totals_day_idx`);
    await queryRunner.query(`DROP INDEX usage_records_errors_created_idx`);
    await queryRunner.query(`DROP TABLE operator_audit_log`);
    await queryRunner.query(`ALTER TABLE workspaces DROP COLUMN status`);
    await queryRunner.query(`ALTER TABLE users DROP COLUMN is_operator`);
  }
}
