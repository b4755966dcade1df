import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { ASSISTANT_CHUNKING, DEFAULT_CHUNKING, normalizeText } from '../src/assistants/documents/chunking';
import { DOCUMENT_LIMITS, MAX_FILE_BYTES } from '../src/assistants/documents/document-limits';
import { DocumentsModule } from '../src/assistants/documents/documents.module';
import { AddDocumentCommand, DocumentsService, IngestionProgress } from '../src/assistants/documents/documents.service';
import { ApiError } from '../src/common/errors/api-error';
import { ConfigModule } from '../src/config/config.module';
import { dataSourceOptions } from '../src/database/data-source';
import { countTextTokens } from '../src/providers/tokens';
import { makeDocx, makePdf, makeScannedPdf } from './support/document-files';
import { describeResult, runCli } from './support/processes';
import { testConfig } from './support/test-app';
import { createTestDatabase } from './support/test-database';

/**
 * Documents for `file_search`, through DocumentsService on a real PostgreSQL (a Nest context
 * with only the data source and DocumentsModule), and through the compiled operator CLI.
 * PDFs and DOCX files are made in the test (support/document-files.ts: pdfkit, zipped
 * WordprocessingML), so the extractors read real files.
 */

jest.setTimeout(60_000);

const CORPUS = path.join(__dirname, 'fixtures', 'corpus');
const MISSING = '00000000-0000-4000-8000-000000000000';

/** Varied, deterministic English prose: `sentences` sentences of 8-20 words. */
function prose(sentences: number, seed = 1): string {
  const words = (
    'the committee reviewed quarterly budget forecasts while engineers migrated legacy services toward ' +
    'resilient clusters and analysts compared regional sales figures against ambitious growth targets ' +
    'during lengthy afternoon meetings about hiring plans office space and customer satisfaction surveys'
  ).split(' ');
  let state = seed;
  const next = () => (state = (state * 16807) % 2147483647) / 2147483647;
  const out: string[] = [];
  for (let i = 0; i < sentences; i++) {
    const length = 8 + Math.floor(next() * 13);
    const sentence = Array.from({ length }, () => words[Math.floor(next() * words.length)]).join(' ');
    out.push(`${sentence[0].toUpperCase()}${sentence.slice(1)}.`);
    if (i % 6 === 5) out.push('\n\n');
  }
  return out.join(' ').replace(/ \n\n /g, '\n\n');
}

/** The ApiError a promise rejects with (fails the test if it resolves or rejects otherwise). */
async function apiError(promise: Promise<unknown>): Promise<ApiError> {
  const error = await promise.then(
    () => {
      throw new Error('Expected an ApiError, but the call succeeded');
    },
    (e: unknown) => e,
  );
  if (!(error instanceof ApiError)) throw error;
  return error;
}

describe('documents for file_search', () => {
  let app: INestApplicationContext;
  let dataSource: DataSource;
  let databaseUrl: string;
  let documents: DocumentsService;

  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
    // DocumentsModule reads the tier through WorkspacesModule, whose modules read the configuration.
    @Module({
      imports: [
        ConfigModule.forRoot(testConfig()),
        TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }),
        DocumentsModule,
      ],
    })
    class TestModule {}
    app = await NestFactory.createApplicationContext(TestModule, { logger: false, abortOnError: false });
    dataSource = app.get(DataSource);
    documents = app.get(DocumentsService);
  });
  afterAll(async () => {
    await app?.close();
  });

  let slugs = 0;
  async function createWorkspace(tier = 'pro'): Promise<string> {
    const [row] = await dataSource.query<Array<{ id: string }>>(`INSERT INTO workspaces (name, tier) VALUES ('Docs', $1) RETURNING id`, [tier]);
    return row.id;
  }
  /** Chunked as DEFAULT_CHUNKING (400 tokens, 60 of overlap), which these tests were written for, unless told otherwise. */
  async function createAssistant(workspaceId: string, chunking = DEFAULT_CHUNKING): Promise<string> {
    const [row] = await dataSource.query<Array<{ id: string }>>(
      `INSERT INTO assistants (workspace_id, name, slug, model, chunk_max_tokens, chunk_overlap_tokens)
       VALUES ($1, 'Docs', $2, 'gpt-4o-mini', $3, $4) RETURNING id`,
      [workspaceId, `docs-${++slugs}`, chunking.maxTokens, chunking.overlapTokens],
    );
    return row.id;
  }
  async function setup(tier = 'pro') {
    const workspaceId = await createWorkspace(tier);
    const assistantId = await createAssistant(workspaceId);
    const add = (fileName: string, data: Buffer | string, extra: Partial<AddDocumentCommand> = {}) =>
      documents.add({ workspaceId, assistantId, fileName, data: Buffer.isBuffer(data) ? data : Buffer.from(data), ...extra });
    return { workspaceId, assistantId, add };
  }
  async function chunksOf(documentId: string) {
    return dataSource.query<Array<{ position: number; content: string; tokens: number; assistant_id: string }>>(
      'SELECT position, content, tokens, assistant_id FROM document_chunks WHERE document_id = $1 ORDER BY position',
      [documentId],
    );
  }
  const allText = async (documentId: string) => (await chunksOf(documentId)).map((chunk) => chunk.content).join('\n');

  describe('ingestion of each format', () => {
    it('plain text: stored with its type, size and chunks', async () => {
      const { assistantId, add } = await setup();
      const text = 'Invoices are paid within thirty days.\r\n\r\nLate   payments\tincur a fee of two percent.';
      const document = await add('billing.txt', text);
      expect(document).toMatchObject({ name: 'billing.txt', mimeType: 'text/plain', sizeBytes: Buffer.byteLength(text), chunkCount: 1, assistantId });
      const [chunk] = await chunksOf(document.id);
      expect(chunk).toEqual({
        position: 0,
        content: 'Invoices are paid within thirty days.\n\nLate payments incur a fee of two percent.',
        tokens: countTextTokens('Invoices are paid within thirty days.\n\nLate payments incur a fee of two percent.'),
        assistant_id: assistantId,
      });
    });

    it('plain text in Windows-1252 or UTF-16 is decoded, and a file of binary data is refused', async () => {
      const { add } = await setup();
      const latin1 = await add('menu.txt', Buffer.from('Caf\xe9 cr\xe8me br\xfbl\xe9e', 'latin1'));
      expect(await allText(latin1.id)).toBe('Café crème brûlée');
      const utf16 = await add('notes.txt', Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('Grüße aus Köln', 'utf16le')]));
      expect(await allText(utf16.id)).toBe('Grüße aus Köln');
      const error = await apiError(add('image.txt', Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x00, 0x00, 0x01, 0x02])));
      expect(error).toMatchObject({ status: 400, code: 'unreadable_file' });
      expect(error.message).toBe('image.txt could not be read: it contains binary data, not text.');
    });

    it('Markdown keeps its structure', async () => {
      const { add } = await setup();
      const document = await add('guide.md', '# Setup\n\nInstall the agent:\n\n- download it\n- run `agent install`\n');
      expect(document.mimeType).toBe('text/markdown');
      expect(await allText(document.id)).toBe('# Setup\n\nInstall the agent:\n\n- download it\n- run `agent install`');
    });

    it('HTML: visible text only; scripts, styles, comments and navigation are dropped', async () => {
      const { assistantId, add } = await setup();
      const html = await readFile(path.join(CORPUS, 'coffee-brewing-guide.html'));
      const document = await add('coffee-brewing-guide.html', html);
      expect(document.mimeType).toBe('text/html');
      const text = await allText(document.id);
      expect(text).toContain("The Home Barista's Coffee Brewing Guide\n\nGood coffee at home depends on four things");
      expect(text).toContain('use a ratio of 1 to 16');
      expect(text).toMatch(/Method +Grind +Ratio\nPour-over +medium-fine +1:16/);
      for (const hidden of ['dataLayer', 'varroa', 'font-family', 'Enable JavaScript', 'Guides', '<p>']) expect(text).not.toContain(hidden);
      expect(await documents.search(assistantId, 'varroa mites oxalic acid', { maxResults: 5 })).toEqual([]);
    });

    it('PDF: the text of every page, in order, a sentence across a page break joined', async () => {
      const { assistantId, add } = await setup();
      const pdf = await makePdf([
        ['Quarterly Report', 'Revenue grew by twelve percent in the third quarter, driven by the new subscription plans.'],
        ['Costs rose by four percent because the data centre in Frankfurt was expanded and its', ''],
        ['cooling system was replaced. Headcount stayed flat at 212 employees.'],
      ]);
      expect(pdf.subarray(0, 5).toString()).toBe('%PDF-');
      const progress: IngestionProgress[] = [];
      const document = await add('report.pdf', pdf, { onProgress: (p) => progress.push(p) });
      expect(document).toMatchObject({ mimeType: 'application/pdf', chunkCount: 1, sizeBytes: pdf.length });
      const text = await allText(document.id);
      expect(text).toContain('Quarterly Report');
      expect(text).toContain('Revenue grew by twelve percent in the third quarter, driven by the new subscription plans.');
      expect(text).toContain('because the data centre in Frankfurt was expanded and its cooling system was replaced. Headcount stayed flat at 212 employees.');
      expect(text.indexOf('Revenue')).toBeLessThan(text.indexOf('Headcount'));
      expect(progress.map((p) => p.stage)).toEqual(['extracting', 'extracting', 'extracting', 'chunking', 'storing', 'stored']);
      expect(progress[2].message).toBe('Read page 3 of 3 of report.pdf');
      const [top] = await documents.search(assistantId, 'Frankfurt data centre cooling', { maxResults: 3 });
      expect(top).toMatchObject({ document_name: 'report.pdf', position: 0 });
    });

    it('PDF: a 30-page file, read in batches with progress, chunked within the limits', async () => {
      const { add } = await setup();
      const pages = Array.from({ length: 30 }, (_, i) => [`Page ${i + 1}.`, prose(12, i + 1)]);
      const pdf = await makePdf(pages);
      const done: string[] = [];
      const document = await add('long.pdf', pdf, { onProgress: (p) => done.push(p.message) });
      expect(done.filter((m) => m.startsWith('Read page'))).toEqual(['Read page 1 of 30 of long.pdf', 'Read page 11 of 30 of long.pdf', 'Read page 21 of 30 of long.pdf', 'Read page 30 of 30 of long.pdf']);
      const chunks = await chunksOf(document.id);
      expect(chunks.length).toBe(document.chunkCount);
      expect(chunks.length).toBeGreaterThan(5);
      for (const chunk of chunks) expect(chunk.tokens).toBeLessThanOrEqual(DEFAULT_CHUNKING.maxTokens);
      expect(chunks[chunks.length - 1].content).toContain('Page 30.');
    });

    it('PDF: one without text, a broken one, and a file that only claims to be one are refused', async () => {
      const { add } = await setup();
      const blank = await makeScannedPdf(); // a scan would be an image: no text layer either
      expect(await apiError(add('scan.pdf', blank))).toMatchObject({
        status: 400,
        code: 'no_text',
        message: 'No text could be extracted from scan.pdf (a scanned PDF without a text layer has none).',
      });
      const broken = await apiError(add('broken.pdf', Buffer.from('%PDF-1.7\n1 0 obj\n<< /Type /Catalog >>\nendobj\n%%EOF')));
      expect(broken).toMatchObject({ status: 400, code: 'unreadable_file' });
      expect(broken.message).toMatch(/^broken\.pdf could not be read: /);
      expect(await apiError(add('fake.pdf', 'just some text'))).toMatchObject({
        status: 400,
        message: 'fake.pdf could not be read: it is not a PDF (no %PDF- header).',
      });
    });

    it('DOCX: the paragraphs of the document', async () => {
      const { assistantId, add } = await setup();
      const docx = await makeDocx(['Onboarding checklist', 'Every new hire receives a laptop & a security key on day one.', 'Accounts are created by IT.']);
      const document = await add('onboarding.docx', docx);
      expect(document.mimeType).toBe('application/vnd.openxmlformats-officedocument.wordprocessingml.document');
      expect(await allText(document.id)).toBe(
        'Onboarding checklist\n\nEvery new hire receives a laptop & a security key on day one.\n\nAccounts are created by IT.',
      );
      expect((await documents.search(assistantId, 'security key laptop', { maxResults: 1 }))[0].document_name).toBe('onboarding.docx');
      expect(await apiError(add('fake.docx', 'not a zip'))).toMatchObject({ status: 400, code: 'unreadable_file' });
      expect(await apiError(add('bad.docx', Buffer.from('PK\u0003\u0004 truncated archive')))).toMatchObject({ status: 400, code: 'unreadable_file' });
    });

    it('the MIME type decides when the file name has no known extension; the name loses its directories', async () => {
      const { add } = await setup();
      const document = await add('uploads/2024\\README', '# Read me\n\nHello.', { mimeType: 'text/markdown; charset=utf-8' });
      expect(document).toMatchObject({ name: 'README', mimeType: 'text/markdown' });
    });
  });

  describe('refusals', () => {
    it('unsupported types: 400 naming the type', async () => {
      const { add } = await setup();
      const supported = 'Supported file types: .txt, .text, .md, .markdown, .html, .htm, .pdf, .docx.';
      expect(await apiError(add('budget.xlsx', 'PK...'))).toMatchObject({
        status: 400,
        type: 'bad_request',
        code: 'unsupported_file_type',
        param: 'file',
        message: `Unsupported file type ".xlsx" (budget.xlsx). ${supported}`,
      });
      expect((await apiError(add('photo', 'x', { mimeType: 'image/png' }))).message).toBe(`Unsupported file type "image/png" (photo). ${supported}`);
      expect((await apiError(add('Makefile', 'all:'))).message).toBe(`Unsupported file type: Makefile has no extension. ${supported}`);
    });

    it('a file over the size limit: 413; an empty file, or one with no text: 400', async () => {
      const { add } = await setup('enterprise');
      const tooBig = await apiError(add('huge.txt', Buffer.alloc(MAX_FILE_BYTES + 1, 'a')));
      expect(tooBig).toMatchObject({ status: 413, type: 'bad_request', code: 'file_too_large', message: 'huge.txt is 20 MB; a document may be at most 20 MB.' });
      expect(await apiError(add('empty.md', ''))).toMatchObject({ status: 400, code: 'empty_file', message: 'empty.md is empty.' });
      expect(await apiError(add('blank.html', '<html><script>var x = 1;</script>\n \n</html>'))).toMatchObject({
        status: 400,
        code: 'no_text',
        message: 'No text could be extracted from blank.html.',
      });
    });

    it('an unknown assistant, or another workspace’s: 404, and nothing is stored', async () => {
      const { workspaceId } = await setup();
      const other = await setup();
      const add = (assistantId: string) => documents.add({ workspaceId, assistantId, fileName: 'a.txt', data: Buffer.from('text') });
      expect(await apiError(add(MISSING))).toMatchObject({ status: 404, code: 'assistant_not_found', message: `No assistant with id ${MISSING}.` });
      expect(await apiError(add(other.assistantId))).toMatchObject({ status: 404, code: 'assistant_not_found' });
      expect(await apiError(add('nope'))).toMatchObject({ status: 400, message: 'assistant must be a UUID (got "nope").' });
      const [{ count }] = await dataSource.query<Array<{ count: number }>>('SELECT count(*)::int AS count FROM documents WHERE workspace_id = $1', [workspaceId]);
      expect(count).toBe(0);
    });
  });

  describe('chunking', () => {
    it('splits a long text into overlapping chunks of at most 400 tokens, exactly counted, in order', async () => {
      const { add } = await setup();
      const text = prose(400, 42);
      const document = await add('minutes.txt', text);
      const chunks = await chunksOf(document.id);
      expect(chunks.length).toBe(document.chunkCount);
      expect(chunks.length).toBeGreaterThan(10);
      expect(chunks.map((chunk) => chunk.position)).toEqual(chunks.map((_, i) => i));
      for (const chunk of chunks) {
        expect(chunk.tokens).toBe(countTextTokens(chunk.content));
        expect(chunk.tokens).toBeLessThanOrEqual(DEFAULT_CHUNKING.maxTokens);
        expect(chunk.content).toMatch(/\.$/); // ends at a sentence end
      }
      const mean = chunks.reduce((sum, chunk) => sum + chunk.tokens, 0) / chunks.length;
      expect(mean).toBeGreaterThan(250);
      // Each chunk starts with the last sentence(s) of the one before: up to 60 tokens of overlap.
      for (let i = 1; i < chunks.length; i++) {
        const previous = chunks[i - 1].content;
        const sentences = chunks[i].content.split(/(?<=\.)\s+/);
        let overlap = '';
        for (let n = 1; n <= sentences.length; n++) {
          const candidate = sentences.slice(0, n).join(' ');
          if (previous.replace(/\s+/g, ' ').endsWith(candidate.replace(/\s+/g, ' '))) overlap = candidate;
        }
        expect(overlap).not.toBe('');
        expect(countTextTokens(overlap)).toBeLessThanOrEqual(DEFAULT_CHUNKING.overlapTokens + 1);
      }
      // Nothing is lost: every sentence of the text is in some chunk.
      const stored = chunks.map((chunk) => chunk.content.replace(/\s+/g, ' ')).join(' ');
      for (const sentence of text.split(/(?<=\.)\s+/)) expect(stored).toContain(sentence.replace(/\s+/g, ' '));
    });

    it("splits with the assistant's chunk size and overlap, and records them on the document", async () => {
      const workspaceId = await createWorkspace();
      const text = prose(400, 42);
      const small = await documents.add({
        workspaceId,
        assistantId: await createAssistant(workspaceId, { maxTokens: 150, overlapTokens: 20 }),
        fileName: 'minutes.txt',
        data: Buffer.from(text),
      });
      const large = await documents.add({
        workspaceId,
        assistantId: await createAssistant(workspaceId, ASSISTANT_CHUNKING),
        fileName: 'minutes.txt',
        data: Buffer.from(text),
      });
      const smallChunks = await chunksOf(small.id);
      const largeChunks = await chunksOf(large.id);
      for (const chunk of smallChunks) expect(chunk.tokens).toBeLessThanOrEqual(150);
      for (const chunk of largeChunks) expect(chunk.tokens).toBeLessThanOrEqual(800);
      expect(Math.max(...largeChunks.map((chunk) => chunk.tokens))).toBeGreaterThan(400);
      expect(smallChunks.length).toBeGreaterThan(2 * largeChunks.length);
      expect(small).toMatchObject({ chunkMaxTokens: 150, chunkOverlapTokens: 20 });
      expect(large).toMatchObject({ chunkMaxTokens: 800, chunkOverlapTokens: 400 });
    });
  });

  describe('languages', () => {
    it('indexes each document in the language of its text, and parses the query in each language of the assistant', async () => {
      const { assistantId, add } = await setup();
      const french = await add(
        'retours.md',
        "# Retours\n\nLes articles peuvent être retournés dans les trente jours. Le remboursement est effectué sur le moyen de paiement d'origine, et les frais de port sont remboursés pour les produits défectueux.",
      );
      const english = await add('returns.md', '# Returns\n\nItems may be returned within thirty days. The refund goes to the original payment method.');
      const tiny = await add('codes.txt', 'XJ-9000 ERR-4012');
      expect([french.language, english.language, tiny.language]).toEqual(['french', 'english', 'simple']);
      const [row] = await dataSource.query<Array<{ language: string; tsv: string }>>(
        'SELECT language, content_tsv::text AS tsv FROM document_chunks WHERE document_id = $1',
        [french.id],
      );
      expect(row.language).toBe('french');
      // French stemming: "remboursements" and "remboursés" meet in "rembours"; "les", "des" are stop words.
      expect(row.tsv).toContain("'rembours'");
      expect(row.tsv).not.toContain("'les'");
      const results = await documents.search(assistantId, 'remboursements des produits défectueux', { maxResults: 5 });
      expect(results.map((r) => r.document_name)).toEqual(['retours.md']);
      expect(results[0].score).toBeGreaterThanOrEqual(0.5);
      expect((await documents.search(assistantId, 'refunds', { maxResults: 5 })).map((r) => r.document_name)).toEqual(['returns.md']);
    });
    it('re-indexing splits a document stored before languages and chunk settings again, and indexes it in its language', async () => {
      const { assistantId, add } = await setup();
      const text = `# Retours\n\n${"Les articles peuvent être retournés dans les trente jours, et le remboursement est effectué sur le moyen de paiement d'origine. ".repeat(30)}`;
      const document = await add('retours.md', text);
      // As the migration left documents stored before it: English vectors, no chunk settings.
      await dataSource.query(`UPDATE documents SET language = 'english', chunk_max_tokens = NULL, chunk_overlap_tokens = NULL WHERE id = $1`, [
        document.id,
      ]);
      await dataSource.query(`UPDATE document_chunks SET language = 'english', content_tsv = to_tsvector('english', content) WHERE document_id = $1`, [
        document.id,
      ]);
      const before = await chunksOf(document.id);
      const indexedInFrench = async () =>
        (
          await dataSource.query<Array<{ french: boolean }>>(
            // "les" is a French stop word, not an English one.
            `SELECT bool_and(language = 'french' AND content_tsv::text NOT LIKE '%''les''%') AS french FROM document_chunks WHERE document_id = $1`,
            [document.id],
          )
        )[0].french;
      expect(await indexedInFrench()).toBe(false);
      // Found by trigrams only ("remboursés" is not stemmed as "remboursement" in English): a partial score.
      expect((await documents.search(assistantId, 'remboursés', { maxResults: 1 }))[0].score).toBeLessThan(0.5);

      await dataSource.query('UPDATE assistants SET chunk_max_tokens = 800, chunk_overlap_tokens = 0 WHERE id = $1', [assistantId]);
      expect(await documents.reindex(assistantId)).toMatchObject({ documents: 1, chunk_max_tokens: 800, chunk_overlap_tokens: 0 });
      const after = await chunksOf(document.id);
      expect(after.length).toBeLessThan(before.length);
      for (const chunk of after) expect(chunk.tokens).toBeLessThanOrEqual(800);
      expect(after.map((chunk) => chunk.content).join(' ').replace(/\s+/g, ' ')).toBe(normalizeText(text).replace(/\s+/g, ' '));
      expect(await documents.get(document.id)).toMatchObject({ language: 'french', chunkMaxTokens: 800, chunkOverlapTokens: 0, chunkCount: after.length });
      expect(await indexedInFrench()).toBe(true);
      expect((await documents.search(assistantId, 'remboursés', { maxResults: 1 }))[0].score).toBeGreaterThanOrEqual(0.5);
    });
  });

  describe('tier limits', () => {
    it('free: 5 documents per workspace, over all its assistants; the 6th is 403 naming the tier and the limit', async () => {
      const workspaceId = await createWorkspace('free');
      const first = await createAssistant(workspaceId);
      const second = await createAssistant(workspaceId);
      for (let i = 0; i < 5; i++) {
        await documents.add({ workspaceId, assistantId: i < 3 ? first : second, fileName: `n${i}.txt`, data: Buffer.from(`note ${i}`) });
      }
      const error = await apiError(documents.add({ workspaceId, assistantId: first, fileName: 'n5.txt', data: Buffer.from('one more') }));
      expect(error).toMatchObject({
        status: 403,
        type: 'permission_denied',
        code: 'document_limit_reached',
        message: 'The free tier allows 5 documents per workspace, and this workspace has 5. Remove a document or upgrade the tier.',
      });
      // Removing one makes room again.
      const [oldest] = await documents.list(first);
      await documents.remove(workspaceId, oldest.id);
      await documents.add({ workspaceId, assistantId: first, fileName: 'n5.txt', data: Buffer.from('one more') });
      expect(await documents.usage(workspaceId)).toMatchObject({ documents: 5, maxDocuments: 5, maxTotalBytes: 5 * 1024 * 1024 });
    });

    it('free: 5 MB in total; a file that would pass it is 403 with the sizes', async () => {
      const { add } = await setup('free');
      // 3 MB files whose text is short: the limit counts the uploaded bytes.
      const padded = (title: string) => `<html><body><p>${title}</p><!-- ${'x'.repeat(3 * 1024 * 1024)} --></body></html>`;
      await add('first.html', padded('First'));
      const error = await apiError(add('second.html', padded('Second')));
      expect(error).toMatchObject({ status: 403, code: 'document_storage_limit_reached' });
      expect(error.message).toBe(
        'The free tier allows 5 MB of documents per workspace; this workspace stores 3 MB and second.html is 3 MB. Remove documents or upgrade the tier.',
      );
    });

    it('concurrent uploads cannot pass the limit together', async () => {
      const { add } = await setup('free');
      for (let i = 0; i < 3; i++) await add(`n${i}.txt`, `note ${i}`);
      const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => add(`race${i}.txt`, `race ${i}`)));
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
      for (const rejected of results.filter((r): r is PromiseRejectedResult => r.status === 'rejected')) {
        expect(rejected.reason).toMatchObject({ status: 403, code: 'document_limit_reached' });
      }
    });

    it('every tier has its limits; enterprise has none', async () => {
      expect(DOCUMENT_LIMITS).toEqual({
        free: { maxDocuments: 5, maxTotalBytes: 5 * 1024 ** 2 },
        hobby: { maxDocuments: 20, maxTotalBytes: 25 * 1024 ** 2 },
        pro: { maxDocuments: 200, maxTotalBytes: 250 * 1024 ** 2 },
        team: { maxDocuments: 1000, maxTotalBytes: 2 * 1024 ** 3 },
        enterprise: { maxDocuments: -1, maxTotalBytes: -1 },
      });
      const { add, workspaceId } = await setup('enterprise');
      for (let i = 0; i < 7; i++) await add(`e${i}.txt`, `enterprise note ${i}`);
      expect(await documents.usage(workspaceId)).toMatchObject({ documents: 7, maxDocuments: -1 });
    });
  });

  describe('search', () => {
    async function library() {
      const s = await setup();
      await s.add('dogs.md', '# Dogs\n\nDogs need a daily walk and a balanced diet. Puppies should be vaccinated at eight weeks.');
      await s.add('cats.md', '# Cats\n\nCats groom themselves and sleep most of the day. A cat needs fresh water and a clean litter box.');
      await s.add(
        'walks.txt',
        'A walk in the park is good for people too. Morning walks improve mood, and evening walks help sleep. ' +
          'Walking a dog daily is a habit that keeps both owner and dog fit.',
      );
      return s;
    }

    it('ranks the passages with every term first, best first, each with its document and position', async () => {
      const { assistantId } = await library();
      const results = await documents.search(assistantId, 'daily dog walk', { maxResults: 5 });
      expect(results.map((r) => r.document_name)).toEqual(['walks.txt', 'dogs.md']);
      expect(results[0]).toEqual({
        document_id: expect.any(String),
        document_name: 'walks.txt',
        position: 0,
        content: expect.stringContaining('Walking a dog daily'),
        score: expect.any(Number),
      });
      expect(results[0].score).toBeGreaterThan(results[1].score);
      expect(results[1].score).toBeGreaterThanOrEqual(0.5); // both have every term
    });

    it('when no passage has every term, passages with the most of them follow', async () => {
      const { assistantId } = await library();
      const results = await documents.search(assistantId, 'cat water bowl litter', { maxResults: 5 });
      expect(results[0].document_name).toBe('cats.md');
      expect(results[0].score).toBeLessThan(0.5);
      // dogs.md has two of the three terms; cats.md and walks.txt one each.
      const partial = await documents.search(assistantId, 'puppies vaccinated sleep', { maxResults: 5 });
      expect(partial[0].document_name).toBe('dogs.md');
      expect(new Set(partial.slice(1).map((r) => r.document_name))).toEqual(new Set(['cats.md', 'walks.txt']));
      for (let i = 1; i < partial.length; i++) expect(partial[i].score).toBeLessThanOrEqual(partial[i - 1].score);
    });

    it('supports web-search syntax: phrases, or, and excluded words', async () => {
      const { assistantId } = await library();
      expect((await documents.search(assistantId, '"litter box"', { maxResults: 5 })).map((r) => r.document_name)).toEqual(['cats.md']);
      expect((await documents.search(assistantId, '"box litter"', { maxResults: 5 })).map((r) => r.document_name)).toEqual([]);
      expect(new Set((await documents.search(assistantId, 'puppies or groom', { maxResults: 5 })).map((r) => r.document_name))).toEqual(new Set(['dogs.md', 'cats.md']));
      expect((await documents.search(assistantId, 'walk -park', { maxResults: 5 })).map((r) => r.document_name)).toEqual(['dogs.md']);
    });

    it('an empty or stop-word-only query finds nothing; maxResults is honoured', async () => {
      const { assistantId } = await library();
      expect(await documents.search(assistantId, '', { maxResults: 5 })).toEqual([]);
      expect(await documents.search(assistantId, '   ', { maxResults: 5 })).toEqual([]);
      expect(await documents.search(assistantId, 'the and of a', { maxResults: 5 })).toEqual([]);
      expect(await documents.search(assistantId, '"" - or', { maxResults: 5 })).toEqual([]);
      expect(await documents.search(assistantId, 'dog OR cat OR walk', { maxResults: 1 })).toHaveLength(1);
      expect(await documents.search(assistantId, 'dog OR cat OR walk', { maxResults: 0 })).toHaveLength(1);
    });

    it("only searches the assistant's own documents", async () => {
      const mine = await library();
      const other = await setup();
      await other.add('dogs-elsewhere.md', 'Dogs walk daily in the other workspace too.');
      const results = await documents.search(mine.assistantId, 'dogs', { maxResults: 10 });
      expect(results.map((r) => r.document_name).sort()).toEqual(['dogs.md', 'walks.txt']);
      expect((await documents.search(other.assistantId, 'dogs', { maxResults: 10 })).map((r) => r.document_name)).toEqual(['dogs-elsewhere.md']);
    });

    it('formats results for the model: numbered, with document name and passage number', async () => {
      const { assistantId } = await library();
      const results = await documents.search(assistantId, 'daily dog walk', { maxResults: 2 });
      expect(documents.formatResultsForModel(results)).toBe(
        `[1] walks.txt, passage 1\n${results[0].content}\n\n---\n\n[2] dogs.md, passage 1\n${results[1].content}`,
      );
      expect(documents.formatResultsForModel([])).toBe('No passage of the documents matches.');
    });
  });

  describe('listing and removal', () => {
    it('lists the assistant’s documents, oldest first', async () => {
      const { assistantId, add } = await setup();
      const a = await add('a.txt', 'alpha');
      const b = await add('b.md', 'beta');
      expect((await documents.list(assistantId)).map((d) => [d.id, d.name, d.chunkCount])).toEqual([
        [a.id, 'a.txt', 1],
        [b.id, 'b.md', 1],
      ]);
    });

    it('removing a document removes its chunks; another workspace cannot remove it', async () => {
      const { workspaceId, assistantId, add } = await setup();
      const other = await setup();
      const document = await add('secret.txt', prose(120, 9));
      expect((await chunksOf(document.id)).length).toBeGreaterThan(1);
      expect(await apiError(documents.remove(other.workspaceId, document.id))).toMatchObject({ status: 404, code: 'document_not_found' });
      expect(await documents.remove(workspaceId, document.id)).toEqual({ id: document.id, deleted: true });
      expect(await chunksOf(document.id)).toEqual([]);
      expect(await documents.search(assistantId, 'committee budget', { maxResults: 5 })).toEqual([]);
      expect(await apiError(documents.remove(workspaceId, document.id))).toMatchObject({ status: 404, message: `No document with id ${document.id}.` });
    });

    it('deleting the assistant, or the workspace, deletes its documents and chunks', async () => {
      const first = await setup();
      const kept = await first.add('kept.txt', 'kept text');
      const secondAssistant = await createAssistant(first.workspaceId);
      const gone = await documents.add({ workspaceId: first.workspaceId, assistantId: secondAssistant, fileName: 'gone.txt', data: Buffer.from('gone text') });
      await dataSource.query('DELETE FROM assistants WHERE id = $1', [secondAssistant]);
      expect(await chunksOf(gone.id)).toEqual([]);
      expect((await chunksOf(kept.id)).length).toBe(1);
      await dataSource.query('DELETE FROM workspaces WHERE id = $1', [first.workspaceId]);
      const [{ count }] = await dataSource.query<Array<{ count: number }>>(
        'SELECT count(*)::int AS count FROM document_chunks WHERE document_id = ANY($1)',
        [[kept.id, gone.id]],
      );
      expect(count).toBe(0);
    });
  });

  describe('operator CLI (dist/src/cli.js)', () => {
    let env: Record<string, string>;
    let dir: string;
    beforeAll(async () => {
      env = { DATABASE_URL: databaseUrl, LOG_LEVEL: 'error' };
      dir = await mkdtemp(path.join(tmpdir(), 'acs-documents-'));
    });
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true });
    });

    async function cli(...args: string[]): Promise<Record<string, unknown>> {
      const result = await runCli(args, env, { timeoutMs: 60_000 });
      const lines = result.stdout.split('\n');
      if (result.code !== 0 || lines.length !== 2 || lines[1] !== '') {
        throw new Error(`Expected exit 0 and one line of JSON.\n${describeResult(args, result)}`);
      }
      return JSON.parse(lines[0]) as Record<string, unknown>;
    }

    it('document add, list and remove', async () => {
      const { assistantId } = await setup();
      const file = path.join(dir, 'handbook.pdf');
      const pdf = await makePdf([['Employee handbook', prose(30, 5)], [prose(30, 6)]]);
      await writeFile(file, pdf);
      const added = await cli('document', 'add', '--assistant', assistantId, '--file', file);
      expect(added).toEqual({ id: expect.any(String), name: 'handbook.pdf', chunks: expect.any(Number), size_bytes: pdf.length });
      expect(added.chunks).toBeGreaterThanOrEqual(1);

      const listed = await cli('document', 'list', '--assistant', assistantId);
      expect(listed).toEqual({
        data: [
          {
            id: added.id,
            assistant_id: assistantId,
            name: 'handbook.pdf',
            mime_type: 'application/pdf',
            size_bytes: pdf.length,
            chunks: added.chunks,
            status: 'ready',
            failure_reason: null,
            language: 'english',
            // Its assistant has no embedding model: nothing waits.
            embeddings_pending: false,
            created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
          },
        ],
      });
      expect((await documents.search(assistantId, 'employee handbook', { maxResults: 1 }))[0].document_id).toBe(added.id);

      expect(await cli('document', 'remove', '--document', added.id as string)).toEqual({ id: added.id, deleted: true });
      expect(await cli('document', 'list', '--assistant', assistantId)).toEqual({ data: [] });
    });

    it('refusals: exit 1 with the reason; wrong usage: exit 2', async () => {
      const { assistantId } = await setup();
      const unsupported = path.join(dir, 'sheet.xlsx');
      await writeFile(unsupported, 'PK');
      const cases: Array<[string[], number, string | RegExp]> = [
        [['document', 'add', '--assistant', MISSING, '--file', unsupported], 1, `No assistant with id ${MISSING}.`],
        [['document', 'add', '--assistant', assistantId, '--file', path.join(dir, 'nope.txt')], 1, `Cannot read ${path.join(dir, 'nope.txt')}: no such file.`],
        [['document', 'add', '--assistant', assistantId, '--file', unsupported], 1, /^Unsupported file type "\.xlsx" \(sheet\.xlsx\)/],
        [['document', 'list', '--assistant', MISSING], 1, `No assistant with id ${MISSING}.`],
        [['document', 'remove', '--document', MISSING], 1, `No document with id ${MISSING}.`],
        [['document', 'add', '--assistant', assistantId], 2, /--file is required/],
        [['document', 'remove'], 2, /--document is required/],
      ];
      for (const [args, code, message] of cases) {
        const result = await runCli(args, env, { timeoutMs: 60_000 });
        const explained = describeResult(args, result);
        expect({ code: result.code, stdout: result.stdout, explained }).toEqual({ code, stdout: '', explained });
        expect(result.stderr.split('\n')[0]).toMatch(message);
      }
    });
  });
});
