import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber } from '../../../common/database/transformers';
import type { TextLanguage } from '../text-language';

/** Where a document is in its reading: see the migration DocumentIngestion for the lifecycle. */
export type DocumentStatus = 'processing' | 'ready' | 'failed';

/**
 * A file attached to an assistant for `file_search`: its text lives in `document_chunks`.
 * The uploaded file itself (`upload`, bytea) is kept only while the document is processing
 * and is never mapped here, so listing documents never reads megabytes of files.
 */
@Entity({ name: 'documents' })
export class Document {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ name: 'assistant_id', type: 'uuid' })
  assistantId: string;

  /** The file name as uploaded (without directories). */
  @Column({ type: 'text' })
  name: string;

  /** The detected type: text/plain, text/markdown, text/html, application/pdf or the DOCX type. */
  @Column({ name: 'mime_type', type: 'text' })
  mimeType: string;

  /** Size of the uploaded file, which is what the tier's storage limit counts. */
  @Column({ name: 'size_bytes', type: 'bigint', transformer: bigintToNumber })
  sizeBytes: number;

  @Column({ name: 'chunk_count', type: 'integer' })
  chunkCount: number;

  /** The text search configuration its chunks are indexed with: detected from its text (`simple` when unknown). */
  @Column({ type: 'text', default: 'english' })
  language: TextLanguage;

  /** The chunk size it was split with; null: before chunking was an assistant's setting (400 tokens, 60 of overlap). */
  @Column({ name: 'chunk_max_tokens', type: 'integer', nullable: true })
  chunkMaxTokens: number | null;

  @Column({ name: 'chunk_overlap_tokens', type: 'integer', nullable: true })
  chunkOverlapTokens: number | null;

  /** `processing` while read in the background (dashboard uploads); the CLI stores documents `ready`. */
  @Column({ type: 'text', default: 'ready' })
  status: DocumentStatus;

  /** Why a `failed` document could not be read, in words for the person who uploaded it. */
  @Column({ name: 'failure_reason', type: 'text', nullable: true })
  failureReason: string | null;

  /**
   * Its chunks wait for the embeddings of its assistant's model (hybrid search): made in the
   * background after it is `ready`, found by lexical search meanwhile (DocumentEmbeddings).
   */
  @Column({ name: 'embeddings_due', type: 'boolean', default: false })
  embeddingsDue: boolean;

  /** Times a reader took the document up (counted before reading): the sweeper stops at MAX_READ_ATTEMPTS. */
  @Column({ name: 'read_attempts', type: 'integer', default: 0 })
  readAttempts: number;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
