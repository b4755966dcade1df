import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The dense leg of hybrid retrieval. A workspace and an assistant may name an embedding model
 * (the assistant's wins; none: lexical-only). Each chunk keeps its vector as float32 bytes
 * (`embedding`, little-endian) with the model that made it; a document whose chunks miss the
 * assistant's model is `embeddings_due`, embedded in the background under its own lease
 * (`embedding_lease_until`), and `embedding_round` counts the times it was made due, so that
 * the charge of a batch has one idempotency key per round, document, batch and model.
 * `assistants.embedding_generation` grows whenever an assistant's vectors change: each
 * process's cache of them (dense-search.ts) compares it at each search.
 */
export class DenseRetrieval1764004250000 implements MigrationInterface {
  name = 'DenseRetrieval1764004250000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE workspaces ADD COLUMN embedding_model text`);
    await queryRunner.query(`
      ALTER TABLE assistants
        ADD COLUMN embedding_model text,
        ADD COLUMN embedding_generation bigint NOT NULL DEFAULT 0`);
    await queryRunner.query(`
      ALTER TABLE documents
        ADD COLUMN embeddings_due boolean NOT NULL DEFAULT false,
        ADD COLUMN embedding_round integer NOT NULL DEFAULT 0,
        ADD COLUMN embedding_lease_until timestamptz`);
    await queryRunner.query(`
      ALTER TABLE document_chunks
        ADD COLUMN embedding bytea,
        ADD COLUMN embedding_model text`);
    // The sweeper's question: which documents wait for embeddings that nobody is making?
    await queryRunner.query(`CREATE INDEX documents_embeddings_due_idx ON documents (embedding_lease_until) WHERE embeddings_due`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX documents_embeddings_due_idx`);
    await queryRunner.query(`ALTER TABLE document_chunks DROP COLUMN embedding_model, DROP COLUMN embedding`);
    await queryRunner.query(`ALTER TABLE documents DROP COLUMN embedding_lease_until, DROP COLUMN embedding_round, DROP COLUMN embeddings_due`);
    await queryRunner.query(`ALTER TABLE assistants DROP COLUMN embedding_generation, DROP COLUMN embedding_model`);
    await queryRunner.query(`ALTER TABLE workspaces DROP COLUMN embedding_model`);
  }
}
