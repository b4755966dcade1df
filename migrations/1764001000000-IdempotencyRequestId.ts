import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The request that claimed an Idempotency-Key. A claim whose request never finished (its
 * process died) expires once that request provably holds no money and was never settled,
 * which is looked up by this id in wallet_holds and usage_records.
 */
export class IdempotencyRequestId1764001000000 implements MigrationInterface {
  name = 'IdempotencyRequestId1764001000000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotent_requests ADD COLUMN request_id text`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotent_requests DROP COLUMN request_id`);
  }
}
