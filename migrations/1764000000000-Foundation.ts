import { MigrationInterface, QueryRunner } from 'typeorm';

export class Foundation1764000000000 implements MigrationInterface {
  name = 'Foundation1764000000000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE workspaces (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        name text NOT NULL,
        tier text NOT NULL CHECK (tier IN ('free', 'hobby', 'pro', 'team', 'enterprise')),
        custom_rate_limit_rpm integer CHECK (custom_rate_limit_rpm IS NULL OR custom_rate_limit_rpm = -1 OR custom_rate_limit_rpm > 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT workspaces_custom_rate_enterprise_only CHECK (custom_rate_limit_rpm IS NULL OR tier = 'enterprise')
      )`);
    await queryRunner.query(`
      CREATE TABLE api_keys (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        name text,
        key_hash char(64) NOT NULL UNIQUE,
        display_prefix text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        revoked_at timestamptz
      )`);
    await queryRunner.query(`CREATE INDEX api_keys_workspace_idx ON api_keys (workspace_id)`);
    await queryRunner.query(`
      CREATE TABLE wallets (
        workspace_id uuid PRIMARY KEY REFERENCES workspaces(id) ON DELETE CASCADE,
        balance_millicents bigint NOT NULL DEFAULT 0,
        reserved_millicents bigint NOT NULL DEFAULT 0 CHECK (reserved_millicents >= 0),
        updated_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(`
      CREATE TABLE wallet_transactions (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        type text NOT NULL CHECK (type IN ('topup', 'auto_topup', 'usage', 'refund', 'adjustment')),
        amount_millicents bigint NOT NULL,
        balance_after_millicents bigint NOT NULL,
        description text NOT NULL DEFAULT '',
        idempotency_key text NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(
      `CREATE INDEX wallet_transactions_workspace_created_idx ON wallet_transactions (workspace_id, created_at DESC, id DESC)`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE wallet_transactions`);
    await queryRunner.query(`DROP TABLE wallets`);
    await queryRunner.query(`DROP TABLE api_keys`);
    await queryRunner.query(`DROP TABLE workspaces`);
  }
}
