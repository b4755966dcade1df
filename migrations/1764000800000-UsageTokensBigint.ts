import { MigrationInterface, QueryRunner } from 'typeorm';

const TOKEN_COLUMNS = ['input_tokens', 'output_tokens', 'total_tokens', 'cached_tokens'];

/**
 * Token counts of usage records as `bigint`: a provider that reports billions of tokens (a
 * bug, or a lie) overflowed `integer`, and the failed insert rolled back the whole settlement.
 * Counts are also clamped before they get here; the column must not be the thing that fails.
 */
export class UsageTokensBigint1764000800000 implements MigrationInterface {
  name = 'UsageTokensBigint1764000800000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE usage_records ${TOKEN_COLUMNS.map((column) => `ALTER COLUMN ${column} TYPE bigint`).join(', ')}`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE usage_records ${TOKEN_COLUMNS.map((column) => `ALTER COLUMN ${column} TYPE integer`).join(', ')}`,
    );
  }
}
