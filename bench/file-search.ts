/**
 * What do `file_search` ingestion and search cost?
 *
 *   npm run -s build && node dist/bench/file-search.js
 *
 * 1. Ingestion of a generated ~100-page PDF through DocumentsService.add (text extraction in
 *    a worker thread, normalisation, chunking with the o200k tokenizer, one transaction),
 *    three times, with the time of each stage.
 * 2. DocumentsService.search over one assistant holding 10,000 chunks (ingested as text
 *    documents through the same service): p50/p95/p99 per kind of query, one query at a time.
 *
 * 3. `/v1/embeddings` throughput and added latency against Portkey (bench/embeddings.ts), last.
 *
 * Everything runs on its own embedded PostgreSQL in a temporary directory, stopped and
 * removed at the end, on an error, on Ctrl-C, or after the hard timeout. Results are
 * printed and written to bench/results/file-search-latest.json (ignored by git).
 */
import 'reflect-metadata';
import { Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import * as os from 'node:os';
import PDFDocument from 'pdfkit';
import { DataSource } from 'typeorm';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { DocumentsService, IngestionProgress } from '../src/assistants/documents/documents.service';
import { LEXICAL_SEARCH_SQL } from '../src/assistants/documents/lexical-search';
import { loadConfig } from '../src/config/app-config';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import { EMBEDDINGS_BENCH_MS, measureEmbeddings } from './embeddings';
import { type BenchContext, closeApp, elapsedMs, rng, runBench, summarizeMs, table, writeResults } from './harness';

const SETTINGS = {
  pdfPages: 100,
  /** Paragraphs per PDF page, of 4-7 sentences: about 450 words a page, like a dense report. */
  paragraphsPerPage: 5,
  pdfRuns: 3,
  searchChunks: 10_000,
  /** Sentences per text document loaded for the search part (~200 chunks each). */
  sentencesPerTextDocument: 3_600,
  queriesPerKind: 250,
  warmupQueries: 100,
  maxResults: 5,
  /** The chunking the numbers of bench/README.md were measured with (new assistants have 800 and 400). */
  chunking: { maxTokens: 400, overlapTokens: 60 },
  hardTimeoutMs: 900_000,
} as const;

// ---------------------------------------------------------------------------------------
// Deterministic text with a Zipf-like vocabulary: a few very common words, a long tail.
// ---------------------------------------------------------------------------------------
const COMMON = (
  'system data customer service report policy team project process time year market product ' +
  'model energy network security account payment order contract budget risk quality support ' +
  'management information development research analysis performance program production value ' +
  'software hardware server database request response employee manager office travel expense ' +
  'revenue growth cost price sales region country city water power storage battery solar panel ' +
  'engine vehicle train flight hotel meeting schedule release version update feature issue error ' +
  'incident backup recovery cluster memory disk latency throughput capacity invoice refund ' +
  'shipment warehouse inventory supplier partner license audit compliance training course ' +
  'student teacher school hospital patient doctor treatment medicine garden plant soil seed ' +
  'coffee bread recipe kitchen restaurant music film book history museum river mountain forest'
).split(' ');
const STOP = 'the a of and to in is was for on with as by at from that this it be are or an which'.split(' ');
const SYLLABLES = 'ka lo mi ren tas vo pel dun shi gra bre tol fen ques mar ito sul an dro vek lin por zu cha mel orb tri nex'.split(' ');

/**
 * COMMON words first, then 8,000 made-up words, drawn with Zipf-Mandelbrot probability
 * ~ 1 / (rank + 50)^1.05: the offset stands for the stop words that head real English, so
 * the most common content word is ~0.3% of the words (in ~60% of chunks), as in real text.
 */
function vocabulary(): { words: string[]; draw: (random: () => number) => string } {
  const random = rng(99);
  const words = [...COMMON];
  const seen = new Set(words);
  while (words.length < COMMON.length + 8_000) {
    const length = 2 + Math.floor(random() * 3);
    const word = Array.from({ length }, () => SYLLABLES[Math.floor(random() * SYLLABLES.length)]).join('');
    if (!seen.has(word)) {
      seen.add(word);
      words.push(word);
    }
  }
  const cumulative: number[] = [];
  let total = 0;
  for (let rank = 1; rank <= words.length; rank++) cumulative.push((total += 1 / (rank + 50) ** 1.05));
  const draw = (r: () => number) => {
    const target = r() * total;
    let low = 0;
    let high = cumulative.length - 1;
    while (low < high) {
      const middle = (low + high) >> 1;
      if (cumulative[middle] < target) low = middle + 1;
      else high = middle;
    }
    return words[low];
  };
  return { words, draw };
}

const VOCABULARY = vocabulary();

function sentence(random: () => number): string {
  const length = 8 + Math.floor(random() * 16);
  const words = Array.from({ length }, () => (random() < 0.4 ? STOP[Math.floor(random() * STOP.length)] : VOCABULARY.draw(random)));
  const text = words.join(' ');
  return `${text[0].toUpperCase()}${text.slice(1)}.`;
}

function paragraph(random: () => number): string {
  return Array.from({ length: 4 + Math.floor(random() * 4) }, () => sentence(random)).join(' ');
}

function makePdf(pages: number, seed: number): Promise<Buffer> {
  const random = rng(seed);
  return new Promise((resolve, reject) => {
    const pdf = new PDFDocument({ autoFirstPage: false, info: { Title: 'Benchmark report' } });
    const parts: Buffer[] = [];
    pdf.on('data', (part: Buffer) => parts.push(part));
    pdf.on('end', () => resolve(Buffer.concat(parts)));
    pdf.on('error', reject);
    for (let page = 1; page <= pages; page++) {
      pdf.addPage({ size: 'A4', margin: 56 });
      pdf.fontSize(14).text(`Section ${page}`).moveDown(0.5);
      // As many paragraphs as fit on the page: pdfkit would otherwise flow onto new pages.
      for (let i = 0; i < SETTINGS.paragraphsPerPage; i++) pdf.fontSize(9.5).text(paragraph(random), { align: 'justify' }).moveDown(0.5);
    }
    pdf.end();
  });
}

// ---------------------------------------------------------------------------------------
// Statistics.
// ---------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------
async function main(ctx: BenchContext): Promise<number> {
  const { databaseUrl, log, onCleanup, startedAt, startLoad } = ctx;
  // Only the documents module, not the whole app: what is measured is DocumentsService (its
  // reader's limits come from the configuration, read from the environment as the app does).
  @Module({
    imports: [ConfigModule.forRoot(loadConfig()), TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }), DocumentsModule],
  })
  class BenchModule {}
  const app = await NestFactory.createApplicationContext(BenchModule, { logger: ['error'] });
  onCleanup(() => closeApp(app));
  const documents = app.get(DocumentsService);
  const dataSource = app.get(DataSource);
  const [workspace] = await dataSource.query<Array<{ id: string }>>(`INSERT INTO workspaces (name, tier) VALUES ('Bench', 'enterprise') RETURNING id`);
  let assistants = 0;
  const newAssistant = async () => {
    const [row] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO assistants (workspace_id, name, slug, model, chunk_max_tokens, chunk_overlap_tokens)
       VALUES ($1, 'Bench', $2, 'gpt-4o-mini', $3, $4) RETURNING id`,
      [workspace.id, `bench-${++assistants}`, SETTINGS.chunking.maxTokens, SETTINGS.chunking.overlapTokens],
    );
    return row.id;
  };

  // --- 1. A 100-page PDF ----------------------------------------------------------------
  log(`Generating a ${SETTINGS.pdfPages}-page PDF with pdfkit...`);
  const pdf = await makePdf(SETTINGS.pdfPages, 2024);
  interface PdfRun {
    run: number;
    totalMs: number;
    extractMs: number;
    chunkMs: number;
    storeMs: number;
    pages: number;
    chunks: number;
    tokens: number;
    characters: number;
  }
  const pdfRuns: PdfRun[] = [];
  for (let run = 1; run <= SETTINGS.pdfRuns; run++) {
    const assistantId = await newAssistant();
    const marks: Partial<Record<IngestionProgress['stage'], number>> = {};
    let pages = 0;
    const start = process.hrtime.bigint();
    const document = await documents.add({
      workspaceId: workspace.id,
      assistantId,
      fileName: 'report.pdf',
      data: pdf,
      onProgress: (p) => {
        marks[p.stage] ??= elapsedMs(start);
        const match = /page \d+ of (\d+)/.exec(p.message);
        if (match) pages = Number(match[1]);
      },
    });
    const totalMs = elapsedMs(start);
    const [stats] = await dataSource.query<Array<{ tokens: number; characters: number }>>(
      'SELECT sum(tokens)::int AS tokens, sum(length(content))::int AS characters FROM document_chunks WHERE document_id = $1',
      [document.id],
    );
    pdfRuns.push({
      run,
      totalMs: Math.round(totalMs),
      extractMs: Math.round(marks.chunking! - (marks.extracting ?? 0)),
      chunkMs: Math.round(marks.storing! - marks.chunking!),
      storeMs: Math.round(marks.stored! - marks.storing!),
      pages,
      chunks: document.chunkCount,
      tokens: stats.tokens,
      characters: stats.characters,
    });
    log(`PDF run ${run}: ${Math.round(totalMs)} ms, ${pages} pages, ${document.chunkCount} chunks`);
  }
  const medianRun = [...pdfRuns].sort((a, b) => a.totalMs - b.totalMs)[Math.floor(pdfRuns.length / 2)];

  // --- 2. 10,000 chunks in one assistant ------------------------------------------------
  const searchAssistant = await newAssistant();
  let chunks = 0;
  let textDocuments = 0;
  let textBytes = 0;
  const loadStart = process.hrtime.bigint();
  while (chunks < SETTINGS.searchChunks) {
    const random = rng(1000 + textDocuments);
    const paragraphs: string[] = [];
    for (let sentences = 0; sentences < SETTINGS.sentencesPerTextDocument; ) {
      const p = paragraph(random);
      paragraphs.push(p);
      sentences += p.split('. ').length;
    }
    const data = Buffer.from(paragraphs.join('\n\n'));
    const document = await documents.add({ workspaceId: workspace.id, assistantId: searchAssistant, fileName: `notes-${textDocuments}.txt`, data });
    chunks += document.chunkCount;
    textDocuments++;
    textBytes += data.length;
  }
  // Trim to exactly the target: delete chunks from the last document's end.
  const excess = chunks - SETTINGS.searchChunks;
  if (excess > 0) {
    await dataSource.query(
      `DELETE FROM document_chunks WHERE id IN (
         SELECT id FROM document_chunks WHERE assistant_id = $1 ORDER BY id DESC LIMIT $2)`,
      [searchAssistant, excess],
    );
  }
  const loadMs = elapsedMs(loadStart);
  await dataSource.query('VACUUM ANALYZE document_chunks');
  await dataSource.query('VACUUM ANALYZE documents');
  const [{ total }] = await dataSource.query<Array<{ total: number }>>(
    'SELECT count(*)::int AS total FROM document_chunks WHERE assistant_id = $1',
    [searchAssistant],
  );
  const [{ allChunks }] = await dataSource.query<Array<{ allChunks: number }>>('SELECT count(*)::int AS "allChunks" FROM document_chunks');
  log(
    `Loaded ${total} chunks into one assistant from ${textDocuments} text documents (${(textBytes / 1024 / 1024).toFixed(1)} MB) ` +
      `in ${(loadMs / 1000).toFixed(1)} s; ${allChunks} chunks in the table`,
  );

  // Queries: the kinds a model sends.
  const random = rng(7);
  const contentWord = (fromRank: number, toRank: number) => VOCABULARY.words[fromRank + Math.floor(random() * (toRank - fromRank))];
  const sampleChunks = await dataSource.query<Array<{ content: string }>>(
    'SELECT content FROM document_chunks WHERE assistant_id = $1 ORDER BY random() LIMIT $2',
    [searchAssistant, SETTINGS.queriesPerKind],
  );
  const kinds: Record<string, string[]> = {
    'common word (matches most chunks)': Array.from({ length: SETTINGS.queriesPerKind }, () => contentWord(0, 10)),
    'question, 3-5 words by frequency': Array.from({ length: SETTINGS.queriesPerKind }, () => {
      const words = Array.from({ length: 3 + Math.floor(random() * 3) }, () => VOCABULARY.draw(random));
      return `how does the ${words.join(' ')} work`;
    }),
    'two rare words': Array.from({ length: SETTINGS.queriesPerKind }, () => `${contentWord(500, 8000)} ${contentWord(500, 8000)}`),
    'quoted phrase from a chunk': sampleChunks.map((row) => {
      const words = row.content.replace(/[^\w\s]/g, '').split(/\s+/);
      const at = Math.floor(random() * (words.length - 3));
      return `"${words.slice(at, at + 3).join(' ')}"`;
    }),
  };

  for (let i = 0; i < SETTINGS.warmupQueries; i++) {
    await documents.search(searchAssistant, `${VOCABULARY.draw(random)} ${VOCABULARY.draw(random)}`, { maxResults: SETTINGS.maxResults });
  }
  // Interleave the kinds so drift hits them alike.
  const samples: Record<string, number[]> = Object.fromEntries(Object.keys(kinds).map((kind) => [kind, []]));
  const found: Record<string, number> = Object.fromEntries(Object.keys(kinds).map((kind) => [kind, 0]));
  for (let i = 0; i < SETTINGS.queriesPerKind; i++) {
    for (const [kind, queries] of Object.entries(kinds)) {
      const start = process.hrtime.bigint();
      const results = await documents.search(searchAssistant, queries[i], { maxResults: SETTINGS.maxResults });
      samples[kind].push(elapsedMs(start));
      if (results.length > 0) found[kind]++;
    }
  }
  // How many chunks each kind of query has to rank (the OR of its terms), on a sample.
  const candidates: Record<string, number> = {};
  for (const [kind, queries] of Object.entries(kinds)) {
    let sum = 0;
    for (const query of queries.slice(0, 50)) {
      const [{ n }] = await dataSource.query<Array<{ n: number }>>(
        `SELECT count(*)::int AS n FROM document_chunks c, websearch_to_tsquery('english', $2) AS q
         WHERE numnode(q) > 0 AND c.assistant_id = $1
           AND c.content_tsv @@ (CASE WHEN q::text LIKE '%!%' THEN q ELSE replace(q::text, ' & ', ' | ')::tsquery END)`,
        [searchAssistant, query],
      );
      sum += n;
    }
    candidates[kind] = Math.round(sum / Math.min(50, queries.length));
  }
  const all = summarizeMs(Object.values(samples).flat());
  const byKind = Object.entries(samples).map(([kind, ms]) => ({ kind, ...summarizeMs(ms), withResults: found[kind], meanCandidates: candidates[kind] }));

  const planQuery = kinds['question, 3-5 words by frequency'][0];
  const plan = await dataSource.query<Array<{ 'QUERY PLAN': string }>>(`EXPLAIN (ANALYZE, COSTS OFF, SUMMARY ON) ${LEXICAL_SEARCH_SQL}`, [
    searchAssistant,
    planQuery,
    SETTINGS.maxResults,
    null,
  ]);

  // --- Report -----------------------------------------------------------------------------
  log('');
  log(`PDF ingestion: ${SETTINGS.pdfPages} pages, ${(pdf.length / 1024).toFixed(0)} KB, through DocumentsService.add`);
  log(
    table(
      ['run', 'total ms', 'extract ms', 'chunk ms', 'store ms', 'pages', 'chunks', 'tokens', 'characters'],
      pdfRuns.map((r) => [r.run, r.totalMs, r.extractMs, r.chunkMs, r.storeMs, r.pages, r.chunks, r.tokens, r.characters]),
    ),
  );
  log(`Median: ${medianRun.totalMs} ms for ${medianRun.pages} pages (${(medianRun.totalMs / medianRun.pages).toFixed(1)} ms per page)`);
  log('');
  log(`search(): one assistant with ${total} chunks, maxResults ${SETTINGS.maxResults}, one query at a time, ${SETTINGS.warmupQueries} warm-up queries`);
  log(
    table(
      ['query kind', 'n', 'with results', 'chunks ranked', 'mean ms', 'p50 ms', 'p95 ms', 'p99 ms', 'max ms'],
      [
        ...byKind.map((k) => [k.kind, k.n, k.withResults, k.meanCandidates, k.meanMs, k.p50Ms, k.p95Ms, k.p99Ms, k.maxMs]),
        ['all', all.n, Object.values(found).reduce((a, b) => a + b, 0), '', all.meanMs, all.p50Ms, all.p95Ms, all.p99Ms, all.maxMs],
      ],
    ),
  );
  log('');
  log(`Plan of search() for "${planQuery}":`);
  log(plan.map((row) => `  ${row['QUERY PLAN']}`).join('\n'));

  const results = {
    settings: SETTINGS,
    pdf: { bytes: pdf.length, runs: pdfRuns, medianTotalMs: medianRun.totalMs },
    searchCorpus: { chunks: total, textDocuments, textBytes, loadSeconds: Math.round(loadMs / 100) / 10 },
    search: { all, byKind },
    loadAverage: { start: startLoad, end: os.loadavg().map((v) => Math.round(v * 10) / 10) },
    wallSeconds: Math.round((Date.now() - startedAt) / 100) / 10,
  };
  const file = await writeResults('file-search', results);
  log('');
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return measureEmbeddings(ctx);
}

runBench('file-search', { hardTimeoutMs: SETTINGS.hardTimeoutMs + EMBEDDINGS_BENCH_MS }, main);
