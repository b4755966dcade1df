import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { freePort } from '../src/database/embedded-postgres';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { ServerProcess, waitUntil } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';

/**
 * Structured logs (issue 13, item 5), read from a real service process's stdout with
 * LOG_FORMAT=json: every line is one JSON object; each request has a line with its request
 * id and workspace id; no API key, Authorization value or cookie is ever written.
 */
describe('JSON logs', () => {
  let upstream: FakeOpenAi;
  let setup: TestApp;
  let server: ServerProcess | undefined;
  let dataDir: string;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
  });
  afterAll(async () => {
    server?.kill();
    await setup?.close();
    await upstream?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('writes one JSON object per line, a line per request with reqId and workspaceId, and no secret', async () => {
    const databaseUrl = await createTestDatabase();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-logging-'));
    setup = await startTestApp({ databaseUrl });
    const workspace = await setup.createWorkspace({ balanceMillicents: 1_000_000 });
    const port = await freePort();
    server = ServerProcess.start({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      SESSION_SECRET: 'logging-test-secret-0123456789abcdef',
      OPENAI_API_KEY: 'sk-upstream-secret-key-0123456789',
      OPENAI_BASE_URL: upstream.url,
      NODE_ENV: 'development',
      LOG_FORMAT: 'json',
      LOG_LEVEL: 'log',
    });
    const baseUrl = `http://127.0.0.1:${port}`;
    await server.waitForHealth(baseUrl, 30_000);

    upstream.setDefault({ kind: 'text', text: 'Hello.', usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const chat = await fetch(`${baseUrl}/v1/chat/completions?api_key=${workspace.apiKey}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json', Cookie: 'acs.sid=cookie-value-secret' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] }),
    });
    expect(chat.status).toBe(200);
    const requestId = chat.headers.get('x-request-id')!;
    // A refused key: its value must not be logged either.
    const wrongKey = `sk-${'W'.repeat(43)}`;
    expect((await fetch(`${baseUrl}/v1/models`, { headers: { Authorization: `Bearer ${wrongKey}` } })).status).toBe(401);

    // A single-use link's secret in the path (here an unknown one): the log must not let its reader use it.
    const linkSecret = 'L'.repeat(43);
    const linkAnswer = await fetch(`${baseUrl}/sign-in/${linkSecret}`, { redirect: 'manual' });
    expect(linkAnswer.status).toBeLessThan(500);

    const requestLine = () =>
      server!.stdout
        .split('\n')
        .filter((line) => line.includes(requestId))
        .map((line) => JSON.parse(line) as Record<string, unknown>)
        .find((line) => line.context === 'HTTP');
    expect(await waitUntil(() => requestLine() !== undefined, 5_000)).toBe(true);
    expect(requestLine()).toMatchObject({
      level: 'info',
      context: 'HTTP',
      reqId: requestId,
      workspaceId: workspace.id,
      method: 'POST',
      path: '/v1/chat/completions',
      route: '/v1/chat/completions',
      status: 200,
      durationMs: expect.any(Number),
      time: expect.stringMatching(/^\d{4}-\d\d-\d\dT/),
    });

    await server.stop('SIGTERM', 30_000);
    const lines = server.stdout.split('\n').filter((line) => line.trim() !== '');
    // Start-up, requests and the stop: every line is JSON.
    expect(lines.length).toBeGreaterThan(5);
    for (const line of lines) expect(() => JSON.parse(line)).not.toThrow();
    const parsed = lines.map((line) => JSON.parse(line) as Record<string, unknown>);
    expect(parsed.some((line) => typeof line.msg === 'string' && /SIGTERM received/.test(line.msg))).toBe(true);
    expect(parsed.find((line) => line.context === 'HTTP' && line.path === '/v1/models')).toMatchObject({ status: 401, workspaceId: null });
    const everything = server.stdout + server.stderr;
    expect(parsed.find((line) => line.context === 'HTTP' && line.path === '/sign-in/[redacted]')).toMatchObject({ method: 'GET' });
    for (const secret of [workspace.apiKey, workspace.apiKey.slice(3), wrongKey, 'sk-upstream-secret-key', 'cookie-value-secret', linkSecret]) {
      expect(everything).not.toContain(secret);
    }
  }, 90_000);
});
