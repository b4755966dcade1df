/**
 * Soak: mixed traffic at a steady rate through two replicas behind HAProxy for a long time
 * (10 minutes by default), reporting each replica's resident memory and the latency
 * percentiles minute by minute, and a verdict on whether memory grows without bound
 * (issue 13). See bench/README.md.
 *
 *   npm run bench:soak                         # 10 minutes, 20 requests/s
 *   npm run bench:soak -- --minutes 1 --rate 10
 *
 * Every server is its own process on 127.0.0.1: the harness's embedded PostgreSQL, a
 * redis-server, two service processes as production runs them (`node dist/src/main.js`,
 * NODE_ENV=production, the built-in simulator for every model, so no upstream is needed
 * and the accounting is real), and HAProxy (test/support/load-balancer.ts, the same
 * configuration as the replicas test) in front of them. Without haproxy or redis-server on
 * the machine the run says so and stops.
 *
 * The mix, sent at a fixed rate (open loop: a slow answer does not slow the sending):
 * - plain: a chat completion;
 * - streamed: the same with `stream: true`, read to its end;
 * - tool loop: an assistant with `file_search` over one document, asked to use it (the
 *   simulator calls the server tool, then answers: two model calls in one request);
 * - conversation: the next turn of one of 20 stored conversations, which grow all along.
 *
 * Exit code: 0 when memory is judged stable, 2 when it grows (printed), 1 on an error.
 * A run shorter than 4 minutes reports its numbers without a verdict (exit 0).
 */
import 'reflect-metadata';
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { accessSync, constants } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { Client } from 'pg';
import { findHaproxy, startLoadBalancer } from '../test/support/load-balancer';
import { freePort, memoryOf, runNode, type ServerProcess, startNode, waitUntilServing } from './chat-processes';
import { type BenchContext, numberOption, runBench, summarize, table, writeResults } from './harness';

const option = (name: string, fallback: number): number => numberOption(name, `SOAK_${name.toUpperCase()}`, fallback);

const SETTINGS = {
  minutes: option('minutes', 10),
  /** Requests per second, all kinds together. */
  rate: option('rate', 20),
  /** Share of each kind in the mix. */
  mix: { plain: 0.4, streamed: 0.3, toolLoop: 0.15, conversation: 0.15 },
  conversations: 20,
  /** A request still unanswered after this counts as an error. */
  timeoutMs: 30_000,
  /** More requests in flight than this: the next ones are skipped and counted (the service is not keeping up). */
  maxInFlight: 500,
  balanceMillicents: 1_000_000_000_000,
  customRateLimitRpm: 100_000_000,
  /** The minutes before this are warm-up (JIT, pools, caches): growth is judged from here on. */
  judgeFromMinute: 2,
  /** Judged stable when RSS grows less than this per minute from the warm-up on (least squares)... */
  maxGrowthMbPerMinute: 2,
  /** ...and the last minute's RSS is within this factor of the first judged minute's. */
  maxGrowthFactor: 1.25,
} as const;

type Kind = keyof typeof SETTINGS.mix;
const KINDS = Object.keys(SETTINGS.mix) as Kind[];

interface Sample {
  kind: Kind;
  ms: number;
  ok: boolean;
  minute: number;
}

const round1 = (v: number) => Math.round(v * 10) / 10;

async function main({ databaseUrl, log, onCleanup, startLoad }: BenchContext): Promise<number> {
  if (!findHaproxy() || !findRedisServer()) {
    log('The soak needs haproxy and redis-server on this machine (`apt-get install -y haproxy redis-server`, or .ci/run).');
    return 1;
  }
  const dist = path.join(__dirname, '..');
  const cliJs = path.join(dist, 'src', 'cli.js');
  const mainJs = path.join(dist, 'src', 'main.js');
  log(`Soak: ${SETTINGS.minutes} min at ${SETTINGS.rate} req/s (${JSON.stringify(SETTINGS.mix)}); 1-min load average at start ${startLoad[0]} on ${os.cpus().length} CPUs`);

  const redis = await startRedis();
  onCleanup(() => redis.stop());
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'acs-bench-soak-data-'));
  onCleanup(() => rm(dataDir, { recursive: true, force: true }));
  const serviceEnv = {
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    DATA_DIR: dataDir,
    REDIS_URL: redis.url,
    SESSION_SECRET: randomBytes(32).toString('base64url'),
    SIGNUP: 'closed',
    LLM_SIMULATOR: 'on',
    SIMULATOR_WORD_DELAY_MS: '5',
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
    HTTP_KEEP_ALIVE_TIMEOUT_MS: '65000',
  };

  // --- The workspace, its assistant and its document, as an operator makes them ---------
  const cli = async (...args: string[]) => JSON.parse(await runNode([cliJs, ...args], serviceEnv, 60_000)) as Record<string, unknown>;
  const created = await cli('workspace', 'create', '--name', 'Soak', '--tier', 'enterprise', '--balance', String(SETTINGS.balanceMillicents));
  const workspaceId = created.workspace_id as string;
  const apiKey = created.api_key as string;
  await cli('workspace', 'set-tier', '--workspace', workspaceId, '--tier', 'enterprise', '--rpm', String(SETTINGS.customRateLimitRpm));
  const assistant = await cli(
    'assistant', 'create', '--workspace', workspaceId, '--name', 'Support', '--slug', 'support', '--model', 'gpt-4o-mini', '--tools', 'file_search',
    '--max-tokens', '64',
  );
  const guide = path.join(dataDir, 'refund-policy.md');
  await writeFile(guide, '# Refund policy\n\nRefunds are granted within 30 days of purchase. Contact support with the order number.\n');
  await cli('document', 'add', '--assistant', assistant.id as string, '--file', guide);

  // --- Two replicas behind HAProxy ------------------------------------------------------
  const replicas: ServerProcess[] = [];
  const ports: number[] = [];
  for (const name of ['replica A', 'replica B']) {
    const port = await freePort();
    const server = startNode(name, [mainJs], { ...serviceEnv, PORT: String(port) });
    onCleanup(() => server.stop(40_000));
    replicas.push(server);
    ports.push(port);
  }
  await Promise.all(replicas.map((server, i) => waitUntilServing(server, `http://127.0.0.1:${ports[i]}/health/ready`, 90_000)));
  const balancer = await startLoadBalancer(ports.map((port) => `127.0.0.1:${port}`));
  onCleanup(() => balancer.stop());
  await balancer.waitUntilAllUp(15_000);
  log(`Replicas on ${ports.join(', ')} (pids ${replicas.map((r) => r.pid).join(', ')}), HAProxy on ${balancer.url}`);

  const headers = { authorization: `Bearer ${apiKey}`, 'content-type': 'application/json' };
  const post = async (urlPath: string, body: unknown): Promise<Response> =>
    fetch(`${balancer.url}${urlPath}`, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(SETTINGS.timeoutMs) });
  const conversationIds: string[] = [];
  for (let i = 0; i < SETTINGS.conversations; i++) {
    conversationIds.push(((await (await post('/v1/conversations', { title: `soak ${i}` })).json()) as { id: string }).id);
  }

  let turn = 0;
  const requests: Record<Kind, () => Promise<boolean>> = {
    plain: async () => {
      const response = await post('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 32 });
      await response.arrayBuffer();
      return response.ok;
    },
    streamed: async () => {
      const response = await post('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Tell me a short story' }], max_tokens: 32, stream: true });
      const text = await response.text();
      return response.ok && text.trimEnd().endsWith('data: [DONE]') && !text.includes('"error"');
    },
    toolLoop: async () => {
      const response = await post('/v1/chat/completions', { model: 'assistant/support', messages: [{ role: 'user', content: 'Use file_search: what is the refund policy?' }] });
      const body = (await response.json()) as { x_service?: { iterations?: number } };
      return response.ok && (body.x_service?.iterations ?? 0) >= 2;
    },
    conversation: async () => {
      const id = conversationIds[turn++ % conversationIds.length];
      const response = await post('/v1/chat/completions', { model: 'gpt-4o-mini', messages: [{ role: 'user', content: `Turn ${turn}: go on` }], max_tokens: 32, conversation_id: id });
      await response.arrayBuffer();
      return response.ok;
    },
  };

  // --- The run: a fixed rate, a sample per request, memory per minute -------------------
  const samples: Sample[] = [];
  let inFlight = 0;
  let skipped = 0;
  const startedAt = Date.now();
  const endAt = startedAt + SETTINGS.minutes * 60_000;
  const pending = new Set<Promise<void>>();
  const memory: { minute: number; rssMb: number[] }[] = [];
  const minuteRows: unknown[][] = [];
  let nextMinute = 1;
  const pick = (() => {
    // A fixed, interleaved sequence of kinds in the mix's proportions, so each minute gets the same mix.
    const sequence: Kind[] = [];
    for (const kind of KINDS) for (let i = 0; i < Math.round(SETTINGS.mix[kind] * 20); i++) sequence.push(kind);
    sequence.sort((a, b) => KINDS.indexOf(a) - KINDS.indexOf(b));
    const interleaved = Array.from({ length: sequence.length }, (_, i) => sequence[(i * 7) % sequence.length]);
    let index = 0;
    return () => interleaved[index++ % interleaved.length];
  })();

  const reportMinute = async (minute: number) => {
    const rssMb = await Promise.all(replicas.map(async (r) => (await memoryOf(r.pid))?.rssMb ?? NaN));
    memory.push({ minute, rssMb });
    const inMinute = samples.filter((s) => s.minute === minute);
    const all = summarize(inMinute.map((s) => s.ms));
    const perKind = KINDS.map((kind) => {
      const ofKind = inMinute.filter((s) => s.kind === kind);
      return ofKind.length ? Math.round(summarize(ofKind.map((s) => s.ms)).p99) : '-';
    });
    const row = [minute, inMinute.length, inMinute.filter((s) => !s.ok).length, Math.round(all.p50), Math.round(all.p99), ...perKind, ...rssMb.map(round1)];
    minuteRows.push(row);
    log(`minute ${minute}: ${inMinute.length} answered, ${inMinute.filter((s) => !s.ok).length} failed, p50 ${Math.round(all.p50)} ms, p99 ${Math.round(all.p99)} ms, RSS ${rssMb.map(round1).join(' / ')} MB`);
  };

  const intervalMs = 1000 / SETTINGS.rate;
  for (let sent = 0; ; sent++) {
    const due = startedAt + sent * intervalMs;
    if (due >= endAt) break;
    const wait = due - Date.now();
    if (wait > 0) await sleep(wait);
    while (Date.now() >= startedAt + nextMinute * 60_000) await reportMinute(nextMinute++);
    if (inFlight >= SETTINGS.maxInFlight) {
      skipped++;
      continue;
    }
    const kind = pick();
    const began = Date.now();
    inFlight++;
    const request = requests[kind]()
      .catch(() => false)
      .then((ok) => {
        const ended = Date.now();
        samples.push({ kind, ms: ended - began, ok, minute: Math.floor((began - startedAt) / 60_000) + 1 });
      })
      .finally(() => {
        inFlight--;
        pending.delete(request);
      });
    pending.add(request);
  }
  await Promise.all(pending);
  while (nextMinute <= Math.ceil(SETTINGS.minutes)) await reportMinute(nextMinute++);

  // --- The accounting the run left behind ----------------------------------------------
  const db = new Client({ connectionString: databaseUrl });
  await db.connect();
  onCleanup(() => db.end());
  let books: { balance: number; ledger: number; reserved: number; holds: number; records: number } | undefined;
  for (let waited = 0; waited < 15_000; waited += 500) {
    const { rows } = await db.query(
      `SELECT w.balance_millicents::bigint AS balance, w.reserved_millicents::bigint AS reserved,
              (SELECT coalesce(sum(amount_millicents), 0) FROM wallet_transactions t WHERE t.workspace_id = w.workspace_id)::bigint AS ledger,
              (SELECT count(*) FROM wallet_holds h WHERE h.workspace_id = w.workspace_id)::int AS holds,
              (SELECT count(*) FROM usage_records u WHERE u.workspace_id = w.workspace_id AND u.status = 'success')::int AS records
         FROM wallets w WHERE w.workspace_id = $1`,
      [workspaceId],
    );
    books = { balance: Number(rows[0].balance), ledger: Number(rows[0].ledger), reserved: Number(rows[0].reserved), holds: rows[0].holds, records: rows[0].records };
    if (books.reserved === 0 && books.holds === 0) break;
    await sleep(500);
  }
  const answered = samples.filter((s) => s.ok).length;
  const booksBalanced = books !== undefined && books.balance === books.ledger && books.reserved === 0 && books.holds === 0;

  // --- Verdict -----------------------------------------------------------------------
  const judged = memory.filter((m) => m.minute >= SETTINGS.judgeFromMinute);
  const perReplica = replicas.map((replica, i) => {
    const points = judged.map((m) => ({ x: m.minute, y: m.rssMb[i] }));
    const slope = points.length >= 2 ? leastSquaresSlope(points) : NaN;
    const factor = points.length >= 2 ? points[points.length - 1].y / points[0].y : NaN;
    return { name: replica.name, slopeMbPerMinute: Math.round(slope * 100) / 100, lastOverFirst: Math.round(factor * 100) / 100 };
  });
  const canJudge = SETTINGS.minutes >= 4 && judged.length >= 3;
  const stable = perReplica.every((r) => r.slopeMbPerMinute < SETTINGS.maxGrowthMbPerMinute && r.lastOverFirst < SETTINGS.maxGrowthFactor);

  log('');
  log(table(['minute', 'answered', 'failed', 'p50 ms', 'p99 ms', ...KINDS.map((k) => `p99 ${k}`), ...replicas.map((r) => `RSS ${r.name} MB`)], minuteRows));
  log('');
  const overall = summarize(samples.map((s) => s.ms));
  log(`${samples.length} requests (${answered} answered well, ${samples.length - answered} failed, ${skipped} skipped as ${SETTINGS.maxInFlight} were in flight); p50 ${Math.round(overall.p50)} ms, p99 ${Math.round(overall.p99)} ms`);
  log(
    `Accounting: balance ${books?.balance} = ledger ${books?.ledger}, reserved ${books?.reserved}, holds ${books?.holds}, ` +
      `${books?.records} usage records for ${answered} answers -> ${booksBalanced ? 'PASS' : 'FAIL'}`,
  );
  for (const r of perReplica) log(`RSS of ${r.name} from minute ${SETTINGS.judgeFromMinute}: ${r.slopeMbPerMinute} MB/min, last/first ${r.lastOverFirst}`);
  const verdict = !canJudge
    ? `no verdict: a run of ${SETTINGS.minutes} min is too short to judge growth (at least 4 minutes; 10 by default)`
    : stable
      ? `stable: every replica grows less than ${SETTINGS.maxGrowthMbPerMinute} MB/min and ends within x${SETTINGS.maxGrowthFactor} of minute ${SETTINGS.judgeFromMinute}`
      : `GROWING: a replica's RSS grows ${SETTINGS.maxGrowthMbPerMinute} MB/min or more, or ends above x${SETTINGS.maxGrowthFactor} of minute ${SETTINGS.judgeFromMinute}`;
  log(`Verdict: ${verdict}`);

  const file = await writeResults('soak', {
    settings: SETTINGS,
    startLoad,
    minutes: minuteRows,
    memory,
    perReplica,
    overall,
    failed: samples.length - answered,
    skipped,
    books,
    booksBalanced,
    verdict,
  });
  log(`Results in ${file}`);
  if (!booksBalanced || samples.length - answered > samples.length * 0.01) return 1;
  return canJudge && !stable ? 2 : 0;
}

/** Debian's redis-server on a free loopback port, persistence off (test/support/redis-server.ts is the jest-side twin). */
function findRedisServer(): string | null {
  for (const candidate of [process.env.REDIS_SERVER_BIN, '/usr/bin/redis-server']) {
    try {
      if (candidate) {
        accessSync(candidate, constants.X_OK);
        return candidate;
      }
    } catch {
      // not here
    }
  }
  return null;
}

async function startRedis(): Promise<{ url: string; stop: () => Promise<void> }> {
  const port = await freePort();
  const child = spawn(findRedisServer()!, ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', os.tmpdir()], {
    stdio: 'ignore',
  });
  const answers = () =>
    new Promise<boolean>((resolve) => {
      const socket = net.connect({ port, host: '127.0.0.1' }, () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
  for (let waited = 0; !(await answers()); waited += 50) {
    if (waited > 10_000) throw new Error(`redis-server did not listen on ${port}`);
    await sleep(50);
  }
  const exited = new Promise((resolve) => child.once('exit', resolve));
  return {
    url: `redis://127.0.0.1:${port}`,
    stop: async () => {
      child.kill('SIGTERM');
      await exited;
    },
  };
}

function leastSquaresSlope(points: { x: number; y: number }[]): number {
  const n = points.length;
  const meanX = points.reduce((s, p) => s + p.x, 0) / n;
  const meanY = points.reduce((s, p) => s + p.y, 0) / n;
  const num = points.reduce((s, p) => s + (p.x - meanX) * (p.y - meanY), 0);
  const den = points.reduce((s, p) => s + (p.x - meanX) ** 2, 0);
  return num / den;
}

runBench('soak', { hardTimeoutMs: (option('minutes', 10) + 5) * 60_000 }, main);
