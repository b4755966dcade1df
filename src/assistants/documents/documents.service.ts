import { Injectable, Logger } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import * as path from 'node:path';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../../common/errors/api-error';
import { assertUuid } from '../../common/validation/uuid';
import { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { UNLIMITED } from '../../limits/tier-policy';
import { WorkspacesService } from '../../workspaces/workspaces.service';
import { Assistant } from '../entities/assistant.entity';
import { ChunkingOptions, DEFAULT_CHUNKING, TextChunk, textOfChunks } from './chunking';
import { DenseSearch } from './dense-search';
import { DOCUMENT_LIMITS, formatBytes, MAX_FILE_BYTES } from './document-limits';
import { DocumentReadError } from './document-read-error';
import { DocumentReader } from './document-reader';
import { Document, DocumentStatus } from './entities/document.entity';
import { detectFormat, DocumentFormat, mimeTypeOf } from './extract-text';
import { lexicalSearch } from './lexical-search';
import { fuseRankings } from './rank-fusion';
import { detectTextLanguage, TextLanguage } from './text-language';

export interface AddDocumentCommand {
  workspaceId: string;
  assistantId: string;
  /** The uploaded file's name; directories are dropped. Its extension decides the type. */
  fileName: string;
  data: Buffer;
  /** Used when the file name has no extension we know. */
  mimeType?: string;
  /** Stages of a long ingestion, for a progress display. */
  onProgress?: (progress: IngestionProgress) => void;
}

export interface IngestionProgress {
  stage: 'extracting' | 'chunking' | 'storing' | 'stored';
  message: string;
}

/** What a `file_search` may be narrowed to, as OpenAI's tool has it. */
export interface FileSearchOptions {
  /** How many passages at most, 1 to MAX_SEARCH_RESULTS. */
  maxResults: number;
  /** Only passages whose `score` is at least this (0 to 1); none when absent. */
  scoreThreshold?: number;
  /** Only passages of these documents (what the attribute filters left); all of the assistant's when absent. */
  documentIds?: string[];
}

/** One passage found by `search`, best first. */
export interface FileSearchResult {
  document_id: string;
  document_name: string;
  /** The chunk's order in its document, from 0. */
  position: number;
  content: string;
  /**
   * From 0 to 1, higher is better. Lexical-only: from 0.5 to 1 when the passage has every
   * term of the query (higher when they are closer together and more frequent); below 0.5
   * when it has only some, scaled by their share; a word found only by trigram similarity (a
   * typo, an identifier written otherwise) adds half its similarity over the words of the
   * query. Hybrid (an embedding model): the fused rank, 1 for a passage first in both legs,
   * about 0.5 for one first in only one.
   */
  score: number;
}

/** A document as the CLI (and later the API) shows it. */
export interface DocumentView {
  id: string;
  assistant_id: string;
  name: string;
  mime_type: string;
  size_bytes: number;
  chunks: number;
  /** `processing` while read in the background, `ready`, or `failed` with `failure_reason`. */
  status: DocumentStatus;
  /** Why a failed document could not be read, in words for the person who uploaded it; null otherwise. */
  failure_reason: string | null;
  /** The text search configuration its chunks are indexed with, detected from its text (`simple`: none fits). */
  language: TextLanguage;
  /** True while its chunks wait for their embeddings (hybrid search); lexical search finds it meanwhile. */
  embeddings_pending: boolean;
  created_at: string;
}

export function documentView(document: Document): DocumentView {
  return {
    id: document.id,
    assistant_id: document.assistantId,
    name: document.name,
    mime_type: document.mimeType,
    size_bytes: document.sizeBytes,
    chunks: document.chunkCount,
    status: document.status,
    failure_reason: document.failureReason,
    language: document.language,
    embeddings_pending: document.embeddingsDue,
    created_at: document.createdAt.toISOString(),
  };
}

/** What a re-indexing did. */
export interface ReindexResult {
  assistant_id: string;
  /** Documents split again (those still being read, or failed, are left alone). */
  documents: number;
  /** Their chunks now. */
  chunks: number;
  chunk_max_tokens: number;
  chunk_overlap_tokens: number;
}

export const MAX_SEARCH_RESULTS = 50;
/** Passages each leg of a hybrid search hands to the fusion. */
const FUSION_CANDIDATES = 50;
const MAX_FILE_NAME_LENGTH = 255;
/**
 * Times a document is taken up for reading in all, across processes and restarts; a reader
 * that died on it (killed with its process) leaves it to be taken up again only until then.
 */
export const MAX_READ_ATTEMPTS = 3;
/** Chunks per INSERT statement. */
const INSERT_BATCH = 500;

/** 413 for one file over the size every tier shares. */
export function fileTooLarge(fileName: string, sizeBytes: number): ApiError {
  return new ApiError(
    'bad_request',
    `${fileName} is ${formatBytes(sizeBytes)}; a document may be at most ${formatBytes(MAX_FILE_BYTES)}.`,
    { status: 413, code: 'file_too_large', param: 'file' },
  );
}

/**
 * Documents of assistants, for `file_search`: ingestion (text extraction, chunking, tier
 * limits), listing, removal and full-text search over the chunks.
 */
@Injectable()
export class DocumentsService {
  private readonly logger = new Logger('DocumentsService');

  constructor(
    @InjectRepository(Document) private readonly documents: Repository<Document>,
    /** The assistants' table is the assistants folder's, of which documents are a part: read to check an assistant's workspace. */
    @InjectRepository(Assistant) private readonly assistants: Repository<Assistant>,
    /** The tier, whose limits apply, is the workspace's. */
    private readonly workspaces: WorkspacesService,
    private readonly reader: DocumentReader,
    private readonly dense: DenseSearch,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  /**
   * How long a background reading of a document may go without a sign of life before another
   * process takes the document up (its reader renews the lease while it works).
   */
  get leaseSeconds(): number {
    return this.config.documents.leaseSeconds;
  }

  /** Documents this process reads at once (DOCUMENT_READERS). */
  get readers(): number {
    return this.config.documents.readers;
  }

  /**
   * Extracts the file's text, splits it into overlapping chunks and stores the document
   * and its chunks in one transaction. The workspace's tier limits (documents and total
   * size) are checked before the work and again, under a per-workspace lock, when storing,
   * so concurrent uploads cannot pass them together.
   */
  async add(command: AddDocumentCommand): Promise<Document> {
    const upload = await this.checkUpload(command);
    const progress = command.onProgress ?? (() => undefined);
    const chunking = chunkingOf(upload.assistant);
    const chunks = await this.readChunks(upload.format, command.data, upload.name, progress, chunking);
    const language = languageOf(chunks);

    progress({ stage: 'storing', message: `Storing ${chunks.length} chunks` });
    const document = await this.documents.manager
      .transaction(async (manager) => {
        await this.lockAndCheckLimits(manager, command.workspaceId, upload.name, upload.sizeBytes);
        const created = await manager.save(
          manager.create(Document, {
            workspaceId: command.workspaceId,
            assistantId: command.assistantId,
            name: upload.name,
            mimeType: mimeTypeOf(upload.format),
            sizeBytes: upload.sizeBytes,
            chunkCount: chunks.length,
            language,
            chunkMaxTokens: chunking.maxTokens,
            chunkOverlapTokens: chunking.overlapTokens,
            // Read once, in the foreground, before it was stored.
            readAttempts: 1,
          }),
        );
        await insertChunks(manager, created, chunks);
        // Embedded by a server's sweep: this process (the CLI) may not run one.
        await markEmbeddingsDue(manager, created.id, 0);
        return created;
      })
      .catch(rethrowDeletedAssistant(command.assistantId));
    progress({ stage: 'stored', message: `Stored ${upload.name}: ${chunks.length} chunks` });
    return document;
  }

  /**
   * Stores the file as a `processing` document, to be read later by `ingest` (the
   * dashboard's uploads: a large PDF must not hold up the page). The same checks as `add`
   * come first, and the document counts against the tier's limits from now on, so an upload
   * accepted here is never refused later for room. The caller holds the ingestion lease
   * (its first read attempt) for `leaseSeconds`: it should call `ingest` now, or the sweeper will.
   */
  async enqueue(command: AddDocumentCommand): Promise<Document> {
    const upload = await this.checkUpload(command);
    return this.documents.manager
      .transaction(async (manager) => {
        await this.lockAndCheckLimits(manager, command.workspaceId, upload.name, upload.sizeBytes);
        const [row] = await manager.query<Array<{ id: string }>>(
          `INSERT INTO documents (workspace_id, assistant_id, name, mime_type, size_bytes, chunk_count, status, upload, ingestion_lease_until, read_attempts)
           VALUES ($1, $2, $3, $4, $5, 0, 'processing', $6, now() + make_interval(secs => $7), 1)
           RETURNING id`,
          [command.workspaceId, command.assistantId, upload.name, mimeTypeOf(upload.format), upload.sizeBytes, command.data, this.leaseSeconds],
        );
        return manager.findOneByOrFail(Document, { id: row.id });
      })
      .catch(rethrowDeletedAssistant(command.assistantId));
  }

  /**
   * Reads a `processing` document's stored file: on success its chunks are stored and it
   * becomes `ready`, otherwise `failed` with the reason. Either way the file is dropped.
   * Two processes reading the same document (a lease that ran out under a slow read) both
   * finish, but only the first to commit stores anything: the status change is conditional.
   * Returns the status reached, or null when the document is gone or no longer processing.
   */
  async ingest(documentId: string): Promise<DocumentStatus | null> {
    const [row] = await this.documents.query<
      Array<{ name: string; mime_type: string; upload: Buffer | null; chunk_max_tokens: number; chunk_overlap_tokens: number }>
    >(
      `SELECT d.name, d.mime_type, d.upload, a.chunk_max_tokens, a.chunk_overlap_tokens
       FROM documents d JOIN assistants a ON a.id = d.assistant_id WHERE d.id = $1 AND d.status = 'processing'`,
      [documentId],
    );
    if (!row) return null;
    const chunking = { maxTokens: row.chunk_max_tokens, overlapTokens: row.chunk_overlap_tokens };
    let chunks: TextChunk[];
    try {
      if (!row.upload) throw ApiError.badRequest(`The file of ${row.name} was not kept; upload it again.`, 'file');
      chunks = await this.readChunks(detectFormat(row.name, row.mime_type), row.upload, row.name, () => undefined, chunking);
    } catch (error) {
      if (!(error instanceof ApiError)) this.logger.error(`Reading document ${documentId} (${row.name}) failed: ${String(error)}`);
      const reason = failureReason(error, row.name, row.mime_type);
      const failed = updatedRows(
        await this.documents.query(
          `UPDATE documents SET status = 'failed', failure_reason = $2, upload = NULL, ingestion_lease_until = NULL
           WHERE id = $1 AND status = 'processing' RETURNING id`,
          [documentId, reason],
        ),
      );
      return failed.length > 0 ? 'failed' : null;
    }
    const language = languageOf(chunks);
    return this.documents.manager.transaction(async (manager) => {
      const [updated] = updatedRows<{ id: string; assistant_id: string }>(
        await manager.query(
          `UPDATE documents SET status = 'ready', chunk_count = $2, upload = NULL, ingestion_lease_until = NULL,
             language = $3, chunk_max_tokens = $4, chunk_overlap_tokens = $5
           WHERE id = $1 AND status = 'processing' RETURNING id, assistant_id`,
          [documentId, chunks.length, language, chunking.maxTokens, chunking.overlapTokens],
        ),
      );
      if (!updated) return null;
      await insertChunks(manager, { id: updated.id, assistantId: updated.assistant_id, language }, chunks);
      // This reader embeds the chunks next, under the lease taken here (see DocumentEmbeddings).
      await markEmbeddingsDue(manager, updated.id, this.leaseSeconds);
      return 'ready' as const;
    });
  }

  /**
   * Extraction and chunking of a file, both in a reader's worker (document-reader.ts); a file
   * that cannot be read is a 400 `unreadable_file` saying why, one without text a 400 `no_text`.
   */
  private async readChunks(
    format: DocumentFormat,
    data: Buffer,
    name: string,
    progress: (progress: IngestionProgress) => void,
    chunking: ChunkingOptions,
  ): Promise<TextChunk[]> {
    progress({ stage: 'extracting', message: `Reading ${name}` });
    const chunks = await this.reader
      .read(format, data, {
        chunking,
        onPage: (done, pages) => progress({ stage: 'extracting', message: `Read page ${done} of ${pages} of ${name}` }),
        onChunking: (characters) => {
          if (characters > 0) progress({ stage: 'chunking', message: `Splitting ${characters} characters into chunks` });
        },
      })
      .catch((error: unknown) => {
        if (!(error instanceof DocumentReadError)) throw error;
        // A parser's own failure or a reader that crashed: the person gets the words, the operator the log line.
        if (error.reason === 'failed') this.logger.warn(`Reading ${name} failed: ${error.message}`);
        throw ApiError.badRequest(`${name} could not be read: ${error.message}`, 'file', 'unreadable_file');
      });
    if (chunks.length === 0) {
      throw ApiError.badRequest(
        `No text could be extracted from ${name}${format === 'pdf' ? ' (a scanned PDF without a text layer has none)' : ''}.`,
        'file',
        'no_text',
      );
    }
    return chunks;
  }

  /**
   * Splits the assistant's ready documents again with its current chunk size and overlap,
   * and indexes them again in the language of their text (documents stored before languages
   * were detected were indexed in English). The uploaded files are not kept: the text comes
   * from the stored chunks, their overlaps removed (textOfChunks), so what extraction dropped
   * stays dropped. One transaction per document; a document deleted or re-indexed by someone
   * else meanwhile is left as that made it.
   */
  async reindex(assistantId: string): Promise<ReindexResult> {
    const assistant = await this.getAssistant(assistantId);
    const chunking = chunkingOf(assistant);
    const ready = await this.documents.find({ where: { assistantId: assistant.id, status: 'ready' }, order: { createdAt: 'ASC', id: 'ASC' } });
    const result: ReindexResult = {
      assistant_id: assistant.id,
      documents: 0,
      chunks: 0,
      chunk_max_tokens: chunking.maxTokens,
      chunk_overlap_tokens: chunking.overlapTokens,
    };
    for (const document of ready) {
      const stored = await this.documents.query<Array<{ id: string; content: string }>>(
        'SELECT id, content FROM document_chunks WHERE document_id = $1 ORDER BY position',
        [document.id],
      );
      if (stored.length === 0) continue;
      const text = textOfChunks(
        stored.map((chunk) => chunk.content),
        document.chunkOverlapTokens ?? DEFAULT_CHUNKING.overlapTokens,
      );
      const chunks = await this.readChunks('text', Buffer.from(text), document.name, () => undefined, chunking);
      const language = languageOf(chunks);
      const replaced = await this.documents.manager.transaction(async (manager) => {
        // Still the chunks that were read: the newest chunk id changes with any other re-indexing.
        const [current] = await manager.query<Array<{ id: string }>>(
          `SELECT d.id FROM documents d
           WHERE d.id = $1 AND d.status = 'ready' AND (SELECT max(c.id) FROM document_chunks c WHERE c.document_id = d.id) = $2
           FOR UPDATE`,
          [document.id, stored.reduce((max, chunk) => (BigInt(chunk.id) > BigInt(max) ? chunk.id : max), stored[0].id)],
        );
        if (!current) return false;
        await manager.query('DELETE FROM document_chunks WHERE document_id = $1', [document.id]);
        await insertChunks(manager, { id: document.id, assistantId: assistant.id, language }, chunks);
        await manager.query(
          'UPDATE documents SET chunk_count = $2, language = $3, chunk_max_tokens = $4, chunk_overlap_tokens = $5 WHERE id = $1',
          [document.id, chunks.length, language, chunking.maxTokens, chunking.overlapTokens],
        );
        await markEmbeddingsDue(manager, document.id, 0, { newRound: true });
        return true;
      });
      if (replaced) {
        result.documents++;
        result.chunks += chunks.length;
      }
    }
    return result;
  }

  /** Extends the lease of a document being read, so that no other process takes it up. */
  async renewLease(documentId: string): Promise<void> {
    await this.documents.query(
      `UPDATE documents SET ingestion_lease_until = now() + make_interval(secs => $2) WHERE id = $1 AND status = 'processing'`,
      [documentId, this.leaseSeconds],
    );
  }

  /**
   * Takes the lease of one `processing` document that nobody is reading (its reader
   * stopped: a crash, a restart) and returns its id, or null when there is none. Safe to
   * call from every process at once: each gets a different document. The claim counts an
   * attempt in the same statement, before any reading, so a file that kills its reader's
   * process is counted too; one already taken up MAX_READ_ATTEMPTS times is marked `failed`
   * instead of being read again (see `failExhausted`).
   */
  async claimAbandoned(): Promise<string | null> {
    await this.failExhausted();
    const [row] = updatedRows<{ id: string }>(
      await this.documents.query(
        `UPDATE documents SET ingestion_lease_until = now() + make_interval(secs => $1), read_attempts = read_attempts + 1
         WHERE id = (
           SELECT id FROM documents
           WHERE status = 'processing' AND (ingestion_lease_until IS NULL OR ingestion_lease_until < now()) AND read_attempts < $2
           ORDER BY created_at LIMIT 1 FOR UPDATE SKIP LOCKED)
         RETURNING id`,
        [this.leaseSeconds, MAX_READ_ATTEMPTS],
      ),
    );
    return row?.id ?? null;
  }

  /** Abandoned documents whose readers stopped MAX_READ_ATTEMPTS times become `failed`; returns how many. */
  async failExhausted(): Promise<number> {
    const failed = updatedRows(
      await this.documents.query(
        `UPDATE documents SET status = 'failed', upload = NULL, ingestion_lease_until = NULL,
           failure_reason = name || ' could not be read after ' || read_attempts || ' attempts: its reader stopped each time (the file may be too large or damaged). Delete it, and upload a smaller or repaired file.'
         WHERE status = 'processing' AND (ingestion_lease_until IS NULL OR ingestion_lease_until < now()) AND read_attempts >= $1
         RETURNING id`,
        [MAX_READ_ATTEMPTS],
      ),
    );
    if (failed.length > 0) this.logger.warn(`${failed.length} document(s) failed after ${MAX_READ_ATTEMPTS} read attempts`);
    return failed.length;
  }

  /** A document of the workspace, or 404 (another workspace's is unknown too). */
  async getInWorkspace(workspaceId: string, documentId: string): Promise<Document> {
    assertUuid(workspaceId, 'workspace');
    assertUuid(documentId, 'document');
    const document = await this.documents.findOneBy({ id: documentId, workspaceId });
    if (!document) throw documentNotFound(documentId);
    return document;
  }

  /** Name, size and format of an upload, with the checks every upload gets before its file is read. */
  private async checkUpload(
    command: AddDocumentCommand,
  ): Promise<{ name: string; sizeBytes: number; format: DocumentFormat; assistant: Assistant }> {
    assertUuid(command.workspaceId, 'workspace');
    assertUuid(command.assistantId, 'assistant');
    const name = path.basename(command.fileName.replace(/\\/g, '/')).trim();
    if (!name) throw ApiError.badRequest('A document needs a file name.', 'file');
    if (name.length > MAX_FILE_NAME_LENGTH) {
      throw ApiError.badRequest(`The file name is longer than ${MAX_FILE_NAME_LENGTH} characters.`, 'file');
    }
    const sizeBytes = command.data.length;
    if (sizeBytes > MAX_FILE_BYTES) throw fileTooLarge(name, sizeBytes);
    if (sizeBytes === 0) throw ApiError.badRequest(`${name} is empty.`, 'file', 'empty_file');
    const format = detectFormat(name, command.mimeType);

    const assistant = await this.assistants.findOneBy({ id: command.assistantId, workspaceId: command.workspaceId });
    if (!assistant) throw assistantNotFound(command.assistantId);
    // Fail fast, before the expensive part; checked again when storing.
    await this.checkLimits(this.documents.manager, command.workspaceId, name, sizeBytes);
    return { name, sizeBytes, format, assistant };
  }

  /** One upload at a time per workspace past this point, so concurrent uploads cannot pass the limits together. */
  private async lockAndCheckLimits(manager: EntityManager, workspaceId: string, name: string, sizeBytes: number): Promise<void> {
    await manager.query('SELECT pg_advisory_xact_lock(hashtextextended($1, 0))', [`documents:${workspaceId}`]);
    await this.checkLimits(manager, workspaceId, name, sizeBytes);
  }

  /** The assistant's documents, oldest first. */
  async list(assistantId: string): Promise<Document[]> {
    assertUuid(assistantId, 'assistant');
    return this.documents.find({ where: { assistantId }, order: { createdAt: 'ASC', id: 'ASC' } });
  }

  /** How many documents each assistant of the workspace has (assistants without any are absent). */
  async countsByAssistant(workspaceId: string): Promise<Map<string, number>> {
    assertUuid(workspaceId, 'workspace');
    const rows = await this.documents.query<Array<{ assistant_id: string; documents: number }>>(
      'SELECT assistant_id, count(*)::int AS documents FROM documents WHERE workspace_id = $1 GROUP BY assistant_id',
      [workspaceId],
    );
    return new Map(rows.map((row) => [row.assistant_id, row.documents]));
  }

  /** For operators: a document by id, whatever its workspace. */
  async get(documentId: string): Promise<Document> {
    assertUuid(documentId, 'document');
    const document = await this.documents.findOneBy({ id: documentId });
    if (!document) throw documentNotFound(documentId);
    return document;
  }

  /** For operators: an assistant by id (404 if there is none), to know its workspace. */
  async getAssistant(assistantId: string): Promise<Assistant> {
    assertUuid(assistantId, 'assistant');
    const assistant = await this.assistants.findOneBy({ id: assistantId });
    if (!assistant) throw assistantNotFound(assistantId);
    return assistant;
  }

  /** Deletes a document of the workspace and (by cascade) its chunks; another workspace's is unknown. */
  async remove(workspaceId: string, documentId: string): Promise<{ id: string; deleted: true }> {
    assertUuid(workspaceId, 'workspace');
    assertUuid(documentId, 'document');
    const [gone] = updatedRows<{ assistant_id: string }>(
      await this.documents.query('DELETE FROM documents WHERE id = $1 AND workspace_id = $2 RETURNING assistant_id', [documentId, workspaceId]),
    );
    if (!gone) throw documentNotFound(documentId);
    // Its vectors leave every process's cache of the assistant's (dense-search.ts).
    await this.documents.query('UPDATE assistants SET embedding_generation = embedding_generation + 1 WHERE id = $1', [gone.assistant_id]);
    return { id: documentId, deleted: true };
  }

  /** Documents and bytes stored by a workspace, with its tier's limits (-1: none). */
  async usage(workspaceId: string): Promise<{ documents: number; bytes: number; maxDocuments: number; maxTotalBytes: number }> {
    assertUuid(workspaceId, 'workspace');
    const workspace = await this.workspaces.get(workspaceId);
    const used = await stored(this.documents.manager, workspaceId);
    return { ...used, ...DOCUMENT_LIMITS[workspace.tier] };
  }

  /**
   * The assistant's chunks that best match `query`, best first: the lexical leg
   * (lexical-search.ts: full text in each document's language plus trigrams for typos and
   * identifiers) and, when the assistant or its workspace names an embedding model, the dense
   * leg (DenseSearch: nearest chunk vectors by cosine), fused by reciprocal rank fusion
   * (rank-fusion.ts, k = 60). A fused score is 1 for a passage first in both legs and about
   * 0.5 for one first in only one; `scoreThreshold` applies to it. Without an embedding
   * model (or when the query cannot be embedded), the lexical leg alone, with its own score.
   * An empty or stop-word-only query finds nothing.
   */
  async search(assistantId: string, query: string, options: FileSearchOptions): Promise<FileSearchResult[]> {
    assertUuid(assistantId, 'assistant');
    const limit = Math.min(MAX_SEARCH_RESULTS, Math.max(1, Math.floor(options.maxResults) || 1));
    const text = query.trim();
    if (!text || options.documentIds?.length === 0) return [];
    const threshold = options.scoreThreshold ?? 0;
    const setting = await this.dense.settingOf(assistantId);
    if (!setting) return this.lexical(assistantId, text, limit, options).then((results) => results.filter((result) => result.score >= threshold));
    // The legs at once: PostgreSQL ranks the words while this process embeds the query and scans the vectors.
    const [dense, lexical] = await Promise.all([
      this.dense.search(assistantId, text, FUSION_CANDIDATES, options.documentIds, setting),
      this.lexical(assistantId, text, FUSION_CANDIDATES, options),
    ]);
    // The query could not be embedded: the lexical leg alone, with its own scores.
    if (!dense) return lexical.filter((result) => result.score >= threshold).slice(0, limit);

    const keyOf = (documentId: string, position: number) => `${documentId}:${position}`;
    const found = new Map(lexical.map((result) => [keyOf(result.document_id, result.position), result]));
    const denseIds = new Map(dense.map((hit) => [keyOf(hit.documentId, hit.position), hit.chunkId]));
    const fused = fuseRankings([lexical.map((r) => keyOf(r.document_id, r.position)), [...denseIds.keys()]])
      .filter((item) => item.score >= threshold)
      .slice(0, limit);
    // The passages only the dense leg found are read now, with their documents' names.
    const missing = fused.filter((item) => !found.has(item.key)).map((item) => denseIds.get(item.key)!);
    if (missing.length > 0) {
      const rows = await this.documents.query<Array<Omit<FileSearchResult, 'score'>>>(
        `SELECT c.document_id, d.name AS document_name, c.position, c.content
         FROM document_chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ANY($1::bigint[])`,
        [missing],
      );
      for (const row of rows) found.set(keyOf(row.document_id, row.position), { ...row, score: 0 });
    }
    // A chunk deleted since its vector was cached is left out.
    return fused
      .filter((item) => found.has(item.key))
      .map((item) => ({ ...found.get(item.key)!, score: Math.round(item.score * 10_000) / 10_000 }));
  }

  private lexical(assistantId: string, text: string, limit: number, options: FileSearchOptions): Promise<FileSearchResult[]> {
    return lexicalSearch(this.documents.manager, assistantId, text, { limit, documentIds: options.documentIds });
  }

  /** Results as the content of a `file_search` tool message: each passage with its document and position. */
  formatResultsForModel(results: FileSearchResult[], numbers?: ReadonlyArray<number | undefined>): string {
    return formatResultsForModel(results, numbers);
  }

  private async checkLimits(manager: EntityManager, workspaceId: string, name: string, sizeBytes: number): Promise<void> {
    // Read again at each check: the tier may change while a large file is being read.
    const workspace = await this.workspaces.get(workspaceId);
    const limits = DOCUMENT_LIMITS[workspace.tier];
    const used = await stored(manager, workspaceId);
    if (limits.maxDocuments !== UNLIMITED && used.documents >= limits.maxDocuments) {
      throw ApiError.permissionDenied(
        `The ${workspace.tier} tier allows ${limits.maxDocuments} document${limits.maxDocuments === 1 ? '' : 's'} per workspace, ` +
          `and this workspace has ${used.documents}. Remove a document or upgrade the tier.`,
        'document_limit_reached',
      );
    }
    if (limits.maxTotalBytes !== UNLIMITED && used.bytes + sizeBytes > limits.maxTotalBytes) {
      throw ApiError.permissionDenied(
        `The ${workspace.tier} tier allows ${formatBytes(limits.maxTotalBytes)} of documents per workspace; ` +
          `this workspace stores ${formatBytes(used.bytes)} and ${name} is ${formatBytes(sizeBytes)}. ` +
          'Remove documents or upgrade the tier.',
        'document_storage_limit_reached',
      );
    }
  }
}

/**
 * Passages as the model reads them: each numbered, its document and position, then its text.
 * `numbers` are the citation numbers of the request (a passage past the numbered sources is
 * `-`); without them, 1, 2, 3...
 */
export function formatResultsForModel(results: FileSearchResult[], numbers?: ReadonlyArray<number | undefined>): string {
  if (results.length === 0) return 'No passage of the documents matches.';
  return results
    .map((result, i) => {
      const number = numbers ? numbers[i] : i + 1;
      return `${number === undefined ? '-' : `[${number}]`} ${result.document_name}, passage ${result.position + 1}\n${result.content}`;
    })
    .join('\n\n---\n\n');
}

/** The chunks, indexed for full text with the document's language. */
async function insertChunks(
  manager: EntityManager,
  document: Pick<Document, 'id' | 'assistantId' | 'language'>,
  chunks: TextChunk[],
): Promise<void> {
  for (let start = 0; start < chunks.length; start += INSERT_BATCH) {
    const batch = chunks.slice(start, start + INSERT_BATCH);
    await manager.query(
      `INSERT INTO document_chunks (document_id, assistant_id, position, content, tokens, language, content_tsv)
       SELECT $1, $2, p.position, p.content, p.tokens, $6::text, to_tsvector($6::text::regconfig, p.content)
       FROM unnest($3::int[], $4::text[], $5::int[]) AS p(position, content, tokens)`,
      [
        document.id,
        document.assistantId,
        batch.map((_, i) => start + i),
        batch.map((chunk) => chunk.content),
        batch.map((chunk) => chunk.tokens),
        document.language,
      ],
    );
  }
}

/** The assistant's chunk size and overlap. */
function chunkingOf(assistant: Pick<Assistant, 'chunkMaxTokens' | 'chunkOverlapTokens'>): ChunkingOptions {
  return { maxTokens: assistant.chunkMaxTokens, overlapTokens: assistant.chunkOverlapTokens };
}

/** The language of a document, from the start of its text (its first chunks). */
function languageOf(chunks: TextChunk[]): TextLanguage {
  return detectTextLanguage(
    chunks
      .slice(0, 10)
      .map((chunk) => chunk.content)
      .join('\n\n'),
  );
}

/**
 * When the document's assistant (or its workspace) names an embedding model, the document's
 * chunks are due to be embedded, under an embedding lease of `leaseSeconds` for the caller
 * (0: for any process's sweep). `newRound` for chunks that replace embedded ones (a
 * re-index): their batches are charged under new idempotency keys.
 */
async function markEmbeddingsDue(manager: EntityManager, documentId: string, leaseSeconds: number, { newRound = false } = {}): Promise<void> {
  const [due] = updatedRows<{ assistant_id: string }>(
    await manager.query(
      `UPDATE documents d SET embeddings_due = true,
         embedding_round = d.embedding_round + CASE WHEN $3 THEN 1 ELSE 0 END,
         embedding_lease_until = CASE WHEN $2 > 0 THEN now() + make_interval(secs => $2) END
       FROM assistants a JOIN workspaces w ON w.id = a.workspace_id
       WHERE d.id = $1 AND a.id = d.assistant_id AND coalesce(a.embedding_model, w.embedding_model) IS NOT NULL
       RETURNING d.assistant_id`,
      [documentId, leaseSeconds, newRound],
    ),
  );
  // Re-indexed chunks replace vectors that every process may have cached: a new generation.
  if (due && newRound) await manager.query('UPDATE assistants SET embedding_generation = embedding_generation + 1 WHERE id = $1', [due.assistant_id]);
}

async function stored(manager: EntityManager, workspaceId: string): Promise<{ documents: number; bytes: number }> {
  const [row] = await manager.query<Array<{ documents: number; bytes: string }>>(
    // A failed upload stores nothing and takes no room; one still processing does.
    "SELECT count(*)::int AS documents, coalesce(sum(size_bytes), 0)::bigint AS bytes FROM documents WHERE workspace_id = $1 AND status <> 'failed'",
    [workspaceId],
  );
  return { documents: row.documents, bytes: Number(row.bytes) };
}

/** The rows of an UPDATE or DELETE ... RETURNING: TypeORM's PostgreSQL driver answers `[rows, affected]` for it. */
function updatedRows<T = unknown>(result: unknown): T[] {
  return (result as [T[], number])[0];
}

/**
 * What a person is told when their upload could not be read. A PDF without text is almost
 * always a scan: say so, and what to do. Anything unexpected is logged by the caller and
 * told in general terms (never a stack trace).
 */
export function failureReason(error: unknown, name: string, mimeType: string): string {
  if (error instanceof ApiError && error.status < 500) {
    if (error.code === 'no_text' && mimeType === mimeTypeOf('pdf')) {
      return `No text found in ${name}: it looks like a scanned PDF (pictures of pages, no text layer). Scanned PDFs need OCR: run it through OCR and upload the result.`;
    }
    if (error.code === 'no_text') return `No text found in ${name}: there is nothing to search in it.`;
    return error.message;
  }
  return `${name} could not be read because of an error on our side. Delete it and upload it again; if it fails again, tell the operator.`;
}

/** The document's insert failed on its assistant's foreign key: the assistant was deleted meanwhile. */
function rethrowDeletedAssistant(assistantId: string): (error: unknown) => never {
  return (error: unknown) => {
    if ((error as { code?: string }).code === '23503') throw assistantNotFound(assistantId);
    throw error;
  };
}

function assistantNotFound(assistantId: string): ApiError {
  return ApiError.notFound(`No assistant with id ${assistantId}.`, 'assistant_not_found', 'assistant');
}

function documentNotFound(documentId: string): ApiError {
  return ApiError.notFound(`No document with id ${documentId}.`, 'document_not_found', 'document');
}
