import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import OpenAI from 'openai';
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
 * id and workspace id; no API key, Authorization value or cookie is ever written. An upstream
 * that echoes the deployment key in its error message gets it masked, in the answer to the
 * client and in the log (issue 40, item 7).
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
    // A deployment whose key has no key shape: only the registry of configured secrets can mask it.
    const deploymentKey = 'deployment-key-Q7w9Zt3Lm2Vx8Rb4';
    const catalogFile = path.join(dataDir, 'models.json');
    const priced = { context_length: 128000, input_price: 250000, output_price: 1000000 };
    await writeFile(
      catalogFile,
      JSON.stringify({
        models: [
          { id: 'gpt-4o', provider: 'openai', ...priced },
          { id: 'echoing', ...priced, deployments: [{ label: 'echo', provider: 'openai', base_url: upstream.url, api_key_env: 'LOGGING_DEPLOYMENT_KEY' }] },
        ],
      }),
    );
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
      MODEL_CATALOG_FILE: catalogFile,
      LOGGING_DEPLOYMENT_KEY: deploymentKey,
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

    // An upstream 400 that repeats the Authorization header it got: relayed as a 400, with neither key in it.
    const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 0 });
    for (const [model, key] of [['echoing', deploymentKey], ['gpt-4o', 'sk-upstream-secret-key-0123456789']] as const) {
      upstream.script({ kind: 'http_error', status: 400, echoAuthorization: true });
      const refused = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }] }).catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(OpenAI.BadRequestError);
      const message = (refused as InstanceType<typeof OpenAI.BadRequestError>).message;
      expect(upstream.requests.at(-1)!.headers.authorization).toBe(`Bearer ${key}`);
      expect(message).toContain("The openai provider rejected the request: Invalid request: the header 'Authorization: Bearer [redacted]'");
      for (const part of [key, key.slice(0, 12), key.slice(-10)]) expect(message).not.toContain(part);
    }

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
    for (const secret of [workspace.apiKey, workspace.apiKey.slice(3), wrongKey, 'sk-upstream-secret-key', 'cookie-value-secret', linkSecret, deploymentKey, deploymentKey.slice(-10)]) {
      expect(everything).not.toContain(secret);
    }
  }, 90_000);
});
