import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * Documents attached to assistants for `file_search`, and their chunks. Each chunk carries
 * a generated English `tsvector` with a GIN index for `websearch_to_tsquery` matching, and
 * its assistant's id (kept equal to its document's by a composite foreign key), so a search
 * filters on one column without a join.
 *
 * A chunk row (~1.7 KB of text and a ~2 KB vector) is over PostgreSQL's default 2 KB TOAST
 * threshold, which would move the vector out of line: ranking then fetches it from the
 * TOAST table for every candidate, which made searches over 10,000 chunks 2-4 times slower.
 * `toast_tuple_target = 8160` keeps rows inline whenever they fit in a page.
 */
export class Documents1764000600000 implements MigrationInterface {
  name = 'Documents1764000600000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE documents (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        assistant_id uuid NOT NULL REFERENCES assistants(id) ON DELETE CASCADE,
        name text NOT NULL CHECK (length(name) BETWEEN 1 AND 255),
        mime_type text NOT NULL,
        size_bytes bigint NOT NULL CHECK (size_bytes >= 0),
        chunk_count integer NOT NULL CHECK (chunk_count >= 0),
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT documents_id_assistant_unique UNIQUE (id, assistant_id)
      )`);
    await queryRunner.query(`CREATE INDEX documents_assistant_idx ON documents (assistant_id, created_at)`);
    // Per-workspace limits count and sum over this.
    await queryRunner.query(`CREATE INDEX documents_workspace_idx ON documents (workspace_id)`);

    await queryRunner.query(`
      CREATE TABLE document_chunks (
        id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        document_id uuid NOT NULL,
        assistant_id uuid NOT NULL,
        position integer NOT NULL CHECK (position >= 0),
        content text NOT NULL,
        tokens integer NOT NULL CHECK (tokens >= 0),
        content_tsv tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED,
        CONSTRAINT document_chunks_document_fk FOREIGN KEY (document_id, assistant_id)
          REFERENCES documents (id, assistant_id) ON DELETE CASCADE,
        CONSTRAINT document_chunks_position_unique UNIQUE (document_id, position)
      ) WITH (toast_tuple_target = 8160)`);
    await queryRunner.query(`CREATE INDEX document_chunks_tsv_idx ON document_chunks USING GIN (content_tsv)`);
    await queryRunner.query(`CREATE INDEX document_chunks_assistant_idx ON document_chunks (assistant_id)`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE document_chunks`);
    await queryRunner.query(`DROP TABLE documents`);
  }
}
