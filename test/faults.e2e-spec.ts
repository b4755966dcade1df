import { spawn } from 'node:child_process';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { killQuietly, ServerProcess, sleep, waitUntil } from './support/processes';
import { RestartablePostgres } from './support/restartable-postgres';
import { describeWithRedisServer, findRedisServer, ping, RedisServer, startRedisServer } from './support/redis-server';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { waitFor } from './support/wait-for';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';


/**
 * Faults a production deployment meets, survived by real service processes: an upstream
 * that accepts the connection and never answers, PostgreSQL stopped for 10 s under load and
 * started again, Redis that stops answering or goes away, and a replica killed with SIGKILL
 * in the middle of a stream. The PostgreSQL here is a cluster of this file's own (the
 * suite's shared one must not be stopped under the other files), which the test stops and
 * starts with the command line PostgreSQL itself recorded (postmaster.opts).
 */
jest.setTimeout(120_000);

/** Sends raw RESP commands (no client library: nothing is left open). */
function redisCommand(port: number, ...args: string[]): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    let reply = '';
    socket.setTimeout(2_000, () => {
      socket.destroy();
      reject(new Error('redis did not answer'));
    });
    socket.once('error', reject);
    socket.once('connect', () => socket.write(`*${args.length}\r\n${args.map((arg) => `$${Buffer.byteLength(arg)}\r\n${arg}\r\n`).join('')}`));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.endsWith('\r\n')) {
        socket.destroy();
        resolve(reply.trim());
      }
    });
  });
}

interface Outcome {
  startedAt: number;
  endedAt: number;
  status: number;
  code?: string;
  requestId?: string | null;
  cost?: number;
}

describeWithRedisServer('faults survived by replicas', () => {
  let upstream: FakeOpenAi;
  let redis: RedisServer;
  let postgres: RestartablePostgres;
  let dataDir: string;
  let databaseUrl: string;
  let setup: TestApp;
  let db: DataSource;
  const replicas: { server: ServerProcess; baseUrl: string }[] = [];

  beforeAll(async () => {
    [upstream, redis] = await Promise.all([startFakeOpenAi(), startRedisServer()]);
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-faults-'));
    // The embedded PostgreSQL runs as the `postgres` user under root: it must reach DATA_DIR.
    await chmod(dataDir, 0o755);

    // A service process makes the cluster (initdb, migrations); it is then killed and the
    // cluster taken over, so that this file can stop and start it at will.
    const firstPort = await freePort();
    const first = ServerProcess.start({ PORT: String(firstPort), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'error' });
    await first.waitForHealth(`http://127.0.0.1:${firstPort}`, 120_000);
    first.kill();
    await first.exited;
    postgres = await RestartablePostgres.takeOver(dataDir);
    await postgres.start();
    const password = (await readFile(path.join(dataDir, 'embedded-postgres.password'), 'utf8')).trim();
    databaseUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${postgres.port}/assistant_chat`;

    setup = await startTestApp({ databaseUrl });
    db = setup.app.get<DataSource>(getDataSourceToken());
    for (let i = 0; i < 2; i++) {
      const port = await freePort();
      const server = ServerProcess.start({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: databaseUrl,
        DATA_DIR: dataDir,
        REDIS_URL: redis.url,
        SESSION_SECRET: 'faults-test-session-secret-0123456789',
        OPENAI_API_KEY: 'sk-upstream',
        OPENAI_BASE_URL: upstream.url,
        UPSTREAM_TIMEOUT_MS: '2000',
        UPSTREAM_MAX_RETRIES: '0',
        // Holds of a killed replica expire 10 s after their last heartbeat.
        HOLD_TTL_MS: '10000',
        HTTP_KEEP_ALIVE_TIMEOUT_MS: '65000',
        RATE_LIMIT_ANONYMOUS_RPM: '1000000',
        LOG_LEVEL: 'error',
      });
      replicas.push({ server, baseUrl: `http://127.0.0.1:${port}` });
    }
    await Promise.all(replicas.map(({ server, baseUrl }) => server.waitForHealth(baseUrl, 60_000)));
  }, 180_000);

  afterAll(async () => {
    for (const { server } of replicas) server.kill();
    await Promise.all(replicas.map(({ server }) => server.exited));
    await setup?.close();
    await postgres?.stop();
    await Promise.all([upstream?.close(), redis?.stop()]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  async function chat(baseUrl: string, workspace: TestWorkspace, body: Record<string, unknown> = {}): Promise<Outcome> {
    const startedAt = Date.now();
    try {
      const response = await fetch(`${baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 50, ...body }),
        signal: AbortSignal.timeout(30_000),
      });
      const text = await response.text();
      const parsed = (() => {
        try {
          return JSON.parse(text) as { error?: { code?: string; type?: string }; x_service?: { cost_millicents: number } };
        } catch {
          return { error: { code: `unparsable: ${text.slice(0, 200)}` } };
        }
      })();
      return {
        startedAt,
        endedAt: Date.now(),
        status: response.status,
        code: parsed.error ? `${parsed.error.type}/${parsed.error.code}` : undefined,
        requestId: response.headers.get('x-request-id'),
        cost: parsed.x_service?.cost_millicents,
      };
    } catch (error) {
      return { startedAt, endedAt: Date.now(), status: 0, code: String(error) };
    }
  }

  /** Every 200 a client got was charged with that cost: its usage record exists. */
  async function expectChargedAsTold(workspace: TestWorkspace, outcomes: Outcome[]) {
    const rows = (await db.query(`SELECT request_id, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1 AND status = 'success'`, [
      workspace.id,
    ])) as { request_id: string; cost: number }[];
    const recorded = new Map(rows.map((row) => [row.request_id, row.cost]));
    const missing = outcomes.filter((o) => o.status === 200 && recorded.get(o.requestId!) !== o.cost);
    expect(missing).toEqual([]);
  }

  /** Balance = ledger, nothing reserved, no hold, and the balance went down by exactly what was charged. */
  async function expectBooksBalanced(workspace: TestWorkspace, initial: number) {
    await waitFor(() => nothingHeld(db, workspace.id));
    const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: initial - charged, reserved: 0, ledger: initial - charged, holds: 0 });
  }

  it('answers 504 upstream_timeout after UPSTREAM_TIMEOUT_MS to an upstream that never answers, plain and streamed, and releases the hold', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
    upstream.setDefault({ kind: 'hang' });
    const outcomes = await Promise.all([
      chat(replicas[0].baseUrl, workspace),
      chat(replicas[1].baseUrl, workspace),
      chat(replicas[0].baseUrl, workspace, { stream: true }),
    ]);
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    for (const outcome of outcomes) {
      expect({ status: outcome.status, code: outcome.code }).toEqual({ status: 504, code: 'upstream_timeout/upstream_timeout' });
      const took = outcome.endedAt - outcome.startedAt;
      // Not before UPSTREAM_TIMEOUT_MS (2 s). The upper bound only tells a timeout from a hang:
      // without one the request would wait for the client's 30 s abort; half of that.
      expect(took).toBeGreaterThanOrEqual(1_900);
      expect(took).toBeLessThan(15_000);
    }
    await expectBooksBalanced(workspace, 1_000_000);
    expect(await walletInvariants(db, workspace.id)).toMatchObject({ balance: 1_000_000 });
  });

  it('answers 503 service_unavailable quickly while PostgreSQL is stopped for 10 s under load, and recovers by itself with the books balanced', async () => {
    const INITIAL = 100_000_000;
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: INITIAL });
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 20 });
    const outcomes: Outcome[] = [];
    let running = true;
    const workers = Array.from({ length: 6 }, async (_, worker) => {
      for (let i = 0; running; i++) {
        const outcome = await chat(replicas[(worker + i) % 2].baseUrl, workspace);
        outcomes.push(outcome);
        // A refused request comes back at once: do not spin.
        if (outcome.status !== 200) await sleep(50);
      }
    });

    await sleep(3_000);
    const stoppedAt = Date.now();
    await postgres.stop();
    await sleep(10_000);
    await postgres.start();
    const restartedAt = Date.now();
    await sleep(8_000);
    running = false;
    await Promise.all(workers);

    const byStatus = (list: Outcome[]) => list.reduce<Record<string, number>>((counts, o) => ({ ...counts, [o.status]: (counts[o.status] ?? 0) + 1 }), {});
    const during = outcomes.filter((o) => o.startedAt > stoppedAt + 1_000 && o.endedAt < restartedAt);
    const unavailable = outcomes.filter((o) => o.status === 503);
    const slowest503 = Math.max(...unavailable.map((o) => o.endedAt - o.startedAt));
    console.log(
      `PostgreSQL outage: ${outcomes.length} requests ${JSON.stringify(byStatus(outcomes))}, during the outage ${JSON.stringify(byStatus(during))}, ` +
        `slowest 503 ${slowest503} ms, slowest request ${Math.max(...outcomes.map((o) => o.endedAt - o.startedAt))} ms`,
    );
    // Nothing but answers and 503s: no 500, no connection reset, no hang.
    // The replicas' log lines of an unexpected answer say which error escaped.
    const unexpected = outcomes
      .filter((o) => o.status !== 200 && o.status !== 503)
      .map((o) => ({ ...o, log: replicas.flatMap(({ server }) => server.output().split('\n').filter((line) => o.requestId && line.includes(o.requestId))) }));
    expect(unexpected).toEqual([]);
    expect(new Set(unavailable.map((o) => o.code))).toEqual(new Set(['service_unavailable/database_unavailable']));
    expect(during.length).toBeGreaterThan(20);
    expect(during.every((o) => o.status === 503)).toBe(true);
    // Quickly: a refused connection is known at once; nothing waits for the pool's 10 s connect
    // timeout. The bound is half of that wait, so a busy machine is no failure and a wait is one.
    expect(slowest503).toBeLessThan(5_000);
    // Recovered by itself: everything started 3 s after the restart was served.
    const after = outcomes.filter((o) => o.startedAt > restartedAt + 3_000);
    expect(after.length).toBeGreaterThan(20);
    expect(byStatus(after)).toEqual({ 200: after.length });

    // Books first: once nothing is held, every settlement answered for has committed.
    await expectBooksBalanced(workspace, INITIAL);
    await expectChargedAsTold(workspace, outcomes);
  });

  it('keeps serving without hanging when Redis stops answering or goes away (fails open), and counts again once it answers', async () => {
    const FREE_RPM = 5;
    const list = async (baseUrl: string, workspace: TestWorkspace) => {
      const startedAt = Date.now();
      const response = await fetch(`${baseUrl}/v1/models`, { headers: { Authorization: `Bearer ${workspace.apiKey}` }, signal: AbortSignal.timeout(10_000) });
      await response.arrayBuffer();
      return { status: response.status, ms: Date.now() - startedAt };
    };
    const burst = async (workspace: TestWorkspace, count: number) => {
      const answers = [];
      for (let i = 0; i < count; i++) answers.push(await list(replicas[i % 2].baseUrl, workspace));
      return answers;
    };

    // Counting through Redis: the free tier's 5, then 429 on either replica.
    const counted = await burst(await setup.createWorkspace({ tier: 'free' }), FREE_RPM + 2);
    expect(counted.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);

    // Redis accepts connections but answers nothing for 12 s: each request waits at most the
    // command timeout (500 ms, for each of the guard's two commands), then goes through
    // uncounted. (The commands that timed out still run when the pause ends: the burst must
    // be over by then, or they would count after all.)
    const PAUSE_MS = 12_000;
    const pausedAt = Date.now();
    expect(await redisCommand(redis.port, 'CLIENT', 'PAUSE', String(PAUSE_MS), 'ALL')).toBe('+OK');
    const paused = await burst(await setup.createWorkspace({ tier: 'free' }), FREE_RPM + 1);
    console.log(`Redis paused: request durations (ms) ${paused.map((a) => a.ms).join(', ')}`);
    // The burst's precondition (see above), not a claim about speed.
    expect(Date.now() - pausedAt).toBeLessThan(PAUSE_MS);
    expect(paused.map((a) => a.status)).toEqual(Array(FREE_RPM + 1).fill(200));
    // Each waited for the command timeouts (about 1 s), not for Redis: a request that waited for
    // it would hang until the client's 10 s abort (the pause lasts 12 s); half of that.
    for (const answer of paused) expect(answer.ms).toBeLessThan(5_000);
    await sleep(PAUSE_MS + 500 - (Date.now() - pausedAt));

    // Redis gone (killed): connections are refused, requests go through at once.
    killQuietly(redis.pid, 'SIGKILL');
    await waitFor(async () => !(await ping(redis.port)));
    const gone = await burst(await setup.createWorkspace({ tier: 'free' }), FREE_RPM + 2);
    console.log(`Redis gone: request durations (ms) ${gone.map((a) => a.ms).join(', ')}`);
    expect(gone.map((a) => a.status)).toEqual(Array(FREE_RPM + 2).fill(200));
    // A refused connection fails open at once; a request that waited for Redis would hang until
    // the client's 10 s abort: half of that.
    for (const answer of gone) expect(answer.ms).toBeLessThan(5_000);

    // Redis back on its port: the replicas reconnect by themselves and count again.
    const revived = spawn(findRedisServer()!, ['--port', String(redis.port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dataDir], {
      stdio: 'ignore',
    });
    try {
      await waitFor(() => ping(redis.port));
      const workspace = await setup.createWorkspace({ tier: 'free' });
      // ioredis retries with a growing delay (up to 2 s): wait until both replicas count again.
      expect(
        await waitUntil(async () => {
          const answers = await burst(workspace, 2);
          return answers.some((a) => a.status === 429);
        }, 15_000),
      ).toBe(true);
      const again = await burst(await setup.createWorkspace({ tier: 'free' }), FREE_RPM + 2);
      expect(again.map((a) => a.status)).toEqual([200, 200, 200, 200, 200, 429, 429]);
    } finally {
      killQuietly(revived.pid!, 'SIGKILL');
    }
  });

  it('gives back the holds of a replica killed with SIGKILL mid-stream through the sweeper of the other one, and charges nothing twice', async () => {
    const INITIAL = 10_000_000;
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: INITIAL });
    const [victim, survivor] = replicas;
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    // Some plain requests on each first: both hold budget leases of the workspace.
    const plain = await Promise.all(Array.from({ length: 10 }, (_, i) => chat(replicas[i % 2].baseUrl, workspace)));
    expect(plain.map((o) => o.status)).toEqual(Array(10).fill(200));

    upstream.setDefault({ kind: 'text', text: Array.from({ length: 40 }, (_, i) => `w${i} `).join(''), chunkDelayMs: 250 });
    const response = await fetch(`${victim.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'A long story' }], stream: true }),
    });
    expect(response.status).toBe(200);
    const reader = response.body!.getReader();
    let received = '';
    while ((received.match(/"content":"w\d+ "/g) ?? []).length < 3) {
      const { value, done } = await reader.read();
      if (done) break;
      received += Buffer.from(value).toString();
    }
    const heldBefore = (await walletInvariants(db, workspace.id)).reserved;
    expect(heldBefore).toBeGreaterThan(0);

    victim.server.kill();
    await victim.server.exited;
    // The client sees its stream cut.
    const ended = await reader.read().then(
      async function drain(result): Promise<string> {
        return result.done ? 'ended' : reader.read().then(drain);
      },
      () => 'cut',
    );
    expect(['cut', 'ended']).toContain(ended);
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });

    // The survivor goes on serving meanwhile (its own lease) ...
    expect((await chat(survivor.baseUrl, workspace)).status).toBe(200);
    // ... and its sweeper (every 30 s) gives back what the dead one held once that expired (HOLD_TTL_MS, 10 s).
    const sweptAt = Date.now();
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 50_000)).toBe(true);
    console.log(`SIGKILL mid-stream: ${heldBefore} millicents held, given back by the other replica's sweeper after ${Date.now() - sweptAt} ms`);
    await expectBooksBalanced(workspace, INITIAL);
    // The cut stream was not charged (nothing settled it), the others once each.
    const [{ records }] = await db.query(`SELECT count(*)::int AS records FROM usage_records WHERE workspace_id = $1 AND status = 'success'`, [workspace.id]);
    expect(records).toBe(11);
  }, 90_000);
});
