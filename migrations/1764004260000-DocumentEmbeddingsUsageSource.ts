import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * `usage_records.source` may be `document_embeddings`: the embeddings of an assistant's
 * document chunks, made at ingestion and charged to the workspace without an API key, kept
 * apart from the API's `embeddings` so that usage shows what the documents cost.
 */
export class DocumentEmbeddingsUsageSource1764004260000 implements MigrationInterface {
  name = 'DocumentEmbeddingsUsageSource1764004260000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text, 'messages'::text, 'embeddings'::text, 'document_embeddings'::text]))`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`UPDATE usage_records SET source = 'embeddings' WHERE source = 'document_embeddings'`);
    await queryRunner.query(`ALTER TABLE usage_records DROP CONSTRAINT usage_records_source_check`);
    await queryRunner.query(
      `ALTER TABLE usage_records ADD CONSTRAINT usage_records_source_check CHECK (source = ANY (ARRAY['api'::text, 'dashboard'::text, 'widget'::text, 'messages'::text, 'embeddings'::text]))`,
    );
  }
}
