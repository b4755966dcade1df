import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import OpenAI from 'openai';
import { Client } from 'pg';
import type { DataSource } from 'typeorm';
import { EMBEDDED_DATABASE_NAME } from '../src/database/database';
import { freePort } from '../src/database/embedded-postgres';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { killQuietly, processEnv, readPostmasterPid, sleep, waitUntil } from './support/processes';
import { walletInvariants } from './support/wallet-invariants';

/**
 * Stopping `npm start` as operators do, with a slow stream in flight (issue 30, item 1): a
 * signal to the whole process group (systemd, `kill -TERM -<pgid>`, Ctrl-C), SIGTERM sent
 * twice to node, a closed terminal's SIGHUP. npm forwards SIGINT and SIGTERM, so node gets
 * them twice. Each time the stream ends whole with [DONE], is charged once with a usage
 * record, nothing stays reserved, and the embedded PostgreSQL (its own process group) runs
 * until the service has settled, then stops with it. Each case runs several times: the
 * failures it guards against were races (a second signal's default action, a database
 * stopped under the drain).
 */
jest.setTimeout(60_000);

const REPO = path.resolve(__dirname, '..');
const RUNS = 3;
/** The upstream's stream: 40 words, one every 50 ms (about 2 s). */
const WORDS = Array.from({ length: 40 }, (_, i) => `word${i} `);
const USAGE = { prompt_tokens: 20, completion_tokens: 40 };
const DEMO_CREDIT = 1_000_000;

interface Case {
  name: string;
  /** Sends the signal(s) to the running service. */
  send(service: Service): Promise<void>;
  /** Whether npm outlives the signal (it forwards SIGINT and SIGTERM; SIGHUP kills it). */
  npmSurvives: boolean;
  /** `npm start` typed in a terminal (a pty of `script`), whose closing is the signal, with these logs. */
  terminal?: (run: number) => 'json' | 'pretty';
}

const CASES: Case[] = [
  { name: 'SIGTERM to the process group', npmSurvives: true, send: async (service) => killQuietly(-service.npm.pid!, 'SIGTERM') },
  { name: 'SIGINT to the process group', npmSurvives: true, send: async (service) => killQuietly(-service.npm.pid!, 'SIGINT') },
  {
    name: 'SIGTERM twice to node, 10 ms apart',
    npmSurvives: true,
    send: async (service) => {
      killQuietly(service.node, 'SIGTERM');
      await sleep(10);
      killQuietly(service.node, 'SIGTERM');
    },
  },
  { name: 'SIGHUP to the process group', npmSurvives: false, send: async (service) => killQuietly(-service.npm.pid!, 'SIGHUP') },
  {
    // The kernel hangs up the terminal's session (SIGHUP), and every later log line fails (EIO).
    name: 'its terminal closed',
    npmSurvives: false,
    terminal: (run) => (run % 2 === 0 ? 'json' : 'pretty'),
    send: async (service) => killQuietly(service.npm.pid!, 'SIGKILL'),
  },
];

/** How a case's service is started. */
interface Launch {
  terminal: boolean;
  logFormat: 'json' | 'pretty';
}
const PLAN = Array.from({ length: RUNS }, (_, i) => CASES.map((signalCase) => ({ signalCase, run: i + 1 }))).flat();
function launchOf(step: (typeof PLAN)[number] | undefined): Launch {
  const logFormat = step?.signalCase.terminal?.(step.run);
  return { terminal: logFormat !== undefined, logFormat: logFormat ?? 'pretty' };
}

/** True while `pid` runs (Linux); a zombie (exited, not yet reaped) does not. */
function runs(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

/** The pids whose parent is `pid` (from /proc). */
function childrenOf(pid: number): number[] {
  const children: number[] = [];
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8');
      if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid) children.push(Number(entry));
    } catch {
      // gone meanwhile
    }
  }
  return children;
}

/** The service's node process among the descendants of `pid` (npm's child, the shell having exec'd node). */
function serviceUnder(pid: number): number | undefined {
  for (const child of childrenOf(pid)) {
    if (/node\0dist\/src\/main\.js/.test(readFileSync(`/proc/${child}/cmdline`, 'utf8'))) return child;
    const below = serviceUnder(child);
    if (below) return below;
  }
  return undefined;
}

/** `npm run -s start:prod` (its shell replaced by node), in a process group of its own (or in a terminal), and its parts. */
interface Service {
  /** npm, or `script` running npm in its terminal. */
  npm: ChildProcess;
  launch: Launch;
  npmExit: Promise<number | string | null>;
  /** The service's own process (npm's child, the shell having exec'd node). */
  node: number;
  postmaster: number;
  output: () => string;
}

describe('signals to `npm start` with a stream in flight', () => {
  let upstream: FakeOpenAi;
  let base: string;
  let dataDir: string;
  let port: number;
  let apiKey: string;
  let service: Service | undefined;
  const measured: string[] = [];

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    base = await mkdtemp(path.join(tmpdir(), 'acs-signals-'));
    // The server runs as the unprivileged `postgres` user when tests run as root.
    await chmod(base, 0o755);
    dataDir = path.join(base, 'data');
    port = await freePort();
  });
  afterAll(async () => {
    if (service) {
      killQuietly(service.node, 'SIGTERM');
      await waitUntil(() => !runs(service!.node) && !runs(service!.postmaster), 30_000);
      killQuietly(-service.npm.pid!, 'SIGKILL');
      killQuietly(service.postmaster, 'SIGQUIT');
    }
    await upstream?.close();
    if (base) await rm(base, { recursive: true, force: true });
    process.stdout.write(`\nSignal runs:\n${measured.join('\n')}\n`);
  });

  /** A case that failed leaves its service in any state: stopped for good, so that the next case starts a fresh one. */
  let passed = true;
  afterEach(async () => {
    if (passed || !service) return;
    const { npm, node, postmaster } = service;
    service = undefined;
    for (const pid of [-npm.pid!, node]) killQuietly(pid, 'SIGKILL');
    killQuietly(postmaster, 'SIGQUIT');
    await waitUntil(() => !runs(node) && !runs(postmaster), 10_000);
  });

  const baseUrl = () => `http://127.0.0.1:${port}`;

  async function start(launch: Launch): Promise<Service> {
    const env = {
      PORT: String(port),
      HOST: '127.0.0.1',
      DATA_DIR: dataDir,
      SESSION_SECRET: 'signals-test-secret-0123456789abcdef',
      OPENAI_API_KEY: 'sk-upstream',
      OPENAI_BASE_URL: upstream.url,
      SHUTDOWN_DRAIN_MS: '30000',
      LOG_LEVEL: 'log',
      LOG_FORMAT: launch.logFormat,
    };
    const options: SpawnOptions = { cwd: REPO, env: processEnv(env), stdio: ['ignore', 'pipe', 'pipe'], detached: true };
    const npm = launch.terminal ? spawn('script', ['-qfc', 'npm run -s start:prod', '/dev/null'], options) : spawn('npm', ['run', '-s', 'start:prod'], options);
    let output = '';
    npm.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    npm.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const npmExit = new Promise<number | string | null>((resolve) => npm.on('exit', (code, signal) => resolve(code ?? signal)));
    const up = await waitUntil(() => fetch(`${baseUrl()}/health`).then((res) => res.ok, () => false), 45_000);
    if (!up) {
      killQuietly(-npm.pid!, 'SIGKILL');
      throw new Error(`The service did not start:\n${output}`);
    }
    const node = serviceUnder(npm.pid!);
    expect(node).toBeDefined();
    const postmaster = (await readPostmasterPid(path.join(dataDir, 'postgres')))!.pid;
    if (!apiKey) {
      // The first start prints the demo workspace's key ($10.00 of credit) once it listens.
      expect(await waitUntil(() => / {3}sk-/.test(output), 30_000)).toBe(true);
      apiKey = output.match(/^ {3}(sk-[A-Za-z0-9_-]+)\r?$/m)![1];
    }
    return { npm, launch, npmExit, node: node!, postmaster, output: () => output };
  }

  /** The embedded database of the running service, for the ledger's invariants. */
  async function database(): Promise<{ client: Client; db: DataSource }> {
    const running = (await readPostmasterPid(path.join(dataDir, 'postgres')))!;
    const password = (await readFile(path.join(dataDir, 'embedded-postgres.password'), 'utf8')).trim();
    const client = new Client({ host: '127.0.0.1', port: running.port, user: 'postgres', password, database: EMBEDDED_DATABASE_NAME });
    await client.connect();
    const db = { query: async (sql: string, params?: unknown[]) => (await client.query(sql, params)).rows } as unknown as DataSource;
    return { client, db };
  }

  PLAN.forEach(({ signalCase, run }, step) => {
    it(`${signalCase.name} (run ${run} of ${RUNS}): the stream ends whole, charged once; nothing held; PostgreSQL stops after the service`, async () => {
      passed = false;
      if (service && service.launch.terminal !== launchOf(PLAN[step]).terminal) throw new Error('The previous case started the wrong kind of service');
      service ??= await start(launchOf(PLAN[step]));
      const current = service;

      // The stream in flight, through the official SDK; what reaches the client is kept as it came.
      upstream.script({ kind: 'text', text: WORDS.join(''), chunkDelayMs: 50, usage: USAGE });
      let raw = '';
      const decoder = new TextDecoder();
      const tapped: typeof fetch = async (input, init) => {
        const response = await fetch(input, init);
        const tap = new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, controller) {
            raw += decoder.decode(chunk, { stream: true });
            controller.enqueue(chunk);
          },
        });
        return new Response(response.body!.pipeThrough(tap), { status: response.status, statusText: response.statusText, headers: response.headers });
      };
      const client = new OpenAI({ baseURL: `${baseUrl()}/v1`, apiKey, maxRetries: 0, timeout: 30_000, fetch: tapped });
      const { data: stream, response } = await client.chat.completions
        .create({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'Count slowly.' }] })
        .withResponse();
      const requestId = response.headers.get('x-request-id')!;
      let content = '';
      let chunks = 0;
      let signalledAt = 0;
      let postmasterAtEnd = false;
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta.content ?? '';
        if (++chunks === 5) {
          signalledAt = Date.now();
          await signalCase.send(current);
        }
      }
      const streamEndedAt = Date.now();
      // While the service drains, its database still runs: the settlement has somewhere to go.
      postmasterAtEnd = runs(current.postmaster);
      expect(signalledAt).toBeGreaterThan(0);
      expect(content).toBe(WORDS.join(''));
      expect(raw.trimEnd().endsWith('data: [DONE]')).toBe(true);
      expect(raw).not.toMatch(/"error"/);
      expect(postmasterAtEnd).toBe(true);

      // The service exits; its database stops with it, not before the service is done with it.
      let postmasterGoneAt = 0;
      const exited = await waitUntil(() => {
        if (!postmasterGoneAt && !runs(current.postmaster)) postmasterGoneAt = Date.now();
        return !runs(current.node);
      }, 40_000);
      const nodeGoneAt = Date.now();
      expect(exited).toBe(true);
      expect(runs(current.postmaster)).toBe(false);
      expect(await readPostmasterPid(path.join(dataDir, 'postgres'))).toBeNull();
      const npmExit = await current.npmExit;
      if (signalCase.npmSurvives) expect(npmExit).toBe(0);
      // A closed terminal shows nothing more (its logs are dropped).
      if (!current.launch.terminal) {
        expect(current.output()).toMatch(/received: not ready any more/);
        expect(current.output()).toMatch(/Drained: 1 request\(s\) were in flight, 0 open at the deadline/);
        expect(current.output()).not.toMatch(/forcing the stop/);
      }
      service = undefined;
      measured.push(
        `${signalCase.name}, run ${run}: stream ended ${streamEndedAt - signalledAt} ms after the signal, ` +
          `PostgreSQL gone ${postmasterGoneAt - signalledAt} ms, node ${nodeGoneAt - signalledAt} ms after it (npm: ${npmExit})`,
      );

      // Started again on the same data: before anything runs, nothing is reserved (the stop gave the lease back).
      service = await start(launchOf(PLAN[step + 1]));
      const { client: sql, db } = await database();
      try {
        const workspaceId = (await db.query(`SELECT workspace_id FROM usage_records WHERE request_id = $1`, [requestId]))[0]?.workspace_id as string;
        expect(workspaceId).toBeDefined();
        const state = await walletInvariants(db, workspaceId);
        const records: { request_id: string; status: string; error_code: string | null; output_tokens: number }[] = (
          (await (await fetch(`${baseUrl()}/v1/usage/recent?limit=100`, { headers: { Authorization: `Bearer ${apiKey}` } })).json()) as {
            data: { request_id: string; status: string; error_code: string | null; output_tokens: number }[];
          }
        ).data;
        const mine = records.filter((record) => record.request_id === requestId);
        expect(mine).toEqual([expect.objectContaining({ status: 'success', error_code: null })]);
        expect(mine[0].output_tokens).toBeGreaterThanOrEqual(WORDS.length);
        // Charged once: the ledger is the balance, and the balance is the credit less what the records charged.
        const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::bigint AS charged FROM usage_records WHERE workspace_id = $1`, [
          workspaceId,
        ]);
        const [{ own }] = await db.query(`SELECT charged_millicents::bigint AS own FROM usage_records WHERE request_id = $1`, [requestId]);
        expect(Number(own)).toBeGreaterThan(0);
        expect(state).toEqual({ balance: DEMO_CREDIT - Number(charged), reserved: 0, ledger: DEMO_CREDIT - Number(charged), holds: 0 });
        const wallet = (await (await fetch(`${baseUrl()}/v1/wallet`, { headers: { Authorization: `Bearer ${apiKey}` } })).json()) as { reservedMillicents: number };
        expect(wallet.reservedMillicents).toBe(0);
      } finally {
        await sql.end();
      }
      passed = true;
    });
  });

  it('a signal 2 s or more after the first forces the stop: the stream ends at once, charged for what it delivered', async () => {
    passed = false;
    service ??= await start(launchOf(undefined));
    const current = service;
    // 100 words over 5 s: still streaming when the second signal comes.
    const words = Array.from({ length: 100 }, (_, i) => `word${i} `);
    upstream.script({ kind: 'text', text: words.join(''), chunkDelayMs: 50, usage: USAGE });
    const client = new OpenAI({ baseURL: `${baseUrl()}/v1`, apiKey, maxRetries: 0, timeout: 30_000 });
    const { data: stream, response } = await client.chat.completions
      .create({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'Count slowly.' }] })
      .withResponse();
    const requestId = response.headers.get('x-request-id')!;
    let content = '';
    let chunks = 0;
    let firstAt = 0;
    let secondAt = 0;
    let error: unknown;
    try {
      for await (const chunk of stream) {
        content += chunk.choices[0]?.delta.content ?? '';
        if (++chunks === 5) {
          firstAt = Date.now();
          killQuietly(current.node, 'SIGTERM');
        } else if (firstAt && !secondAt && Date.now() - firstAt >= 2_500) {
          secondAt = Date.now();
          killQuietly(current.node, 'SIGTERM');
        }
      }
    } catch (caught) {
      error = caught;
    }
    const endedAt = Date.now();
    expect(secondAt).toBeGreaterThan(0);
    // Ended in-band by the service (the SDK raises the error event), before the upstream's end.
    expect(error).toBeInstanceOf(OpenAI.APIError);
    expect(String(error)).toMatch(/shutting down/);
    expect(content.length).toBeGreaterThan(0);
    expect(content.length).toBeLessThan(words.join('').length);
    expect(await waitUntil(() => !runs(current.node), 30_000)).toBe(true);
    expect(runs(current.postmaster)).toBe(false);
    expect(current.output()).toMatch(/SIGTERM received again: forcing the stop/);
    expect(current.output()).toMatch(/Drained: 1 request\(s\) were in flight, 1 open at the deadline/);
    service = undefined;
    measured.push(`forced by a second SIGTERM 2.5 s after the first: the stream ended ${endedAt - secondAt} ms after it`);

    service = await start(launchOf(undefined));
    const { client: sql, db } = await database();
    try {
      const [record] = await db.query(`SELECT status, error_code, charged_millicents::bigint AS charged, workspace_id FROM usage_records WHERE request_id = $1`, [requestId]);
      expect(record).toMatchObject({ status: 'error', error_code: 'server_shutting_down' });
      expect(Number(record.charged)).toBeGreaterThan(0);
      const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::bigint AS charged FROM usage_records WHERE workspace_id = $1`, [
        record.workspace_id,
      ]);
      expect(await walletInvariants(db, record.workspace_id as string)).toEqual({
        balance: DEMO_CREDIT - Number(charged),
        reserved: 0,
        ledger: DEMO_CREDIT - Number(charged),
        holds: 0,
      });
    } finally {
      await sql.end();
    }
    passed = true;
  });
});
