import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { readdir, readFile } from 'node:fs/promises';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { DocumentsService, FileSearchResult } from '../src/assistants/documents/documents.service';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import { testConfig } from './support/test-app';
import { createTestDatabase } from './support/test-database';

/**
 * Retrieval quality of `file_search`: thirteen short documents on distinct topics
 * (test/fixtures/corpus: Markdown, plain text and HTML), and questions phrased the way a
 * user or a model asks them, not copied from the text. For each, the passage that answers
 * it must rank first: the right document, and in documents of several chunks the right
 * chunk (named by a phrase only that chunk has).
 */

const CORPUS = path.join(__dirname, 'fixtures', 'corpus');

interface Case {
  query: string;
  document: string;
  /** Text the first result must contain: picks the answering chunk. */
  passage: string;
}

const CASES: Case[] = [
  { query: 'How many days of paid vacation do new employees get per year?', document: 'employee-handbook-time-off.md', passage: '15 days of paid vacation' },
  { query: 'how many weeks of parental leave for adoptive parents', document: 'employee-handbook-time-off.md', passage: 'non-birth parents' },
  { query: 'doctor note needed for sick days', document: 'employee-handbook-time-off.md', passage: "doctor's note" },
  { query: 'deadline for submitting expense receipts', document: 'travel-and-expense-policy.md', passage: 'within 45 days' },
  { query: 'daily meal allowance when travelling abroad', document: 'travel-and-expense-policy.md', passage: '70 euros per day for international travel' },
  { query: 'when must regulators be told about a personal data breach', document: 'security-incident-response.md', passage: '72 hours' },
  { query: 'how often should I feed my sourdough starter', document: 'sourdough-baking.txt', passage: 'feeding ratio' },
  { query: 'coffee to water ratio for pour-over', document: 'coffee-brewing-guide.html', passage: '1 to 16' },
  { query: 'credits for excess electricity exported to the grid', document: 'solar-panels-for-homeowners.md', passage: 'net metering' },
  { query: 'how should I taper in the weeks before the marathon', document: 'marathon-training-plan.txt', passage: 'Taper during the last three weeks' },
  { query: 'small black flies in the soil of my potted plants', document: 'houseplant-care.md', passage: 'Fungus gnats' },
  { query: 'pod keeps restarting in CrashLoopBackOff', document: 'kubernetes-troubleshooting.md', passage: 'kubectl logs <pod> --previous' },
  { query: 'container killed because it ran out of memory, exit code 137', document: 'kubernetes-troubleshooting.md', passage: 'OOMKilled' },
  { query: 'can I deduct my home office as a freelancer', document: 'personal-tax-basics.txt', passage: 'regularly and exclusively for business' },
  { query: 'who invented movable metal type in Mainz', document: 'history-of-the-printing-press.html', passage: 'Johannes Gutenberg' },
  { query: 'treating varroa mites in a beehive', document: 'beekeeping-for-beginners.md', passage: 'oxalic acid' },
  { query: 'refund for an item that arrived damaged', document: 'product-returns-and-refunds.md', passage: 'free replacement' },
  { query: '"readiness probe"', document: 'kubernetes-troubleshooting.md', passage: 'failing readiness probe' },
];

describe('file_search retrieval quality on the fixture corpus', () => {
  let app: INestApplicationContext;
  let documents: DocumentsService;
  let assistantId: string;
  const names = new Map<string, string>();

  beforeAll(async () => {
    const databaseUrl = await createTestDatabase();
    // DocumentsModule reads the tier through WorkspacesModule, whose modules read the configuration.
    @Module({
      imports: [
        ConfigModule.forRoot(testConfig()),
        TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }),
        DocumentsModule,
      ],
    })
    class TestModule {}
    app = await NestFactory.createApplicationContext(TestModule, { logger: false });
    documents = app.get(DocumentsService);
    const dataSource = app.get(DataSource);
    const [workspace] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO workspaces (name, tier) VALUES ('Retrieval', 'pro') RETURNING id`,
    );
    const [assistant] = await dataSource.query<Array<{ id: string }>>(
      // Chunks of 400 tokens (60 of overlap), for documents of several chunks; new assistants have 800.
      `INSERT INTO assistants (workspace_id, name, slug, model, chunk_max_tokens, chunk_overlap_tokens)
       VALUES ($1, 'Librarian', 'librarian', 'gpt-4o-mini', 400, 60) RETURNING id`,
      [workspace.id],
    );
    assistantId = assistant.id;
    for (const file of (await readdir(CORPUS)).sort()) {
      const document = await documents.add({
        workspaceId: workspace.id,
        assistantId,
        fileName: file,
        data: await readFile(path.join(CORPUS, file)),
      });
      names.set(document.id, file);
    }
    // Each file is read in a worker thread of its own (under jest, one that compiles the reader's TypeScript first).
  }, 120_000);
  afterAll(async () => {
    await app?.close();
  });

  it('ingests the whole corpus, several documents in more than one chunk', async () => {
    const listed = await documents.list(assistantId);
    expect(listed).toHaveLength(13);
    expect(listed.filter((document) => document.chunkCount > 1).length).toBeGreaterThanOrEqual(3);
  });

  const describeTop = (results: FileSearchResult[]) =>
    results
      .slice(0, 3)
      .map((r, i) => `  ${i + 1}. ${r.document_name} #${r.position} score ${r.score}: ${r.content.slice(0, 90).replace(/\s+/g, ' ')}...`)
      .join('\n');

  it.each(CASES)('"$query" -> $document', async ({ query, document, passage }) => {
    const results = await documents.search(assistantId, query, { maxResults: 5 });
    const top = results[0];
    const explanation = `query "${query}" expected ${document} ("${passage}") first, got:\n${describeTop(results)}`;
    if (!top || top.document_name !== document || !top.content.includes(passage)) throw new Error(explanation);
    expect(names.get(top.document_id)).toBe(document);
  });

  it('finds nothing for words that only appear in scripts and styles of the HTML pages', async () => {
    expect(await documents.search(assistantId, 'dataLayer analytics snippet', { maxResults: 5 })).toEqual([]);
    // "varroa" is in the coffee page's script and style too: only the beekeeping guide may answer.
    const varroa = await documents.search(assistantId, 'varroa', { maxResults: 10 });
    expect(new Set(varroa.map((r) => r.document_name))).toEqual(new Set(['beekeeping-for-beginners.md']));
  });
});
