import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Documents uploaded through the dashboard are read in the background: a document is
 * `processing` until its text is chunked (`ready`) or it cannot be (`failed`, with the
 * reason shown to the person). The uploaded file waits in `upload` until then, so a process
 * that stops mid-way loses nothing: whoever holds `ingestion_lease_until` is reading it, and
 * once the lease runs out (a crash) any process takes it up again. Existing documents,
 * and those the CLI adds (read before they are stored), are `ready`.
 */
export class DocumentIngestion1764001300000 implements MigrationInterface {
  name = 'DocumentIngestion1764001300000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      ALTER TABLE documents
        ADD COLUMN status text NOT NULL DEFAULT 'ready' CHECK (status IN ('processing', 'ready', 'failed')),
        ADD COLUMN failure_reason text,
        ADD COLUMN upload bytea,
        ADD COLUMN ingestion_lease_until timestamptz,
        ADD CONSTRAINT documents_failure_reason_check CHECK ((status = 'failed') = (failure_reason IS NOT NULL))`);
    // The sweeper's question: which processing documents has nobody been reading lately?
    await queryRunner.query(
      `CREATE INDEX documents_processing_idx ON documents (ingestion_lease_until) WHERE status = 'processing'`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX documents_processing_idx`);
    await queryRunner.query(`DELETE FROM documents WHERE status <> 'ready'`);
    await queryRunner.query(`
      ALTER TABLE documents
        DROP CONSTRAINT documents_failure_reason_check,
        DROP COLUMN ingestion_lease_until,
        DROP COLUMN upload,
        DROP COLUMN failure_reason,
        DROP COLUMN status`);
  }
}
