import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The lexical leg of retrieval (src/assistants/documents/lexical-search.ts) and chunking per
 * assistant. Nothing here rewrites the chunks, so no long lock on a large table:
 *
 * - `documents.language` and `document_chunks.language`: the text search configuration a
 *   document's chunks are indexed with. Existing chunks were indexed in English, which is
 *   what the constant default says of them (a metadata-only column); new documents get the
 *   language detected at ingestion, and older ones on re-indexing.
 * - `content_tsv` stops being generated (DROP EXPRESSION keeps the values and the GIN index,
 *   without a rewrite): the ingestion now writes it with the document's configuration.
 * - `pg_trgm` and a GIN trigram index on `lexical_form(content)`, built CONCURRENTLY (writes
 *   never wait for it), for typos and identifiers written differently (`ERR-4012`, `err4012`).
 * - The chunk size and overlap of each assistant (OpenAI's defaults and bounds), and those a
 *   document was split with (null: before the setting, 400 and 60).
 */
export class LexicalSearch1764004200000 implements MigrationInterface {
  name = 'LexicalSearch1764004200000';
  /** CREATE INDEX CONCURRENTLY cannot run in a transaction; each step can be run again. */
  transaction = false;

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`CREATE EXTENSION IF NOT EXISTS pg_trgm`);
    // Identifiers joined whatever separates a letter or digit from a digit (ERR-4012, E_317,
    // v2/export, ES3-Pro), lower-cased: the text the trigram leg compares. Immutable, so indexable.
    await queryRunner.query(`
      CREATE OR REPLACE FUNCTION lexical_form(content text) RETURNS text
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
          SELECT lower(regexp_replace(content, '(?<=[[:alnum:]])[-_/](?=[[:digit:]])|(?<=[[:digit:]])[-_/](?=[[:alpha:]])', '', 'g'))
        $$`);

    await queryRunner.query(`
      ALTER TABLE documents
        ADD COLUMN IF NOT EXISTS language text NOT NULL DEFAULT 'english'
          CONSTRAINT documents_language_check
          CHECK (language IN ('simple', 'english', 'french', 'german', 'spanish', 'italian', 'portuguese', 'dutch')),
        ADD COLUMN IF NOT EXISTS chunk_max_tokens integer,
        ADD COLUMN IF NOT EXISTS chunk_overlap_tokens integer`);
    await queryRunner.query(`ALTER TABLE document_chunks ADD COLUMN IF NOT EXISTS language text NOT NULL DEFAULT 'english'`);
    const [generated] = await queryRunner.query(
      `SELECT 1 FROM information_schema.columns
       WHERE table_name = 'document_chunks' AND column_name = 'content_tsv' AND is_generated = 'ALWAYS'`,
    );
    if (generated) await queryRunner.query(`ALTER TABLE document_chunks ALTER COLUMN content_tsv DROP EXPRESSION`);

    await queryRunner.query(`
      ALTER TABLE assistants
        ADD COLUMN IF NOT EXISTS chunk_max_tokens integer NOT NULL DEFAULT 800
          CONSTRAINT assistants_chunk_max_tokens_check CHECK (chunk_max_tokens BETWEEN 100 AND 4096),
        ADD COLUMN IF NOT EXISTS chunk_overlap_tokens integer NOT NULL DEFAULT 400
          CONSTRAINT assistants_chunk_overlap_tokens_check CHECK (chunk_overlap_tokens >= 0 AND chunk_overlap_tokens * 2 <= chunk_max_tokens)`);

    // A run that stopped half way leaves an invalid index behind.
    await queryRunner.query(`DROP INDEX CONCURRENTLY IF EXISTS document_chunks_trgm_idx`);
    await queryRunner.query(
      `CREATE INDEX CONCURRENTLY document_chunks_trgm_idx ON document_chunks USING gin (lexical_form(content) gin_trgm_ops)`,
    );
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP INDEX IF EXISTS document_chunks_trgm_idx`);
    await queryRunner.query(`ALTER TABLE assistants DROP COLUMN chunk_max_tokens, DROP COLUMN chunk_overlap_tokens`);
    // Back to the English vector the column was generated as (a rewrite: down is for development).
    await queryRunner.query(`ALTER TABLE document_chunks DROP COLUMN content_tsv, DROP COLUMN language`);
    await queryRunner.query(
      `ALTER TABLE document_chunks ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED`,
    );
    await queryRunner.query(`CREATE INDEX document_chunks_tsv_idx ON document_chunks USING GIN (content_tsv)`);
    await queryRunner.query(`ALTER TABLE documents DROP COLUMN language, DROP COLUMN chunk_max_tokens, DROP COLUMN chunk_overlap_tokens`);
    await queryRunner.query(`DROP FUNCTION lexical_form(text)`);
  }
}
