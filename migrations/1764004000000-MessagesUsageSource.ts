import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `usage_records.source` may be `messages`: a request of the Anthropic Messages API
 * (`POST /v1/messages`), made with an API key like `api`, kept apart so that usage shows
 * which API a client spoke. On the partitioned table the constraint applies to every partition.
 */
export class MessagesUsageSource1764004000000 implements MigrationInterface {
  name = 'MessagesUsageSource1764004000000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text, 'messages'::text]))`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE usage_records SET source = 'api' WHERE source = 'messages'`);
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text]))`,
    );
  }
}
