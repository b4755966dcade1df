import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { DocumentReadError } from '../src/assistants/documents/document-read-error';
import { DocumentReader } from '../src/assistants/documents/document-reader';
import { DocumentsService, MAX_READ_ATTEMPTS } from '../src/assistants/documents/documents.service';
import { freePort } from '../src/database/embedded-postgres';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { BROWSER_ACCEPT, DashboardClient, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { makeDocxBomb, makeNestedHtml, makePdfFlateBomb } from './support/document-files';
import { runCli, runCliInProcess, ServerProcess, sleep, waitUntil } from './support/processes';
import { startTestApp, testConfig, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';

jest.setTimeout(180_000);

const MB = 1024 * 1024;
/** The bound this suite states for the process hosting the app while it reads the hostile files. */
const MAX_RSS_GROWTH = 300 * MB;

/** The hostile files of issue 29, each with the reason its reading ends with. */
async function hostileFiles(): Promise<Array<{ name: string; data: Buffer; reason: string }>> {
  return [
    { name: 'bomb.docx', data: await makeDocxBomb(), reason: 'bomb.docx could not be read: it is too large once unpacked (over 50 MB).' },
    {
      name: 'liar.docx',
      data: await makeDocxBomb({ lie: true }),
      reason: 'liar.docx could not be read: it is too large once unpacked (over 50 MB).',
    },
    {
      name: 'bomb.pdf',
      data: await makePdfFlateBomb(),
      reason: 'bomb.pdf could not be read: it is too large once unpacked (its compressed streams hold over 50 MB).',
    },
    { name: 'nested.html', data: makeNestedHtml(), reason: 'nested.html could not be read: its HTML is nested more than 256 levels deep.' },
  ];
}

/** The process's resident memory, sampled every 50 ms until stopped; the peak above the level at the start. */
function watchRss(): { stop(): { baseline: number; peakGrowth: number } } {
  const baseline = process.memoryUsage.rss();
  let peak = baseline;
  const timer = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 50);
  return {
    stop() {
      clearInterval(timer);
      peak = Math.max(peak, process.memoryUsage.rss());
      return { baseline, peakGrowth: peak - baseline };
    },
  };
}

const mb = (bytes: number) => `${(bytes / MB).toFixed(1)} MB`;

/**
 * Issue 29, item 1: files built to take a reader down (a DOCX bomb, one whose ZIP directory
 * lies about its sizes, a PDF Flate bomb, deeply nested HTML) end `failed` with a reason a
 * person understands, through the dashboard and the CLI, while the process stays within a
 * stated memory bound; readers that run too long or too big are killed without harm to the
 * process; and a document whose reader died with its process is taken up at most
 * MAX_READ_ATTEMPTS times across restarts, then `failed`, the service staying up.
 */
describe('documents read in isolation', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let files: Awaited<ReturnType<typeof hostileFiles>>;

  beforeAll(async () => {
    [t, files] = await Promise.all([startTestApp(), hostileFiles()]);
    owner = await signUp(t.baseUrl, { email: 'ida@example.com', name: 'Ida Isolation' });
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'pro');
  });
  afterAll(async () => {
    await t?.app.get(DocumentIngestion).idle();
    await t?.close();
  });

  const db = () => t.app.get(DataSource);

  async function createAssistant(slug: string): Promise<string> {
    const [row] = await db().query<Array<{ id: string }>>(
      `INSERT INTO assistants (workspace_id, name, slug, model) VALUES ($1, 'Isolation', $2, 'gpt-4o-mini') RETURNING id`,
      [owner.workspaceId, slug],
    );
    return row.id;
  }

  /** A multipart upload as the dashboard's form sends it. */
  async function upload(client: DashboardClient, uploadPath: string, file: { name: string; data: Buffer }): Promise<number> {
    const form = new FormData();
    form.append('_csrf', client.csrfToken!);
    form.append('files', new Blob([file.data]), file.name);
    const cookie = [...client.cookies].map(([k, v]) => `${k}=${v}`).join('; ');
    const response = await fetch(`${client.baseUrl}${uploadPath}`, { method: 'POST', body: form, headers: { accept: BROWSER_ACCEPT, cookie }, redirect: 'manual' });
    await response.arrayBuffer();
    return response.status;
  }

  it('the files are what the issue describes: under 1 MB (the HTML 1.5 MB), hundreds of MB once unpacked', () => {
    for (const file of files) expect(file.data.length).toBeLessThan(file.name.endsWith('.html') ? 2 * MB : MB);
  });

  it('each uploaded through the dashboard ends failed with its reason, shown in the panel; memory stays within the bound', async () => {
    const assistantId = await createAssistant('hostile-dashboard');
    const uploadPath = `/w/${owner.workspaceId}/assistants/${assistantId}/documents`;
    await owner.client.get(`/w/${owner.workspaceId}/assistants/${assistantId}`);
    const documents = t.app.get(DocumentsService);
    const measured: string[] = [];
    let worstGrowth = 0;
    for (const file of files) {
      const rss = watchRss();
      const started = Date.now();
      expect(await upload(owner.client, uploadPath, file)).toBe(303);
      let status = 'processing';
      await waitUntil(async () => {
        const listed = (await documents.list(assistantId)).find((document) => document.name === file.name);
        status = listed?.status ?? 'missing';
        return status !== 'processing' && status !== 'missing';
      }, 60_000);
      const readMs = Date.now() - started;
      const { baseline, peakGrowth } = rss.stop();
      worstGrowth = Math.max(worstGrowth, peakGrowth);
      measured.push(`${file.name}: failed after ${readMs} ms, peak RSS growth ${mb(peakGrowth)} (from ${mb(baseline)})`);
      expect(status).toBe('failed');
    }
    console.log(`Dashboard uploads of hostile files:\n${measured.join('\n')}`);

    const listed = await documents.list(assistantId);
    expect(listed.map((document) => [document.name, document.status, document.failureReason, document.readAttempts])).toEqual(
      files.map((file) => [file.name, 'failed', file.reason, 1]),
    );
    const panel = await owner.client.get(uploadPath, { headers: { 'hx-request': 'true' } });
    for (const file of files) expect(textOf(panel.html)).toContain(`Failed: ${file.reason}`);
    // And to the operator's CLI.
    const cliList = await runCliInProcess(['document', 'list', '--assistant', assistantId], { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error' });
    expect(cliList.code).toBe(0);
    expect((JSON.parse(cliList.stdout) as { data: Array<{ name: string; status: string; failure_reason: string }> }).data).toEqual(
      files.map((file) => expect.objectContaining({ name: file.name, status: 'failed', failure_reason: file.reason })),
    );
    expect(worstGrowth).toBeLessThan(MAX_RSS_GROWTH);
    // The process is there to answer.
    expect((await fetch(`${t.baseUrl}/health`)).status).toBe(200);
  });

  it('each added with the CLI is refused with the same reason (exit 1), and nothing is stored', async () => {
    const assistantId = await createAssistant('hostile-cli');
    const dir = await mkdtemp(path.join(tmpdir(), 'acs-hostile-'));
    try {
      const rss = watchRss();
      for (const file of files) {
        const filePath = path.join(dir, file.name);
        await writeFile(filePath, file.data);
        const result = await runCliInProcess(['document', 'add', '--assistant', assistantId, '--file', filePath], {
          DATABASE_URL: t.databaseUrl,
          LOG_LEVEL: 'error',
        });
        expect({ code: result.code, stdout: result.stdout }).toEqual({ code: 1, stdout: '' });
        expect(result.stderr).toContain(file.reason);
      }
      const { peakGrowth } = rss.stop();
      console.log(`CLI adds of hostile files: peak RSS growth ${mb(peakGrowth)}`);
      expect(peakGrowth).toBeLessThan(MAX_RSS_GROWTH);
      // The compiled CLI (its reader's worker loads the compiled entry) says the same.
      const spawned = await runCli(['document', 'add', '--assistant', assistantId, '--file', path.join(dir, 'bomb.docx')], {
        DATABASE_URL: t.databaseUrl,
        LOG_LEVEL: 'error',
      });
      expect({ code: spawned.code, stdout: spawned.stdout }).toEqual({ code: 1, stdout: '' });
      expect(spawned.stderr).toContain(files[0].reason);
      expect(await t.app.get(DocumentsService).list(assistantId)).toEqual([]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  describe('the reader kills a worker past its bounds, and the process goes on', () => {
    function reader(documents: Partial<ReturnType<typeof testConfig>['documents']>): DocumentReader {
      const config = testConfig();
      return new DocumentReader({ ...config, documents: { ...config.documents, ...documents } });
    }
    async function refusal(read: Promise<unknown>): Promise<DocumentReadError> {
      const error = await read.then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(error).toBeInstanceOf(DocumentReadError);
      return error as DocumentReadError;
    }
    /**
     * Legitimate but slow HTML: 256 levels deep, over and over: about 5 s of html-to-text on this
     * machine, alone (half as much, 1.5 s, was read within the 1 s bound at a quiet moment of a
     * full run). Killed at the bound, it has used no more memory than a smaller file would.
     */
    const slowHtml = Buffer.from(('<div>'.repeat(250) + '<p>Some words here.</p>' + '</div>'.repeat(250)).repeat(3000));

    it('a file that takes longer than DOCUMENT_READ_TIMEOUT_SECONDS: "took too long to read"', async () => {
      const error = await refusal(reader({ readTimeoutMs: 1_000 }).read('html', slowHtml));
      expect({ reason: error.reason, message: error.message }).toEqual({ reason: 'timeout', message: 'it took too long to read (over 1 s).' });
    });

    it('a file that needs more heap than DOCUMENT_READ_MEMORY_MB: "used too much memory"', async () => {
      // A flat page of 150,000 elements: html-to-text's tree of it needs far more than 64 MB.
      const wide = Buffer.from(`<html><body>${'<span>word</span> '.repeat(150_000)}</body></html>`);
      const error = await refusal(reader({ readMemoryMb: 64 }).read('html', wide));
      expect({ reason: error.reason, message: error.message }).toEqual({ reason: 'memory', message: 'it used too much memory while being read.' });
      // With room, the same file is read.
      const chunks = await reader({ readMemoryMb: 512 }).read('html', wide);
      expect(chunks.reduce((sum, chunk) => sum + chunk.tokens, 0)).toBeGreaterThanOrEqual(150_000);
    });

    it('at most DOCUMENT_READERS files are read at once; the others wait and are read', async () => {
      const two = reader({ readers: 2, readTimeoutMs: 60_000 });
      let most = 0;
      const watch = setInterval(() => (most = Math.max(most, two.reading)), 1);
      const words = ['first', 'second', 'third', 'fourth', 'fifth'];
      const read = await Promise.all(words.map((word) => two.read('html', Buffer.from(`<p>The ${word} file.</p>`))));
      clearInterval(watch);
      expect(read.map((chunks) => chunks.map((chunk) => chunk.content))).toEqual(words.map((word) => [`The ${word} file.`]));
      expect(most).toBe(2);
      expect(two.reading).toBe(0);
    });
  });
});

/**
 * A document whose reader dies with its process (SIGKILL mid-read, as an out-of-memory kill
 * would) is taken up again by the sweeper of the next process, at most MAX_READ_ATTEMPTS times
 * in all, then marked failed: a poison document cannot crash-loop a replica.
 */
describe('a reader killed with its process', () => {
  let databaseUrl: string;
  let dataDir: string;
  let db: Client;
  const servers: ServerProcess[] = [];

  beforeAll(async () => {
    databaseUrl = await createTestDatabase();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-poison-'));
    db = new Client({ connectionString: databaseUrl });
    await db.connect();
  });
  afterAll(async () => {
    for (const server of servers) server.kill();
    await db?.end();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  async function documentRow(id: string): Promise<{ status: string; read_attempts: number; failure_reason: string | null }> {
    const { rows } = await db.query<{ status: string; read_attempts: number; failure_reason: string | null }>(
      'SELECT status, read_attempts, failure_reason FROM documents WHERE id = $1',
      [id],
    );
    return rows[0];
  }

  async function startServer(): Promise<{ server: ServerProcess; baseUrl: string }> {
    const port = await freePort();
    const server = ServerProcess.start({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      SESSION_SECRET: 'poison-document-test-secret-0123456789',
      LLM_SIMULATOR: 'on',
      DOCUMENT_LEASE_SECONDS: '4',
      LOG_LEVEL: 'log',
      LOG_FORMAT: 'pretty',
    });
    servers.push(server);
    const baseUrl = `http://127.0.0.1:${port}`;
    await server.waitForHealth(baseUrl, 60_000);
    return { server, baseUrl };
  }

  it('is taken up at most 3 times in all across restarts, then failed; the last process stays up', async () => {
    expect(MAX_READ_ATTEMPTS).toBe(3);
    const { rows: [workspace] } = await db.query<{ id: string }>(`INSERT INTO workspaces (name, tier) VALUES ('Poison', 'pro') RETURNING id`);
    const { rows: [assistant] } = await db.query<{ id: string }>(
      `INSERT INTO assistants (workspace_id, name, slug, model) VALUES ($1, 'Poison', 'poison', 'gpt-4o-mini') RETURNING id`,
      [workspace.id],
    );
    // A slow file (seconds of html-to-text), as an upload leaves it: its first reader (attempt 1) died at once.
    const slow = Buffer.from(('<div>'.repeat(250) + '<p>Some words here.</p>' + '</div>'.repeat(250)).repeat(2000));
    const { rows: [document] } = await db.query<{ id: string }>(
      `INSERT INTO documents (workspace_id, assistant_id, name, mime_type, size_bytes, chunk_count, status, upload, ingestion_lease_until, read_attempts)
       VALUES ($1, $2, 'slow.html', 'text/html', $3, 0, 'processing', $4, now() - interval '1 second', 1) RETURNING id`,
      [workspace.id, assistant.id, slow.length, slow],
    );

    // Two processes take it up in turn and are killed mid-read.
    for (const attempt of [2, 3]) {
      const { server } = await startServer();
      expect(await waitUntil(async () => (await documentRow(document.id)).read_attempts === attempt, 30_000)).toBe(true);
      await sleep(300); // well into the reading, which takes seconds
      await server.stop('SIGKILL', 5_000);
      expect(await documentRow(document.id)).toMatchObject({ status: 'processing', read_attempts: attempt });
    }

    // The next process finds it read MAX_READ_ATTEMPTS times already: failed, not read again.
    const { server, baseUrl } = await startServer();
    expect(await waitUntil(async () => (await documentRow(document.id)).status === 'failed', 30_000)).toBe(true);
    const row = await documentRow(document.id);
    console.log(`Poison document after three killed readers and a restart: ${JSON.stringify(row)}`);
    expect(row).toEqual({
      status: 'failed',
      read_attempts: 3,
      failure_reason:
        'slow.html could not be read after 3 attempts: its reader stopped each time (the file may be too large or damaged). Delete it, and upload a smaller or repaired file.',
    });
    // Still up, and it stays so over another sweep or two.
    await sleep(3_000);
    expect(server.running).toBe(true);
    expect((await fetch(`${baseUrl}/health`)).status).toBe(200);
    expect((await documentRow(document.id)).read_attempts).toBe(3);
    await server.stop('SIGTERM', 30_000);
  });
});
