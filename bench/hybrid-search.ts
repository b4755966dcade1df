/**
 * The dense leg of `file_search` on the embedded default (no pgvector): what hybrid search
 * and ingestion with embeddings cost. The part of the file-search benchmark
 * (bench/file-search.ts) that needs vectors.
 *
 *   npm run -s build && node dist/bench/hybrid-search.js
 *
 * 1. DocumentsService.search (lexical leg, dense leg over the cached vectors, fusion) over
 *    one assistant holding 50,000 chunks with 256- and then 1,536-dimension vectors: the
 *    first search (it loads the vectors into the cache), then p50/p95/p99 one query at a time.
 *    The query's embedding comes from a fake OpenAI upstream on loopback (test/fakes).
 * 2. A generated 100-page PDF through DocumentsService.add, then its chunks embedded through
 *    DocumentEmbeddings (batches, holds, settlements, vectors stored), from the same fake.
 *
 * Everything runs on its own embedded PostgreSQL in a temporary directory, removed at the
 * end. Results are printed and written to bench/results/hybrid-search-latest.json.
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import PDFDocument from 'pdfkit';
import { DataSource } from 'typeorm';
import { DenseSearch, encodeVector, normalize } from '../src/assistants/documents/dense-search';
import { DocumentEmbeddings } from '../src/assistants/documents/document-embeddings';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { loadConfig } from '../src/config/app-config';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import { startFakeOpenAi } from '../test/fakes/fake-openai';
import { type BenchContext, closeApp, elapsedMs, rng, runBench, summarizeMs, table, writeResults } from './harness';

const SETTINGS = {
  chunks: 50_000,
  dimensions: [256, 1_536],
  /** Rows per INSERT while loading the chunks. */
  insertBatch: 1_000,
  queries: 200,
  warmupQueries: 20,
  maxResults: 5,
  pdfPages: 100,
  paragraphsPerPage: 5,
  hardTimeoutMs: 1_800_000,
} as const;

/** Made-up words with a Zipf-like frequency (rank r drawn ~ 1 / (r + 51)), so that the lexical leg ranks as on real text. */
const SYLLABLES = 'ba ce di fo gu ha ke li mo nu pa re si to vu wa xe yo za bri cla dro fle gro'.split(' ');
const STOP_WORDS = 'the a of and to in is for on with as by at from that this it'.split(' ');

const VOCABULARY = (() => {
  const random = rng(31);
  const words = new Set<string>();
  while (words.size < 8_000) words.add(Array.from({ length: 2 + Math.floor(random() * 3) }, () => SYLLABLES[Math.floor(random() * SYLLABLES.length)]).join(''));
  const list = [...words];
  const cumulative: number[] = [];
  let total = 0;
  list.forEach((_, rank) => cumulative.push((total += 1 / (rank + 51))));
  return {
    list,
    draw(random: () => number): string {
      const target = random() * total;
      let low = 0;
      let high = cumulative.length - 1;
      while (low < high) {
        const middle = (low + high) >> 1;
        if (cumulative[middle] < target) low = middle + 1;
        else high = middle;
      }
      return list[low];
    },
  };
})();

function paragraph(random: () => number): string {
  const sentences = Array.from({ length: 4 + Math.floor(random() * 4) }, () => {
    const words = Array.from({ length: 8 + Math.floor(random() * 12) }, () =>
      random() < 0.4 ? STOP_WORDS[Math.floor(random() * STOP_WORDS.length)] : VOCABULARY.draw(random),
    );
    return `${words.join(' ')}.`;
  });
  return sentences.join(' ');
}

/** A deterministic unit vector for a text, from its SHA-256 (the fake upstream's vectors). */
function vectorOf(input: string | number[], dimensions: number): Float32Array {
  const random = rng(createHash('sha256').update(JSON.stringify(input)).digest().readUInt32LE(0));
  return normalize(Float32Array.from({ length: dimensions }, () => random() * 2 - 1));
}

function makePdf(pages: number): Promise<Buffer> {
  const random = rng(2024);
  return new Promise((resolve, reject) => {
    const pdf = new PDFDocument({ autoFirstPage: false });
    const parts: Buffer[] = [];
    pdf.on('data', (part: Buffer) => parts.push(part));
    pdf.on('end', () => resolve(Buffer.concat(parts)));
    pdf.on('error', reject);
    for (let page = 1; page <= pages; page++) {
      pdf.addPage({ size: 'A4', margin: 56 });
      for (let i = 0; i < SETTINGS.paragraphsPerPage; i++) pdf.fontSize(9.5).text(paragraph(random), { align: 'justify' }).moveDown(0.5);
    }
    pdf.end();
  });
}


async function main({ databaseUrl, log, onCleanup, startedAt, startLoad }: BenchContext): Promise<number> {
  const upstream = await startFakeOpenAi();
  onCleanup(() => upstream.close());
  let upstreamDimensions = 256;
  upstream.embedWith((input) => vectorOf(input, upstreamDimensions));
  process.env.BENCH_EMBEDDINGS_KEY = 'sk-bench';
  const embedding = (dimensions: number) => ({
    id: `bench-embed-${dimensions}`,
    provider: 'openai',
    kind: 'embedding',
    dimensions,
    context_length: 8_192,
    input_price: 2_000,
    output_price: 0,
    deployments: [{ label: 'fake', provider: 'openai', base_url: upstream.url, api_key_env: 'BENCH_EMBEDDINGS_KEY' }],
  });
  const catalogFile = path.join(mkdtempSync(path.join(os.tmpdir(), 'hybrid-bench-')), 'models.json');
  writeFileSync(
    catalogFile,
    JSON.stringify({
      models: [
        ...SETTINGS.dimensions.map(embedding),
        { id: 'gpt-4o-mini', provider: 'simulator', context_length: 128_000, max_output_tokens: 16_384, input_price: 15_000, output_price: 60_000 },
      ],
    }),
  );
  const config = { ...loadConfig(), modelCatalogFile: catalogFile, llmSimulator: 'off' as const };

  @Module({ imports: [ConfigModule.forRoot(config), TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }), DocumentsModule] })
  class BenchModule {}
  const app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error'] });
  onCleanup(() => closeApp(app));
  const documents = app.get(DocumentsService);
  const dense = app.get(DenseSearch);
  const dataSource = app.get(DataSource);
  const [workspace] = await dataSource.query<Array<{ id: string }>>(`INSERT INTO workspaces (name, tier) VALUES ('Bench', 'enterprise') RETURNING id`);
  await dataSource.query(`INSERT INTO wallets (workspace_id, balance_millicents) VALUES ($1, 1000000000)`, [workspace.id]);
  let assistants = 0;
  const newAssistant = async (model: string) => {
    const [row] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO assistants (workspace_id, name, slug, model, embedding_model) VALUES ($1, 'Bench', $2, 'gpt-4o-mini', $3) RETURNING id`,
      [workspace.id, `bench-${++assistants}`, model],
    );
    return row.id;
  };

  // --- 1. Hybrid search over 50,000 chunks, at each size of vectors -----------------------
  const searches: Array<Record<string, unknown>> = [];
  for (const dimensions of SETTINGS.dimensions) {
    upstreamDimensions = dimensions;
    const model = `bench-embed-${dimensions}`;
    const assistantId = await newAssistant(model);
    const loadStart = process.hrtime.bigint();
    const random = rng(dimensions);
    const [document] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO documents (workspace_id, assistant_id, name, mime_type, size_bytes, chunk_count) VALUES ($1, $2, 'notes.txt', 'text/plain', 1, $3) RETURNING id`,
      [workspace.id, assistantId, SETTINGS.chunks],
    );
    for (let start = 0; start < SETTINGS.chunks; start += SETTINGS.insertBatch) {
      const positions = Array.from({ length: Math.min(SETTINGS.insertBatch, SETTINGS.chunks - start) }, (_, i) => start + i);
      const contents = positions.map(() => paragraph(random));
      await dataSource.query(
        `INSERT INTO document_chunks (document_id, assistant_id, position, content, tokens, embedding, embedding_model)
         SELECT $1, $2, p.position, p.content, 100, p.embedding, $6
         FROM unnest($3::int[], $4::text[], $5::bytea[]) AS p(position, content, embedding)`,
        [document.id, assistantId, positions, contents, contents.map((content) => encodeVector(vectorOf(content, dimensions))), model],
      );
    }
    await dataSource.query('VACUUM ANALYZE document_chunks');
    const loadSeconds = Math.round(elapsedMs(loadStart) / 100) / 10;
    log(`${SETTINGS.chunks} chunks with ${dimensions}-dimension vectors stored in ${loadSeconds} s`);

    const queryRandom = rng(7 + dimensions);
    // A question of 3 to 5 words drawn by frequency, as a model phrases one.
    const query = () => `how does the ${Array.from({ length: 3 + Math.floor(queryRandom() * 3) }, () => VOCABULARY.draw(queryRandom)).join(' ')} work`;
    const coldStart = process.hrtime.bigint();
    await documents.search(assistantId, query(), { maxResults: SETTINGS.maxResults });
    const coldMs = Math.round(elapsedMs(coldStart));
    for (let i = 0; i < SETTINGS.warmupQueries; i++) await documents.search(assistantId, query(), { maxResults: SETTINGS.maxResults });
    const queries = Array.from({ length: SETTINGS.queries }, query);
    const hybrid: number[] = [];
    const denseOnly: number[] = [];
    for (const text of queries) {
      let start = process.hrtime.bigint();
      const results = await documents.search(assistantId, text, { maxResults: SETTINGS.maxResults });
      hybrid.push(elapsedMs(start));
      if (results.length === 0) throw new Error(`No result for "${text}"`);
      start = process.hrtime.bigint();
      await dense.search(assistantId, text, 50);
      denseOnly.push(elapsedMs(start));
    }
    // The same queries with the lexical leg alone (the assistant without its model), for comparison.
    await dataSource.query('UPDATE assistants SET embedding_model = NULL WHERE id = $1', [assistantId]);
    const lexicalOnly: number[] = [];
    for (const text of queries) {
      const start = process.hrtime.bigint();
      await documents.search(assistantId, text, { maxResults: SETTINGS.maxResults });
      lexicalOnly.push(elapsedMs(start));
    }
    const row = {
      dimensions,
      chunks: SETTINGS.chunks,
      loadSeconds,
      firstSearchMs: coldMs,
      cacheMb: Math.round(dense.cache.usedBytes / 1024 / 1024),
      hybrid: summarizeMs(hybrid),
      dense: summarizeMs(denseOnly),
      lexical: summarizeMs(lexicalOnly),
    };
    searches.push(row);
    log(`${dimensions} dimensions: hybrid p50 ${row.hybrid.p50Ms} ms, p95 ${row.hybrid.p95Ms} ms; first search ${coldMs} ms (loads the vectors)`);
    // Each size alone in the cache, as one large assistant would be.
    dense.cache.drop(assistantId);
  }

  // --- 2. A 100-page PDF, read and embedded ---------------------------------------------------
  upstreamDimensions = 1_536;
  const pdf = await makePdf(SETTINGS.pdfPages);
  const pdfAssistant = await newAssistant('bench-embed-1536');
  const readStart = process.hrtime.bigint();
  const document = await documents.add({ workspaceId: workspace.id, assistantId: pdfAssistant, fileName: 'report.pdf', data: pdf });
  const readMs = Math.round(elapsedMs(readStart));
  const embedStart = process.hrtime.bigint();
  await app.get(DocumentEmbeddings).embed(document.id);
  const embedMs = Math.round(elapsedMs(embedStart));
  const [embedded] = await dataSource.query<Array<{ n: number }>>(
    `SELECT count(*)::int AS n FROM document_chunks WHERE document_id = $1 AND embedding IS NOT NULL`,
    [document.id],
  );
  const calls = upstream.requests.filter((r) => r.path.endsWith('/embeddings')).length;
  const pdfResult = { pages: SETTINGS.pdfPages, bytes: pdf.length, chunks: document.chunkCount, embedded: embedded.n, readMs, embedMs, totalMs: readMs + embedMs };

  log('');
  log(`Hybrid search (lexical + dense + fusion), one assistant, maxResults ${SETTINGS.maxResults}, one query at a time, embedded PostgreSQL without pgvector`);
  log(
    table(
      ['dims', 'chunks', 'cache MB', 'first ms', 'hybrid p50', 'hybrid p95', 'hybrid p99', 'dense leg p50', 'dense leg p95', 'lexical-only p50', 'lexical-only p95'],
      searches.map((s) => {
        const h = s.hybrid as ReturnType<typeof summarizeMs>;
        const d = s.dense as ReturnType<typeof summarizeMs>;
        const l = s.lexical as ReturnType<typeof summarizeMs>;
        return [String(s.dimensions), String(s.chunks), String(s.cacheMb), String(s.firstSearchMs), h.p50Ms, h.p95Ms, h.p99Ms, d.p50Ms, d.p95Ms, l.p50Ms, l.p95Ms];
      }),
    ),
  );
  log('');
  log(
    `PDF: ${pdfResult.pages} pages, ${pdfResult.chunks} chunks: read ${pdfResult.readMs} ms, embedded (1,536 dims, ${calls} calls in all to the fake) ${pdfResult.embedMs} ms`,
  );
  const results = {
    settings: SETTINGS,
    searches,
    pdf: pdfResult,
    loadAverage: { start: startLoad, end: os.loadavg().map((v) => Math.round(v * 10) / 10) },
    wallSeconds: Math.round((Date.now() - startedAt) / 100) / 10,
  };
  const file = await writeResults('hybrid-search', results);
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return 0;
}

runBench('hybrid-search', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
