import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Budget leases: a process reserves a budget from a wallet in one conditional statement and
 * admits requests from it in memory, so that requests no longer queue on the wallet's row.
 * A lease is a row of wallet_holds (kind 'lease'): reserved_millicents stays the sum of holds
 * and leases, and the sweeper gives back the lease of a process that died.
 *
 * Idempotency claims now say that their request is alive themselves (alive_at, pushed out
 * while it runs) instead of being looked up in wallet_holds, which a leased request has no
 * row in.
 */
export class WalletLeases1764001600000 implements MigrationInterface {
  name = 'WalletLeases1764001600000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE wallet_holds ADD COLUMN kind text NOT NULL DEFAULT 'request' CHECK (kind IN ('request', 'lease'))`,
    );
    // A lease whose charges used it up stays until it grows or goes back: it may hold 0.
    await queryRunner.query(`ALTER TABLE wallet_holds DROP CONSTRAINT wallet_holds_amount_millicents_check`);
    await queryRunner.query(
      `ALTER TABLE wallet_holds ADD CONSTRAINT wallet_holds_amount_millicents_check
         CHECK (amount_millicents > 0 OR (kind = 'lease' AND amount_millicents >= 0))`,
    );
    await queryRunner.query(`ALTER TABLE idempotent_requests ADD COLUMN alive_at timestamptz NOT NULL DEFAULT now()`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotent_requests DROP COLUMN alive_at`);
    await queryRunner.query(`DELETE FROM wallet_holds WHERE kind = 'lease' AND amount_millicents = 0`);
    await queryRunner.query(`ALTER TABLE wallet_holds DROP CONSTRAINT wallet_holds_amount_millicents_check`);
    await queryRunner.query(`ALTER TABLE wallet_holds ADD CONSTRAINT wallet_holds_amount_millicents_check CHECK (amount_millicents > 0)`);
    await queryRunner.query(`ALTER TABLE wallet_holds DROP COLUMN kind`);
  }
}
