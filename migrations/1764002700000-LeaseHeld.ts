import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * What a budget lease's requests in flight hold, as its process last reported it (at most a
 * second old; see WalletLeases). `reserved_millicents` stays the sum of holds and leases (what
 * no other request may take); the wallet shows as reserved only what requests hold: request
 * holds, plus each lease's `held_millicents`, not the unused spare of a lease.
 */
export class LeaseHeld1764002700000 implements MigrationInterface {
  name = 'LeaseHeld1764002700000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE wallet_holds ADD COLUMN held_millicents bigint NOT NULL DEFAULT 0 CHECK (held_millicents >= 0)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE wallet_holds DROP COLUMN held_millicents`);
  }
}
