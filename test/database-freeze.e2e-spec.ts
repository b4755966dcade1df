import OpenAI, { APIError } from 'openai';
import { execFileSync } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { PROBE_TIMEOUT_MS } from '../src/health/database-probe';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { killQuietly, readPostmasterPid, ServerProcess, sleep, waitUntil } from './support/processes';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';

/**
 * PostgreSQL frozen (SIGSTOP on every process of the cluster: the server accepts TCP
 * connections and answers nothing) under load from the official SDK, against `npm start`'s
 * service with its defaults (journaled settlements, budget leases). The bounds of README
 * "Running in production": a request that waits on the database is refused with 503
 * `database_unavailable` and Retry-After within DATABASE_ANSWER_TIMEOUT_MS (6 s) and a
 * margin; /health/ready answers without waiting on the database (503 during the freeze); the service
 * recovers by itself after SIGCONT, and the books balance. The cluster is this file's own
 * (the suite's shared one must never be stopped under the other files).
 */
jest.setTimeout(240_000);

const FREEZE_MS = 15_000;
/** DATABASE_ANSWER_TIMEOUT_MS's default, and room for a loaded machine (2 cores shared with other tests). */
const REFUSAL_BOUND_MS = 6_000 + 2_500;
/**
 * What this bound proves: /health/ready does not wait on the frozen database. Without its
 * 500 ms cap (READINESS_WAIT_MS) a probe would wait for its connection's own timeout,
 * PROBE_TIMEOUT_MS (5 s); half of that leaves 2 s for this jest worker, which times the
 * answer, being stalled by a collection of its heap on a busy machine (a probe the service
 * answered at 0.5 s was seen at 1.1 s in the full suite). Its 500 ms cap itself is shown on
 * fake timers (src/health/database-probe.spec.ts).
 */
const READY_BOUND_MS = PROBE_TIMEOUT_MS / 2;

interface Outcome {
  startedAt: number;
  endedAt: number;
  stream: boolean;
  status: number;
  code?: string | null;
  retryAfter?: string | null;
  requestId?: string | null;
  cost?: number;
  detail?: string;
}

/** The processes the postmaster started (backends, writers), read from ps: fast enough to stop them all at once. */
function childrenOf(postmaster: number): number[] {
  return execFileSync('ps', ['-e', '-o', 'pid=,ppid='], { encoding: 'utf8' })
    .trim()
    .split('\n')
    .map((line) => line.trim().split(/\s+/).map(Number))
    .filter(([, ppid]) => ppid === postmaster)
    .map(([pid]) => pid);
}

describe('PostgreSQL frozen (SIGSTOP) under load', () => {
  let upstream: FakeOpenAi;
  let dataDir: string;
  let server: ServerProcess;
  let baseUrl: string;
  let setup: TestApp;
  let db: DataSource;
  let postmaster: number;
  let frozen: number[] = [];

  const thaw = () => {
    // Postmaster last: its children are resumed first, so that it finds them running.
    for (const pid of [...frozen].reverse()) killQuietly(pid, 'SIGCONT');
    frozen = [];
  };

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-freeze-'));
    // The embedded PostgreSQL runs as the `postgres` user under root: it must reach DATA_DIR.
    await chmod(dataDir, 0o755);
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    server = ServerProcess.start({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      SESSION_SECRET: 'freeze-test-session-secret-0123456789',
      OPENAI_API_KEY: 'sk-upstream',
      OPENAI_BASE_URL: upstream.url,
      RATE_LIMIT_ANONYMOUS_RPM: '1000000',
      LOG_LEVEL: 'warn',
      LOG_FORMAT: 'pretty',
    });
    await server.waitForHealth(baseUrl, 120_000);
    const running = await readPostmasterPid(path.join(dataDir, 'postgres'));
    if (!running) throw new Error('No embedded PostgreSQL under DATA_DIR');
    postmaster = running.pid;
    const password = (await readFile(path.join(dataDir, 'embedded-postgres.password'), 'utf8')).trim();
    setup = await startTestApp({ databaseUrl: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${running.port}/assistant_chat` });
    db = setup.app.get<DataSource>(getDataSourceToken());
  }, 180_000);

  afterAll(async () => {
    thaw();
    if (server) await server.stop('SIGTERM', 60_000).catch(() => server.kill());
    await setup?.close().catch(() => undefined);
    await upstream?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  async function ask(workspace: TestWorkspace, client: OpenAI, stream: boolean): Promise<Outcome> {
    const startedAt = Date.now();
    const params = { model: 'gpt-4o', messages: [{ role: 'user' as const, content: 'Hello' }], max_tokens: 50 };
    try {
      if (stream) {
        const { data, response } = await client.chat.completions.create({ ...params, stream: true }).withResponse();
        let text = '';
        for await (const chunk of data) text += chunk.choices[0]?.delta?.content ?? '';
        return { startedAt, endedAt: Date.now(), stream, status: response.status, requestId: response.headers.get('x-request-id'), detail: text };
      }
      const { data, response } = await client.chat.completions.create(params).withResponse();
      const cost = (data as unknown as { x_service?: { cost_millicents: number } }).x_service?.cost_millicents;
      return { startedAt, endedAt: Date.now(), stream, status: response.status, requestId: response.headers.get('x-request-id'), cost };
    } catch (error) {
      if (error instanceof APIError && error.status !== undefined) {
        return {
          startedAt,
          endedAt: Date.now(),
          stream,
          status: error.status,
          code: error.code ?? null,
          retryAfter: error.headers?.get('retry-after') ?? null,
          requestId: error.requestID ?? null,
          detail: error.message,
        };
      }
      void workspace;
      return { startedAt, endedAt: Date.now(), stream, status: 0, detail: String(error) };
    }
  }

  it('refuses every request waiting on it with 503 database_unavailable within the bound, /health/ready answers without waiting on it, and recovers with the books balanced', async () => {
    const INITIAL = 100_000_000;
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: INITIAL });
    // Timeouts far above the bound: a stalled request shows as a long one, not as an SDK timeout.
    const client = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: workspace.apiKey, maxRetries: 0, timeout: 60_000 });
    upstream.setDefault({ kind: 'text', text: 'Hi there.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 20, chunkDelayMs: 5 });

    const outcomes: Outcome[] = [];
    let running = true;
    const workers = Array.from({ length: 6 }, async (_, worker) => {
      for (let i = 0; running; i++) {
        const outcome = await ask(workspace, client, worker % 3 === 2);
        outcomes.push(outcome);
        if (outcome.status !== 200) await sleep(100);
      }
    });
    const readiness: { at: number; ms: number; status: number }[] = [];
    const prober = (async () => {
      while (running) {
        const at = Date.now();
        const status = await fetch(`${baseUrl}/health/ready`, { signal: AbortSignal.timeout(10_000) }).then(
          (response) => response.status,
          () => 0,
        );
        readiness.push({ at, ms: Date.now() - at, status });
        await sleep(250);
      }
    })();

    let frozenAt = 0;
    let thawedAt = 0;
    try {
      await sleep(3_000);
      frozenAt = Date.now();
      // The postmaster first: it starts no process while its children are being stopped.
      killQuietly(postmaster, 'SIGSTOP');
      frozen = [postmaster];
      for (const pid of childrenOf(postmaster)) {
        killQuietly(pid, 'SIGSTOP');
        frozen.push(pid);
      }
      await sleep(FREEZE_MS);
    } finally {
      thaw();
      thawedAt = Date.now();
    }
    await sleep(10_000);
    running = false;
    await Promise.all([...workers, prober]);

    const took = (o: Outcome) => o.endedAt - o.startedAt;
    const byStatus = (list: Outcome[]) => list.reduce<Record<string, number>>((counts, o) => ({ ...counts, [o.status]: (counts[o.status] ?? 0) + 1 }), {});
    // Requests that had to wait on the frozen database: started during the freeze, or running into it.
    const during = outcomes.filter((o) => o.endedAt > frozenAt && o.startedAt < thawedAt);
    const refused = outcomes.filter((o) => o.status === 503);
    const refusalTimes = refused.map(took).sort((a, b) => a - b);
    const p99 = refusalTimes[Math.min(refusalTimes.length - 1, Math.floor(refusalTimes.length * 0.99))];
    const readyDuring = readiness.filter((r) => r.at > frozenAt + 1_000 && r.at + r.ms < thawedAt);
    console.log(
      `PostgreSQL frozen ${FREEZE_MS} ms: ${outcomes.length} requests ${JSON.stringify(byStatus(outcomes))}, during the freeze ${JSON.stringify(byStatus(during))}; ` +
        `refusals: ${refused.length}, max ${refusalTimes[refusalTimes.length - 1]} ms, p99 ${p99} ms, median ${refusalTimes[Math.floor(refusalTimes.length / 2)]} ms; ` +
        `slowest request during the freeze ${Math.max(...during.map(took))} ms; ` +
        `/health/ready during the freeze: ${readyDuring.length} probes, max ${Math.max(...readyDuring.map((r) => r.ms))} ms, statuses ${JSON.stringify([...new Set(readyDuring.map((r) => r.status))])}`,
    );

    // Nothing but answers and 503 database_unavailable with Retry-After; nothing waits past the bound.
    const logOf = (o: Outcome) => server.output().split('\n').filter((line) => o.requestId && line.includes(o.requestId));
    expect(outcomes.filter((o) => o.status !== 200 && o.status !== 503).map((o) => ({ ...o, log: logOf(o) }))).toEqual([]);
    expect(refused.filter((o) => o.code !== 'database_unavailable' || o.retryAfter !== '5')).toEqual([]);
    expect(during.filter((o) => took(o) > REFUSAL_BOUND_MS)).toEqual([]);
    // The freeze was felt: requests were refused, not only answered from the budget lease.
    expect(refused.length).toBeGreaterThan(5);
    // Streams that were answered were whole.
    expect(outcomes.filter((o) => o.stream && o.status === 200 && o.detail !== 'Hi there.')).toEqual([]);

    // /health/ready: never waits on the database; not ready during the freeze, ready after.
    expect(readiness.filter((r) => r.ms > READY_BOUND_MS || r.status === 0)).toEqual([]);
    expect(readyDuring.length).toBeGreaterThan(5);
    expect(readyDuring.every((r) => r.status === 503)).toBe(true);
    expect(readiness.filter((r) => r.at > thawedAt + 3_000).every((r) => r.status === 200)).toBe(true);

    // Recovered by itself: everything started 3 s after the thaw was served.
    const after = outcomes.filter((o) => o.startedAt > thawedAt + 3_000);
    expect(after.length).toBeGreaterThan(10);
    expect(byStatus(after)).toEqual({ 200: after.length });

    // Books: once nothing is held, every settlement answered for has committed; each answer charged as told.
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 30_000)).toBe(true);
    const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: INITIAL - charged, reserved: 0, ledger: INITIAL - charged, holds: 0 });
    const rows = (await db.query(`SELECT request_id, status, error_code, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1`, [
      workspace.id,
    ])) as { request_id: string; status: string; error_code: string | null; cost: number }[];
    const recorded = new Map(rows.map((row) => [row.request_id, row]));
    const answered = outcomes.filter((o) => o.status === 200);
    expect(answered.filter((o) => recorded.get(o.requestId!)?.status !== 'success' || (!o.stream && recorded.get(o.requestId!)?.cost !== o.cost))).toEqual([]);
    // A refusal's record, where one was written, says what happened.
    expect(rows.filter((row) => row.error_code === 'internal_error')).toEqual([]);
  });
});
