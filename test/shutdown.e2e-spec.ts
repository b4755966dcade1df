import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { Agent, request as httpRequest, type IncomingHttpHeaders } from 'node:http';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { killQuietly, processEnv, ServerProcess, waitUntil } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';
import { TOKENS_AS_INT } from './support/usage-records';
import { walletInvariants } from './support/wallet-invariants';

const REPO = path.resolve(__dirname, '..');
const DRAIN_MS = 2_000;

interface Answer {
  status: number;
  headers: IncomingHttpHeaders;
  body: string;
  /** Whether it went over a connection opened for an earlier request. */
  reusedSocket: boolean;
  /** When (Date.now()) the last byte came. */
  endedAt: number;
}

/** One HTTP request through `agent`, its whole body read. */
function send(agent: Agent, url: string, options: { method?: string; headers?: Record<string, string>; body?: unknown } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { agent, method: options.method ?? 'GET', headers: { 'Content-Type': 'application/json', ...options.headers } }, (res) => {
      let body = '';
      res.setEncoding('utf8').on('data', (chunk: string) => (body += chunk));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body, reusedSocket: req.reusedSocket, endedAt: Date.now() }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(options.body === undefined ? undefined : JSON.stringify(options.body));
  });
}

/** The data frames of an SSE body, parsed; `[DONE]` as the string. */
function frames(body: string): unknown[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.startsWith('data: '))
    .map((frame) => frame.slice('data: '.length))
    .map((data) => (data === '[DONE]' ? data : JSON.parse(data)));
}

/**
 * SIGTERM on a real service process (issue 13, item 4): readiness turns 503 at once, a
 * request on a kept-alive connection is answered with `Connection: close`, a plain request in
 * flight completes, and a stream still open at the drain deadline ends with an in-band
 * `server_shutting_down` error and `[DONE]`, charged for what it generated; nothing stays
 * held. And `npm start` passes SIGTERM on to the service.
 */
describe('graceful shutdown', () => {
  let upstream: FakeOpenAi;
  let setup: TestApp;
  let db: DataSource;
  let databaseUrl: string;
  let dataDir: string;
  const servers: ServerProcess[] = [];

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    databaseUrl = await createTestDatabase();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-shutdown-'));
    // For workspaces and the invariants only: the traffic goes to the spawned process.
    setup = await startTestApp({ databaseUrl });
    db = setup.app.get<DataSource>(getDataSourceToken());
  });
  afterAll(async () => {
    for (const server of servers) server.kill();
    await setup?.close();
    await upstream?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  function serviceEnv(port: number): Record<string, string> {
    return {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      SESSION_SECRET: 'shutdown-test-secret-0123456789abcdef',
      OPENAI_API_KEY: 'sk-upstream',
      OPENAI_BASE_URL: upstream.url,
      SHUTDOWN_DRAIN_MS: String(DRAIN_MS),
      LOG_LEVEL: 'log',
      LOG_FORMAT: 'pretty',
    };
  }

  it('turns unready at once, closes kept-alive connections after their answer, finishes plain requests and ends streams at the deadline, charged', async () => {
    const port = await freePort();
    const server = ServerProcess.start(serviceEnv(port));
    servers.push(server);
    const baseUrl = `http://127.0.0.1:${port}`;
    await server.waitForHealth(baseUrl, 30_000);
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
    const auth = { Authorization: `Bearer ${workspace.apiKey}` };

    // A client's kept-alive connection, idle when the stop begins.
    const keptAlive = new Agent({ keepAlive: true, maxSockets: 1 });
    expect((await send(keptAlive, `${baseUrl}/health/ready`)).status).toBe(200);

    // A stream of 100 words, one every 100 ms: far longer than the drain deadline.
    const words = Array.from({ length: 100 }, (_, i) => `word${i} `).join('');
    upstream.script({ kind: 'text', text: words, chunkDelayMs: 100, usage: { prompt_tokens: 12, completion_tokens: 200 } });
    const streamAgent = new Agent({ keepAlive: true });
    let streamed = '';
    let streamHeaders: IncomingHttpHeaders = {};
    const stream = new Promise<number>((resolve, reject) => {
      const req = httpRequest(`${baseUrl}/v1/chat/completions`, { agent: streamAgent, method: 'POST', headers: { 'Content-Type': 'application/json', ...auth } }, (res) => {
        streamHeaders = res.headers;
        res.setEncoding('utf8').on('data', (chunk: string) => (streamed += chunk));
        res.on('end', () => resolve(Date.now()));
        res.on('error', reject);
      });
      req.on('error', reject);
      req.end(JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'Count slowly.' }] }));
    });
    expect(await waitUntil(() => streamed.includes('word3 '), 10_000)).toBe(true);

    // A plain request that takes 1.5 s upstream, in flight when SIGTERM comes.
    upstream.script({ kind: 'text', text: 'Plain answer.', delayMs: 1_500, usage: { prompt_tokens: 10, completion_tokens: 3 } });
    const plain = send(new Agent(), `${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: auth,
      body: { model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }] },
    });
    expect(await waitUntil(() => upstream.requests.length === 2, 5_000)).toBe(true);

    // A plain request and a stream whose upstream never answers: still waiting at the deadline.
    upstream.script({ kind: 'hang' });
    upstream.script({ kind: 'hang' });
    const unanswered = [false, true].map((streamed) =>
      send(new Agent(), `${baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: auth,
        body: { model: 'gpt-4o', stream: streamed, messages: [{ role: 'user', content: 'Hello?' }] },
      }),
    );
    expect(await waitUntil(() => upstream.requests.length === 4, 5_000)).toBe(true);

    const signalledAt = Date.now();
    const stopped = server.stop('SIGTERM', 30_000);
    // At once: readiness fails, on the connection the client already has, which the answer closes.
    // A request sent right after the signal could reach the process before it: asked once the stop has begun.
    await server.waitForStdout(/SIGTERM received/, 1_000);
    const unready = await send(keptAlive, `${baseUrl}/health/ready`);
    expect(unready.reusedSocket).toBe(true);
    expect(unready.status).toBe(503);
    expect(JSON.parse(unready.body)).toEqual({ status: 'shutting_down', database: 'not checked' });
    expect(unready.headers.connection).toBe('close');
    expect(unready.endedAt - signalledAt).toBeLessThan(1_000);

    // The plain request in flight completes, and its connection is closed after it.
    const answered = await plain;
    expect(answered.status).toBe(200);
    expect(answered.headers.connection).toBe('close');
    expect(JSON.parse(answered.body).choices[0].message.content).toBe('Plain answer.');

    // The stream runs until the drain deadline, then ends in-band.
    const streamEndedAt = await stream;
    expect(streamEndedAt - signalledAt).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    const events = frames(streamed);
    expect(events[events.length - 1]).toBe('[DONE]');
    expect(events[events.length - 2]).toEqual({
      error: expect.objectContaining({ type: 'service_unavailable', code: 'server_shutting_down', message: expect.stringMatching(/shutting down/) }),
    });
    const delivered = events
      .slice(0, -2)
      .map((event) => (event as { choices: { delta: { content?: string } }[] }).choices[0]?.delta.content ?? '')
      .join('');
    expect(delivered.length).toBeGreaterThan(0);
    expect(delivered.length).toBeLessThan(words.length);
    // The upstream call was closed, not left to run to its end (the fake sees the close a moment
    // after the client sees [DONE], which no longer waits for the settlement's commit).
    expect(await waitUntil(() => upstream.requests[0].closedEarly === true, 2_000)).toBe(true);

    // The two still unanswered at the deadline: answered 503 then (not cut with the connections 10 s later), their upstream calls closed.
    for (const answer of await Promise.all(unanswered)) {
      expect({ status: answer.status, error: JSON.parse(answer.body).error }).toEqual({
        status: 503,
        error: expect.objectContaining({ type: 'service_unavailable', code: 'server_shutting_down' }),
      });
      expect(answer.endedAt - signalledAt).toBeGreaterThanOrEqual(DRAIN_MS - 100);
      expect(answer.endedAt - signalledAt).toBeLessThan(DRAIN_MS + 3_000);
    }
    expect(upstream.requests.slice(2).map((request) => request.closedEarly)).toEqual([true, true]);

    const exit = await stopped;
    expect(exit.code).toBe(0);
    expect(server.stdout).toMatch(/SIGTERM received/);
    expect(server.stdout).toMatch(/Drained: 4 request\(s\) were in flight, 3 open at the deadline/);

    // Charged for what was generated, and the record says why it ended.
    const [record] = await db.query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE request_id = $1`, [streamHeaders['x-request-id']]);
    expect(record).toMatchObject({ status: 'error', error_code: 'server_shutting_down', stream: true });
    expect(record.output_tokens).toBeGreaterThan(0);
    expect(record.output_tokens).toBeLessThan(200);
    expect(Number(record.charged_millicents)).toBeGreaterThan(0);
    // The two the server cut before they were answered: recorded, not charged.
    const cut = await db.query(`SELECT status, error_code, stream, charged_millicents::int AS charged FROM usage_records WHERE workspace_id = $1 AND request_id <> ALL($2) ORDER BY stream`, [
      workspace.id,
      [streamHeaders['x-request-id'], answered.headers['x-request-id']],
    ]);
    expect(cut).toEqual([false, true].map((stream) => ({ status: 'error', error_code: 'server_shutting_down', stream, charged: 0 })));
    const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`, [
      workspace.id,
    ]);
    // Nothing held survives the stop: no hold, no lease, nothing reserved; the ledger is the balance.
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000 - charged, reserved: 0, ledger: 1_000_000 - charged, holds: 0 });
    keptAlive.destroy();
    streamAgent.destroy();
  }, 90_000);

  it('npm start and start:prod replace their shell with node, so SIGTERM sent to npm reaches the service', async () => {
    const scripts = (JSON.parse(readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { scripts: Record<string, string> }).scripts;
    expect(scripts.start).toMatch(/&& exec node dist\/src\/main\.js$/);
    expect(scripts['start:prod']).toBe('exec node dist/src/main.js');

    // start:prod is start without the build (the suite has built dist already).
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    const npm = spawn('npm', ['run', '-s', 'start:prod'], { cwd: REPO, env: processEnv(serviceEnv(port)), stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    npm.stdout.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    npm.stderr.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const exited = new Promise<number | null>((resolve) => npm.on('exit', (code) => resolve(code)));
    try {
      const up = await waitUntil(() => fetch(`${baseUrl}/health`).then((res) => res.ok, () => false), 30_000);
      if (!up) throw new Error(`The service did not start:\n${output}`);
      killQuietly(npm.pid!, 'SIGTERM');
      const code = await Promise.race([exited, new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 15_000))]);
      expect(code).toBe(0);
      // The service itself stopped (it logged its stop), not only npm: nothing answers on its port.
      expect(output).toMatch(/SIGTERM received/);
      expect(await fetch(`${baseUrl}/health`).then(() => 'answered', () => 'refused')).toBe('refused');
    } finally {
      killQuietly(npm.pid!, 'SIGKILL');
    }
  }, 60_000);
});
