import { MigrationInterface, QueryRunner } from 'typeorm';

/** Holds for requests in flight, the sub-millicent carry, usage records and stored idempotent responses. */
export class ChatBilling1764000100000 implements MigrationInterface {
  name = 'ChatBilling1764000100000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    // The fraction of a millicent not yet charged, always in [0, 1).
    await queryRunner.query(
      `ALTER TABLE wallets ADD COLUMN carry_millicents numeric(20, 9) NOT NULL DEFAULT 0
         CHECK (carry_millicents >= 0 AND carry_millicents < 1)`,
    );
    await queryRunner.query(`
      CREATE TABLE wallet_holds (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES wallets(workspace_id) ON DELETE CASCADE,
        -- For tracing only: request ids may come from clients. The hold's own id keys its ledger row.
        request_id text NOT NULL,
        amount_millicents bigint NOT NULL CHECK (amount_millicents > 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL
      )`);
    await queryRunner.query(`CREATE INDEX wallet_holds_expires_idx ON wallet_holds (expires_at)`);
    await queryRunner.query(`CREATE INDEX wallet_holds_workspace_idx ON wallet_holds (workspace_id)`);
    await queryRunner.query(`
      CREATE TABLE usage_records (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        request_id text NOT NULL,
        api_key_id uuid,
        assistant_id uuid,
        model text NOT NULL,
        input_tokens integer NOT NULL DEFAULT 0,
        output_tokens integer NOT NULL DEFAULT 0,
        total_tokens integer NOT NULL DEFAULT 0,
        cached_tokens integer NOT NULL DEFAULT 0,
        llm_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        tool_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        total_cost_millicents numeric(20, 6) NOT NULL DEFAULT 0,
        charged_millicents bigint NOT NULL DEFAULT 0,
        latency_ms integer NOT NULL DEFAULT 0,
        status text NOT NULL CHECK (status IN ('success', 'error')),
        error_code text,
        user_id text,
        subscription_id text,
        tools_used text[] NOT NULL DEFAULT '{}',
        stream boolean NOT NULL DEFAULT false,
        iterations integer NOT NULL DEFAULT 1,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(
      `CREATE INDEX usage_records_workspace_created_idx ON usage_records (workspace_id, created_at DESC, id DESC)`,
    );
    await queryRunner.query(`
      CREATE TABLE idempotent_requests (
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        idempotency_key text NOT NULL,
        request_hash char(64) NOT NULL,
        status_code integer,
        response jsonb,
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace_id, idempotency_key)
      )`);
    await queryRunner.query(`CREATE INDEX idempotent_requests_created_idx ON idempotent_requests (created_at)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE idempotent_requests`);
    await queryRunner.query(`DROP TABLE usage_records`);
    await queryRunner.query(`DROP TABLE wallet_holds`);
    await queryRunner.query(`ALTER TABLE wallets DROP COLUMN carry_millicents`);
  }
}
