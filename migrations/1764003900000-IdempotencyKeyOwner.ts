import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The API key that claimed an Idempotency-Key: a stored answer is replayed only to the key
 * that made it, never to another key of the workspace (whose limits may exclude what the
 * answer ran). Null on claims written before, and by replicas of the previous version during
 * a rolling update: those replay as before, to any key of the workspace, for the 24 hours
 * they live.
 */
export class IdempotencyKeyOwner1764003900000 implements MigrationInterface {
  name = 'IdempotencyKeyOwner1764003900000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotent_requests ADD COLUMN api_key_id uuid`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotent_requests DROP COLUMN api_key_id`);
  }
}
