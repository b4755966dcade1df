import { Injectable, Logger } from '@nestjs/common';
import * as os from 'node:os';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { Cancellation } from '../../common/cancellation';
import { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import type { ModelDefinition } from '../../models/model-catalog';
import { ModelsService } from '../../models/models.service';
import { ProvidersService } from '../../providers/providers.service';
import { DocumentChunk } from './entities/document-chunk.entity';

/**
 * The dense leg of `file_search`: exact nearest neighbours by cosine similarity over an
 * assistant's chunk vectors. PostgreSQL keeps each vector as float32 bytes (the truth); each
 * process keeps the vectors of the assistants it searched, normalised, in one Float32Array
 * per assistant (VectorCache), and scans it with a plain dot-product loop: exact, and fast
 * enough without an index (bench/README.md, "file_search"). The embedded PostgreSQL has no
 * pgvector, so the same exact search serves every database.
 */

/** Typed arrays use the machine's byte order: on a little-endian one they are the stored bytes as they are. */
const LITTLE_ENDIAN = os.endianness() === 'LE';

/** A vector as stored: float32, little-endian, 4 bytes a dimension. */
export function encodeVector(vector: Float32Array): Buffer {
  if (LITTLE_ENDIAN) return Buffer.from(Float32Array.from(vector).buffer);
  const bytes = Buffer.alloc(vector.length * 4);
  for (let i = 0; i < vector.length; i++) bytes.writeFloatLE(vector[i], i * 4);
  return bytes;
}

/** A stored vector back (any alignment of the buffer). */
export function decodeVector(bytes: Buffer): Float32Array {
  // A copy: the driver's buffer may start at an offset that is not a multiple of 4.
  if (LITTLE_ENDIAN) return new Float32Array(Uint8Array.from(bytes).buffer, 0, bytes.length >> 2);
  const vector = new Float32Array(bytes.length / 4);
  for (let i = 0; i < vector.length; i++) vector[i] = bytes.readFloatLE(i * 4);
  return vector;
}

/** Scales `vector` in place to length 1 (a zero vector stays zero), so that a dot product is the cosine. */
export function normalize(vector: Float32Array): Float32Array {
  let norm = 0;
  for (let i = 0; i < vector.length; i++) norm += vector[i] * vector[i];
  if (norm === 0) return vector;
  const scale = 1 / Math.sqrt(norm);
  for (let i = 0; i < vector.length; i++) vector[i] *= scale;
  return vector;
}

/**
 * The dot product of `q` with the vector at `offset` of `vectors`: four sums at once, which
 * V8 runs about twice as fast as one (bench/README.md, "file_search").
 */
function dotAt(q: Float32Array, vectors: Float32Array, offset: number): number {
  const n = q.length;
  const end4 = n - (n % 4);
  let s0 = 0;
  let s1 = 0;
  let s2 = 0;
  let s3 = 0;
  let i = 0;
  for (; i < end4; i += 4) {
    const o = offset + i;
    s0 += q[i] * vectors[o];
    s1 += q[i + 1] * vectors[o + 1];
    s2 += q[i + 2] * vectors[o + 2];
    s3 += q[i + 3] * vectors[o + 3];
  }
  for (; i < n; i++) s0 += q[i] * vectors[offset + i];
  return s0 + s1 + (s2 + s3);
}

/** One chunk found by the dense leg. */
export interface DenseHit {
  chunkId: string;
  documentId: string;
  position: number;
  /** Cosine similarity, -1 to 1. */
  similarity: number;
}

/** The normalised vectors of one assistant's chunks, of one model, in one block of memory. */
export class VectorIndex {
  readonly size: number;

  constructor(
    readonly dimensions: number,
    /** Row i's vector is vectors[i * dimensions .. (i + 1) * dimensions). */
    private readonly vectors: Float32Array,
    private readonly chunkIds: string[],
    private readonly documentIds: string[],
    private readonly positions: Int32Array,
  ) {
    this.size = chunkIds.length;
  }

  /** Builds the index of stored rows; each vector is normalised. Rows of another size than the first are left out. */
  static of(rows: Array<{ id: string; document_id: string; position: number; embedding: Buffer }>): VectorIndex {
    const dimensions = rows.length > 0 ? rows[0].embedding.length / 4 : 0;
    const kept = rows.filter((row) => row.embedding.length === dimensions * 4);
    const vectors = new Float32Array(kept.length * dimensions);
    kept.forEach((row, i) => vectors.set(normalize(decodeVector(row.embedding)), i * dimensions));
    return new VectorIndex(
      dimensions,
      vectors,
      kept.map((row) => String(row.id)),
      kept.map((row) => row.document_id),
      Int32Array.from(kept, (row) => row.position),
    );
  }

  /** Memory it holds, for the cache's budget. */
  get bytes(): number {
    return this.vectors.byteLength + this.size * 120;
  }

  /**
   * The `limit` rows most similar to `query` (normalised here), best first; only rows of
   * `documentIds` when given. Exact: every row is compared.
   */
  search(query: Float32Array, limit: number, documentIds?: ReadonlySet<string>): DenseHit[] {
    const { dimensions, vectors } = this;
    if (query.length !== dimensions || limit <= 0) return [];
    const q = normalize(Float32Array.from(query));
    // The best `limit` so far, worst last: a new row enters only when it beats the last.
    const bestRows: number[] = [];
    const bestScores: number[] = [];
    for (let row = 0; row < this.size; row++) {
      if (documentIds && !documentIds.has(this.documentIds[row])) continue;
      const dot = dotAt(q, vectors, row * dimensions);
      if (bestRows.length === limit && dot <= bestScores[limit - 1]) continue;
      let at = bestRows.length === limit ? limit - 1 : bestRows.length;
      while (at > 0 && bestScores[at - 1] < dot) {
        bestScores[at] = bestScores[at - 1];
        bestRows[at] = bestRows[at - 1];
        at--;
      }
      bestScores[at] = dot;
      bestRows[at] = row;
    }
    return bestRows.map((row, i) => ({
      chunkId: this.chunkIds[row],
      documentId: this.documentIds[row],
      position: this.positions[row],
      similarity: bestScores[i],
    }));
  }
}

/**
 * Each assistant's VectorIndex, as of its `embedding_generation` and model, within a byte
 * budget (VECTOR_CACHE_MB): the least recently searched go first. A search reads the
 * generation from PostgreSQL and loads the vectors again when it moved, so every replica
 * sees a change at its next search.
 */
export class VectorCache {
  private readonly entries = new Map<string, { generation: string; model: string; index: VectorIndex }>();
  private used = 0;

  constructor(readonly budgetBytes: number) {}

  get(assistantId: string, generation: string, model: string): VectorIndex | undefined {
    const entry = this.entries.get(assistantId);
    if (!entry || entry.generation !== generation || entry.model !== model) return undefined;
    // Most recently used last.
    this.entries.delete(assistantId);
    this.entries.set(assistantId, entry);
    return entry.index;
  }

  /** The index of the assistant's vectors of `model` as of an older generation, if kept (see DenseSearch.index). */
  stale(assistantId: string, model: string): VectorIndex | undefined {
    const entry = this.entries.get(assistantId);
    return entry && entry.model === model ? entry.index : undefined;
  }

  /** Keeps the index if it fits the budget (evicting the least recently used); one larger than the budget is not kept. */
  put(assistantId: string, generation: string, model: string, index: VectorIndex): void {
    this.drop(assistantId);
    if (index.bytes > this.budgetBytes) return;
    for (const [id, entry] of this.entries) {
      if (this.used + index.bytes <= this.budgetBytes) break;
      this.entries.delete(id);
      this.used -= entry.index.bytes;
    }
    this.entries.set(assistantId, { generation, model, index });
    this.used += index.bytes;
  }

  drop(assistantId: string): void {
    const entry = this.entries.get(assistantId);
    if (!entry) return;
    this.entries.delete(assistantId);
    this.used -= entry.index.bytes;
  }

  get usedBytes(): number {
    return this.used;
  }
}

/** The dense leg's answer: the chunks nearest to the query, best first; null when the assistant has no embedding model. */
export type DenseRanking = DenseHit[] | null;

/** What the dense leg of an assistant searches with: its embedding model, and the generation of its vectors. */
export interface DenseSetting {
  model: ModelDefinition;
  generation: string;
}

/** How long the query's embedding may take before the search goes on with the lexical leg alone. */
const QUERY_EMBEDDING_TIMEOUT_MS = 10_000;

/**
 * The dense leg for DocumentsService.search: the assistant's embedding model (its own, else
 * its workspace's) and vectors' generation in one query, the query embedded through the
 * model's deployments, and the exact search over the cached vectors (loaded again when the
 * generation moved). The query's embedding is part of the `file_search` call's price. When it
 * fails (the upstream is down), the search goes on lexical-only, as without a model.
 */
@Injectable()
export class DenseSearch {
  private readonly logger = new Logger('DenseSearch');
  readonly cache: VectorCache;
  /** Loads under way, so that concurrent searches of one assistant load its vectors once. */
  private readonly loading = new Map<string, Promise<VectorIndex>>();

  constructor(
    @InjectRepository(DocumentChunk) private readonly chunks: Repository<DocumentChunk>,
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    @InjectConfig() config: AppConfig,
  ) {
    this.cache = new VectorCache(config.documents.vectorCacheBytes);
  }

  /** The assistant's embedding model (of the catalog) and its vectors' generation; null: lexical-only. */
  async settingOf(assistantId: string): Promise<DenseSetting | null> {
    const [setting] = await this.chunks.query<Array<{ model: string | null; generation: string }>>(ASSISTANT_VECTORS_SQL, [assistantId]);
    const model = setting?.model ? this.models.find(setting.model) : undefined;
    return model && model.kind === 'embedding' ? { model, generation: setting.generation } : null;
  }

  /** The dense ranking, or null when the assistant has no embedding model or the query cannot be embedded. */
  async search(assistantId: string, query: string, limit: number, documentIds?: string[], known?: DenseSetting | null): Promise<DenseRanking> {
    const setting = known === undefined ? await this.settingOf(assistantId) : known;
    if (!setting) return null;
    const { model } = setting;
    let vector: Float32Array;
    const run = new Cancellation();
    const timer = setTimeout(() => run.abort(), QUERY_EMBEDDING_TIMEOUT_MS).unref();
    try {
      // No fallback model: the query must be embedded in the chunks' space (their model's deployments fail over).
      const result = await this.providers.embed({ model, fallbacks: [], input: [query], route: { attempting: () => undefined, answered: () => undefined } }, run);
      vector = result.vectors[0];
    } catch (error) {
      this.logger.warn(`Embedding a file_search query with ${model.id} failed, searching lexically only: ${String(error)}`);
      return null;
    } finally {
      clearTimeout(timer);
    }
    const index = await this.index(assistantId, setting.generation, model.id);
    // A chunk no closer to the query than orthogonal is no match: fused in, it would only push real ones down.
    return index.search(vector, limit, documentIds ? new Set(documentIds) : undefined).filter((hit) => hit.similarity > 0);
  }

  /**
   * The assistant's vectors of `model` as of `generation`: from the cache, or loaded (once for
   * concurrent searches). While a newer generation loads, searches use the one kept before
   * (seconds for a large assistant): a chunk just embedded is found by the lexical leg meanwhile,
   * and one just deleted is left out when the results are read.
   */
  private async index(assistantId: string, generation: string, model: string): Promise<VectorIndex> {
    const cached = this.cache.get(assistantId, generation, model);
    if (cached) return cached;
    const load = this.load(assistantId, generation, model);
    const stale = this.cache.stale(assistantId, model);
    if (!stale) return load;
    load.catch((error: unknown) => this.logger.warn(`Loading the vectors of assistant ${assistantId} failed: ${String(error)}`));
    return stale;
  }

  private load(assistantId: string, generation: string, model: string): Promise<VectorIndex> {
    const key = `${assistantId}:${generation}:${model}`;
    let load = this.loading.get(key);
    if (!load) {
      load = this.chunks
        .query<Array<{ id: string; document_id: string; position: number; embedding: Buffer }>>(
          `SELECT id::text AS id, document_id, position, embedding FROM document_chunks
           WHERE assistant_id = $1 AND embedding_model = $2 AND embedding IS NOT NULL`,
          [assistantId, model],
        )
        .then((rows) => {
          const index = VectorIndex.of(rows);
          this.cache.put(assistantId, generation, model, index);
          return index;
        })
        .finally(() => this.loading.delete(key));
      this.loading.set(key, load);
    }
    return load;
  }
}

/** The assistant's embedding model (its own, else its workspace's) and its vectors' generation. */
const ASSISTANT_VECTORS_SQL = `
  SELECT coalesce(a.embedding_model, w.embedding_model) AS model, a.embedding_generation::text AS generation
  FROM assistants a JOIN workspaces w ON w.id = a.workspace_id WHERE a.id = $1`;
