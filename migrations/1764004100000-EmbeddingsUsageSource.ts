import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `usage_records.source` may be `embeddings`: a request of `POST /v1/embeddings`, made with an
 * API key like `api`, kept apart so that usage shows embeddings beside chat. On the
 * partitioned table the constraint applies to every partition.
 */
export class EmbeddingsUsageSource1764004100000 implements MigrationInterface {
  name = 'EmbeddingsUsageSource1764004100000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text, 'messages'::text, 'embeddings'::text]))`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE usage_records SET source = 'api' WHERE source = 'embeddings'`);
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text, 'messages'::text]))`,
    );
  }
}
