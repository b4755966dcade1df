import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Auto top-up: per-wallet settings, and one row per top-up attempt. The partial unique
 * index lets at most one attempt per workspace be open (paying, or waiting to retry), so
 * that concurrent charges crossing the threshold claim one top-up between them.
 */
export class AutoTopup1764000400000 implements MigrationInterface {
  name = 'AutoTopup1764000400000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE auto_topup_settings (
        workspace_id uuid PRIMARY KEY REFERENCES wallets(workspace_id) ON DELETE CASCADE,
        enabled boolean NOT NULL DEFAULT false,
        threshold_millicents bigint NOT NULL DEFAULT 0 CHECK (threshold_millicents >= 0),
        amount_millicents bigint NOT NULL DEFAULT 0 CHECK (amount_millicents >= 0),
        -- NULL: no monthly cap.
        monthly_cap_millicents bigint CHECK (monthly_cap_millicents IS NULL OR monthly_cap_millicents >= 0),
        stripe_customer_id text,
        stripe_payment_method_id text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        -- An enabled top-up must be able to fire and to buy at least one cent.
        CONSTRAINT auto_topup_settings_enabled_complete
          CHECK (NOT enabled OR (threshold_millicents > 0 AND amount_millicents >= 1000))
      )`);
    await queryRunner.query(`
      CREATE TABLE auto_topup_attempts (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES wallets(workspace_id) ON DELETE CASCADE,
        status text NOT NULL CHECK (status IN ('processing', 'retry_scheduled', 'succeeded', 'failed', 'canceled')),
        provider text NOT NULL CHECK (provider IN ('stripe', 'simulated')),
        -- Whole cents (a multiple of 1000): exactly what is charged, and credited.
        amount_millicents bigint NOT NULL CHECK (amount_millicents > 0 AND amount_millicents % 1000 = 0),
        -- Payment requests sent so far (bounded by the retry limit).
        tries integer NOT NULL DEFAULT 1 CHECK (tries >= 1),
        -- Names the current payment request in the provider's idempotency key. It moves on
        -- after a failure, except when the request may never have reached the provider: that
        -- one is resent with the same key, so a payment made after all is not made twice.
        charge_seq integer NOT NULL DEFAULT 1 CHECK (charge_seq >= 1),
        payment_id text,
        transaction_id uuid REFERENCES wallet_transactions(id),
        last_failure_code text,
        last_failure_reason text,
        next_retry_at timestamptz,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        completed_at timestamptz,
        CHECK ((status = 'retry_scheduled') = (next_retry_at IS NOT NULL))
      )`);
    await queryRunner.query(
      `CREATE UNIQUE INDEX auto_topup_attempts_one_open_idx ON auto_topup_attempts (workspace_id)
         WHERE status IN ('processing', 'retry_scheduled')`,
    );
    await queryRunner.query(
      `CREATE INDEX auto_topup_attempts_due_idx ON auto_topup_attempts (next_retry_at) WHERE status = 'retry_scheduled'`,
    );
    await queryRunner.query(`CREATE INDEX auto_topup_attempts_workspace_created_idx ON auto_topup_attempts (workspace_id, created_at)`);
    await queryRunner.query(`CREATE INDEX auto_topup_attempts_payment_idx ON auto_topup_attempts (payment_id)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE auto_topup_attempts`);
    await queryRunner.query(`DROP TABLE auto_topup_settings`);
  }
}
