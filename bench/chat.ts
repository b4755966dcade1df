/**
 * Throughput and added latency of the chat path, with full accounting, against Portkey's
 * open-source gateway as the peer (issue 11), and of the Anthropic Messages API on the same
 * core beside it (issue 41). See bench/README.md.
 *
 *   npm run bench:chat
 *
 * Every server is its own process on 127.0.0.1: a fake OpenAI-compatible upstream
 * (bench/chat-upstream.ts), Portkey's gateway in front of it, and the service as
 * production runs it (`node dist/src/main.js`, NODE_ENV=production) on the harness's
 * embedded PostgreSQL, configured with OPENAI_BASE_URL = the fake. The load generators run
 * on worker threads of this process (bench/chat-load.ts). After each measurement of the
 * service the database is checked: nothing left reserved, every wallet equal to the sum of
 * its ledger, one usage record per answered request.
 *
 * Exit code: 0 when every target is met, 2 when one is missed (printed), 1 on an error.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client } from 'pg';
import { type Check, readAccounting, settleAndCheck } from './accounting';
import { openLoop, type OpenLoopResult, saturate, type SaturatedRun, type SlowBurst, slowestBursts, type Target } from './chat-load';
import {
  cpuDuring,
  firstLine,
  freePort,
  mainThreadDuring,
  type MainThreadReport,
  memoryOf,
  postmasterPid,
  runNode,
  type ServerProcess,
  startNode,
  waitUntilServing,
} from './chat-processes';
import { type BenchContext, closeApp, runBench, summarize, table, writeResults } from './harness';

// ---------------------------------------------------------------------------------------
// Settings: one place, recorded in the JSON output.
// ---------------------------------------------------------------------------------------
const SETTINGS = {
  model: 'gpt-4o-mini',
  connections: 32,
  warmupSeconds: 3,
  durationSeconds: 10,
  openLoop: { ratePerSecond: 200, warmupSeconds: 2, durationSeconds: 10, timeoutMs: 30_000 },
  manyWorkspaces: 200,
  /** 10^12 millicents ($10,000,000) per workspace: the run never runs out. */
  balanceMillicents: 1_000_000_000_000,
  /** Counted on every request, never reached. */
  customRateLimitRpm: 100_000_000,
  /** After a measurement of the service: how long the wallets may take to settle. */
  settleGraceMs: 10_000,
  /** About 5 min when the service keeps up; an overloaded one makes the fixed-rate runs wait up to 30 s each for their answers. */
  hardTimeoutMs: 540_000,
} as const;

const TARGETS = {
  /** Service non-streaming req/s, at least this times Portkey's in the same run. */
  throughputVsPortkey: 1.5,
  addedP50Ms: 2,
  addedP99Ms: 10,
  /** The Anthropic Messages API's req/s, at least this times chat completions' in the same run (plain and streamed). */
  messagesVsChat: 0.9,
} as const;

/** The service's settings that this benchmark passes on from its own environment when set. */
const TUNABLES = ['SETTLEMENT_SYNCHRONOUS_COMMIT', 'WALLET_LEASE_IDLE_MS'] as const;

const CHAT = '/v1/chat/completions';
const MESSAGES = '/v1/messages';
/** The rows the targets are judged on. */
const PORTKEY_ROW = 'Portkey gateway 1.15 (no accounting)';
const PORTKEY_AGAIN_ROW = 'Portkey gateway 1.15, again';
const SERVICE_ROW = 'service, non-streaming';
const BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });
const STREAM_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16, stream: true });
/** The same request in the Anthropic Messages API's shape, as the Anthropic SDK sends it (translated onto the same upstream). */
const MESSAGES_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });
const MESSAGES_STREAM_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16, stream: true });
const SERVICE_STREAM_ROW = 'service, streaming';
const MESSAGES_ROW = 'service, /v1/messages non-streaming';
const MESSAGES_STREAM_ROW = 'service, /v1/messages streaming';

const round1 = (v: number) => Math.round(v * 10) / 10;
const round3 = (v: number) => Math.round(v * 1000) / 1000;


/** What PostgreSQL did in the background (checkpoints, autovacuum): it competes with a measurement for the same 2 CPUs and disk. */
interface BackgroundWork {
  checkpoints: number;
  checkpointWriteMs: number;
  checkpointSyncMs: number;
  autovacuums: number;
  autoanalyzes: number;
}

async function readBackgroundWork(db: Client): Promise<BackgroundWork> {
  const [checkpoints] = (
    await db.query(`SELECT num_timed + num_requested AS checkpoints, write_time, sync_time FROM pg_stat_checkpointer`)
  ).rows as { checkpoints: string; write_time: number; sync_time: number }[];
  const [tables] = (await db.query(`SELECT sum(autovacuum_count) AS vacuums, sum(autoanalyze_count) AS analyzes FROM pg_stat_user_tables`)).rows as {
    vacuums: string;
    analyzes: string;
  }[];
  return {
    checkpoints: Number(checkpoints.checkpoints),
    checkpointWriteMs: Number(checkpoints.write_time),
    checkpointSyncMs: Number(checkpoints.sync_time),
    autovacuums: Number(tables.vacuums),
    autoanalyzes: Number(tables.analyzes),
  };
}

function subtractBackgroundWork(after: BackgroundWork, before: BackgroundWork): BackgroundWork {
  return {
    checkpoints: after.checkpoints - before.checkpoints,
    checkpointWriteMs: after.checkpointWriteMs - before.checkpointWriteMs,
    checkpointSyncMs: after.checkpointSyncMs - before.checkpointSyncMs,
    autovacuums: after.autovacuums - before.autovacuums,
    autoanalyzes: after.autoanalyzes - before.autoanalyzes,
  };
}

function describeBackgroundWork(work: BackgroundWork): string {
  return (
    `${work.checkpoints} checkpoint(s) (writing ${Math.round(work.checkpointWriteMs)} ms, syncing ${Math.round(work.checkpointSyncMs)} ms), ` +
    `${work.autovacuums} autovacuum(s), ${work.autoanalyzes} autoanalyze(s)`
  );
}


// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------
interface Row {
  target: string;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
  /** Of the service processes measured, after the run: VmRSS / VmHWM. */
  rssMb?: number;
  peakRssMb?: number;
  run: SaturatedRun;
}

async function main({ databaseUrl, log, onCleanup, startedAt, startLoad }: BenchContext): Promise<number> {
  const dist = path.join(__dirname, '..'); // dist/
  const cliJs = path.join(dist, 'src', 'cli.js');
  const mainJs = path.join(dist, 'src', 'main.js');
  const portkeyJs = require.resolve('@portkey-ai/gateway/build/start-server.js');
  log(`1-min load average at start: ${startLoad[0]} on ${os.cpus().length} CPUs`);

  // BENCH_CPU_PROF=<dir>: every gateway process (Portkey's and the service's) writes a V8 CPU profile there when it
  // stops (open it in Chrome's DevTools); the two side by side say where each spends a request.
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(process.env.BENCH_CPU_PROF)}`] : [];
  log(`Node.js ${process.version} (every process of the run)`);
  const servers: ServerProcess[] = [];
  const start = (name: string, args: string[], env: Record<string, string>) => {
    const server = startNode(name, args, env);
    servers.push(server);
    onCleanup(() => server.stop());
    return server;
  };

  // --- The fake upstream: the floor ------------------------------------------------------
  const upstream = start('fake upstream', [path.join(__dirname, 'chat-upstream.js'), '0'], {});
  const upstreamPort = (JSON.parse(await firstLine(upstream, 10_000)) as { port: number }).port;
  const upstreamUrl = `http://127.0.0.1:${upstreamPort}`;
  await waitUntilServing(upstream, `${upstreamUrl}/v1/models`, 5_000);

  // --- Portkey's gateway in front of it: the peer --------------------------------------
  const portkeyPort = await freePort();
  const portkey = start('Portkey gateway', [...profile, '-r', path.join(__dirname, 'loopback-only.js'), portkeyJs, `--port=${portkeyPort}`, '--headless'], {
    NODE_ENV: 'production',
  });
  const portkeyUrl = `http://127.0.0.1:${portkeyPort}`;
  const portkeyHeaders = { authorization: 'Bearer bench', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstreamUrl}/v1` };
  await waitUntilServing(portkey, `${portkeyUrl}${CHAT}`, 30_000, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...portkeyHeaders },
    body: BODY,
  });
  log(`Fake upstream on ${upstreamUrl}, Portkey ${portkeyVersion()} on ${portkeyUrl} (answers 200 through the fake)`);

  // --- The workspaces ------------------------------------------------------------------
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'acs-bench-chat-data-'));
  onCleanup(() => rm(dataDir, { recursive: true, force: true }));
  const serviceEnv: Record<string, string> = {
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    DATA_DIR: dataDir,
    SESSION_SECRET: randomBytes(32).toString('base64url'),
    SIGNUP: 'closed',
    OPENAI_API_KEY: 'bench',
    OPENAI_BASE_URL: `${upstreamUrl}/v1`,
    LLM_SIMULATOR: 'off',
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
    // Settings of the money path to compare, passed on when set (e.g. SETTLEMENT_SYNCHRONOUS_COMMIT=on).
    ...Object.fromEntries(TUNABLES.filter((name) => process.env[name] !== undefined).map((name) => [name, process.env[name]!])),
  };
  // The one workspace as an operator makes it: with the CLI.
  const cli = async (...args: string[]) => JSON.parse(await runNode([cliJs, ...args], serviceEnv, 60_000)) as Record<string, unknown>;
  const created = await cli('workspace', 'create', '--name', 'Benchmark', '--tier', 'enterprise', '--balance', String(SETTINGS.balanceMillicents));
  const workspaceId = created.workspace_id as string;
  const apiKey = created.api_key as string;
  await cli('workspace', 'set-tier', '--workspace', workspaceId, '--tier', 'enterprise', '--rpm', String(SETTINGS.customRateLimitRpm));
  // The 200 of the many-workspaces run in-process (two CLI starts each would take minutes), through the same service.
  const many = await createWorkspaces(databaseUrl, SETTINGS.manyWorkspaces);
  log(`Workspaces: 1 by the CLI, ${many.length} in-process; enterprise, ${SETTINGS.customRateLimitRpm} rpm, ${SETTINGS.balanceMillicents} millicents each`);

  // --- The service, as production runs it --------------------------------------------
  const startService = async (name: string) => {
    const port = await freePort();
    // Its own metrics port: the fixed-rate measurements read the event loop's delays and the GC pauses from it.
    const metricsPort = await freePort();
    const server = start(name, [...profile, mainJs], { ...serviceEnv, PORT: String(port), METRICS_PORT: String(metricsPort) });
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitUntilServing(server, `${baseUrl}/health/ready`, 60_000);
    return { server, baseUrl, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics` };
  };
  const serviceA = await startService('service A');
  const serviceTarget = (baseUrl: string, key: string, body = BODY): Target => ({ baseUrl, path: CHAT, headers: { authorization: `Bearer ${key}` }, body });
  const messagesTarget = (baseUrl: string, key: string, body = MESSAGES_BODY): Target => ({
    baseUrl,
    path: MESSAGES,
    headers: { 'x-api-key': key, 'anthropic-version': '2023-06-01' },
    body,
  });
  await probeService(serviceA.baseUrl, apiKey);
  log(`Service on ${serviceA.baseUrl} (pid ${serviceA.server.pid}, NODE_ENV=production); a chat answer and a stream answer 200 (${Date.now() - startedAt} ms)`);

  const db = new Client({ connectionString: databaseUrl });
  await db.connect();
  onCleanup(() => db.end());

  const checks: Check[] = [];
  const rows: Row[] = [];
  const postmaster = await postmasterPid(Number(new URL(databaseUrl).port));
  /** Where the CPU went during a measured run: the gateway's processes (none for the floor), PostgreSQL, the fake, the load generator. */
  const cpuGroups = (gateway: number[]) => ({
    gateway: { pids: gateway },
    postgres: { pids: postmaster ? [postmaster] : [], tree: true },
    fake: { pids: [upstream.pid] },
    load: { pids: [process.pid] },
  });
  const saturated = async (label: string, targets: Target[], gateway: number[] = []): Promise<SaturatedRun> => {
    log(`${label}: ${SETTINGS.warmupSeconds} s warm-up, then ${SETTINGS.durationSeconds} s at ${SETTINGS.connections} connections`);
    const warm = await saturate(targets, SETTINGS.connections, SETTINGS.warmupSeconds);
    const { result: run, cpuPercent } = await cpuDuring(cpuGroups(gateway), () => saturate(targets, SETTINGS.connections, SETTINGS.durationSeconds));
    return { ...run, warmup: warm, cpuPercent };
  };
  const addRow = async (target: string, run: SaturatedRun, services: ServerProcess[] = []) => {
    const memory = await Promise.all(services.map((s) => memoryOf(s.pid)));
    const known = memory.filter((m) => m !== undefined);
    rows.push({
      target,
      reqPerSec: round1(run.reqPerSec),
      p50Ms: run.p50Ms,
      p99Ms: run.p99Ms,
      non2xx: run.non2xx,
      errors: run.errors,
      rssMb: known.length ? round1(known.reduce((s, m) => s + m.rssMb, 0)) : undefined,
      peakRssMb: known.length ? round1(known.reduce((s, m) => s + m.peakRssMb, 0)) : undefined,
      run,
    });
  };
  /** Measures the service and checks the accounting the measurement left behind. */
  const measureService = async <T>(label: string, workspaceIds: string[], measure: () => Promise<T>, counted: (r: T) => { answered2xx: number; sent: number }) => {
    const before = await readAccounting(db, workspaceIds);
    const backgroundBefore = await readBackgroundWork(db);
    const result = await measure();
    const background = subtractBackgroundWork(await readBackgroundWork(db), backgroundBefore);
    const check = await settleAndCheck(db, workspaceIds, label, before, counted(result), SETTINGS.settleGraceMs);
    checks.push(check);
    log(`  PostgreSQL's own work during "${label}": ${describeBackgroundWork(background)}`);
    log(
      `  accounting after "${label}": reserved ${check.reservedMillicents} ` +
        `(${check.nothingReserved ? 'PASS' : `FAIL: ${check.holds?.count ?? '?'} holds, the oldest ${check.holds?.oldestAgeSeconds ?? '?'} s old`}), ` +
        `ledger = balance in every wallet (${check.ledgerMatches ? 'PASS' : `FAIL: ${check.ledgerMismatches} wallets differ`}), ` +
        `usage records ${check.usageRecords} for ${check.answered2xx} 2xx answers of ${check.sent} sent (${check.usageMatches ? 'PASS' : 'FAIL'}) [${check.waitedMs} ms]`,
    );
    return result;
  };
  const cannonCounts = (r: SaturatedRun) => ({
    answered2xx: r.ok2xx + (r.warmup?.ok2xx ?? 0),
    sent: r.sent + (r.warmup?.sent ?? 0),
  });

  // 1-2. The floor and the peer, saturated.
  const floorTarget: Target = { baseUrl: upstreamUrl, path: CHAT, headers: { authorization: 'Bearer bench' }, body: BODY };
  await addRow('fake upstream alone (the floor)', await saturated('floor', [floorTarget]));
  const portkeyTarget: Target = { baseUrl: portkeyUrl, path: CHAT, headers: portkeyHeaders, body: BODY };
  await addRow(PORTKEY_ROW, await saturated('Portkey', [portkeyTarget], [portkey.pid]), [portkey]);

  // 3-4. The service, saturated; Portkey again right after the non-streaming run, so that the
  // service is compared with Portkey measured on both sides of it (this machine's speed drifts).
  const one = [workspaceId];
  await addRow(
    SERVICE_ROW,
    await measureService('service non-streaming', one, () => saturated('service non-streaming', [serviceTarget(serviceA.baseUrl, apiKey)], [serviceA.server.pid]), cannonCounts),
    [serviceA.server],
  );
  await addRow(PORTKEY_AGAIN_ROW, await saturated('Portkey, again', [portkeyTarget], [portkey.pid]), [portkey]);
  await addRow(
    SERVICE_STREAM_ROW,
    await measureService(
      'service streaming',
      one,
      () => saturated('service streaming', [serviceTarget(serviceA.baseUrl, apiKey, STREAM_BODY)], [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );
  // The Anthropic Messages API on the same core: the same requests, translated both ways.
  await addRow(
    MESSAGES_ROW,
    await measureService('messages non-streaming', one, () => saturated('messages non-streaming', [messagesTarget(serviceA.baseUrl, apiKey)], [serviceA.server.pid]), cannonCounts),
    [serviceA.server],
  );
  await addRow(
    MESSAGES_STREAM_ROW,
    await measureService(
      'messages streaming',
      one,
      () => saturated('messages streaming', [messagesTarget(serviceA.baseUrl, apiKey, MESSAGES_STREAM_BODY)], [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );

  // 5. Open loop at a fixed rate: the latency the service adds over the floor.
  const { ratePerSecond, warmupSeconds, durationSeconds, timeoutMs } = SETTINGS.openLoop;
  /** With `metricsUrl` (the service's), also what the service's main thread went through meanwhile. */
  const fixedRate = async (label: string, target: Target, metricsUrl?: string): Promise<OpenLoopResult & { mainThread?: MainThreadReport }> => {
    log(`${label}: open loop at ${ratePerSecond} req/s, ${warmupSeconds} s warm-up, ${durationSeconds} s measured`);
    const run = () => openLoop({ target, ratePerSecond, warmupSeconds, durationSeconds, timeoutMs });
    if (!metricsUrl) return run();
    const { result, mainThread } = await mainThreadDuring(metricsUrl, run);
    return { ...result, mainThread };
  };
  const openCounts = (r: OpenLoopResult) => ({ answered2xx: r.totalOk2xx, sent: r.sent });
  // The saturated runs wrote some 30,000 usage records and ledger rows each, on tables this small
  // that autovacuum then vacuumed and analyzed them during the fixed-rate measurements (in every
  // run, during the streaming one). Done here instead, between the measurements, so that each
  // measures the service rather than the aftermath of the one before; the line of PostgreSQL's
  // own work after each still says what ran during it.
  const vacuumStartedAt = Date.now();
  await db.query('VACUUM (ANALYZE)');
  log(`VACUUM (ANALYZE) after the saturated runs, before the fixed-rate ones: ${Date.now() - vacuumStartedAt} ms`);
  const floorFixed = await fixedRate('floor', floorTarget);
  const serviceFixed = await measureService(
    'service non-streaming, 200 req/s',
    one,
    () => fixedRate('service non-streaming', serviceTarget(serviceA.baseUrl, apiKey), serviceA.metricsUrl),
    openCounts,
  );
  const floorStreamFixed = await fixedRate('floor, streaming', { ...floorTarget, body: STREAM_BODY });
  const serviceStreamFixed = await measureService(
    'service streaming, 200 req/s',
    one,
    () => fixedRate('service streaming', serviceTarget(serviceA.baseUrl, apiKey, STREAM_BODY), serviceA.metricsUrl),
    openCounts,
  );
  const messagesFixed = await measureService(
    'messages non-streaming, 200 req/s',
    one,
    () => fixedRate('messages non-streaming', messagesTarget(serviceA.baseUrl, apiKey), serviceA.metricsUrl),
    openCounts,
  );
  const messagesStreamFixed = await measureService(
    'messages streaming, 200 req/s',
    one,
    () => fixedRate('messages streaming', messagesTarget(serviceA.baseUrl, apiKey, MESSAGES_STREAM_BODY), serviceA.metricsUrl),
    openCounts,
  );

  // 6. Many workspaces, one key each, in rotation.
  const manyIds = many.map((w) => w.workspaceId);
  await addRow(
    `service, ${many.length} workspaces in rotation`,
    await measureService(
      `service, ${many.length} workspaces`,
      manyIds,
      () => saturated(`${many.length} workspaces`, many.map((w) => serviceTarget(serviceA.baseUrl, w.apiKey)), [serviceA.server.pid]),
      cannonCounts,
    ),
    [serviceA.server],
  );

  // 7. Two replicas on the one PostgreSQL, the load split between them.
  const serviceB = await startService('service B');
  await probeService(serviceB.baseUrl, apiKey);
  const half = SETTINGS.connections / 2;
  const twoReplicas = await measureService(
    'two replicas',
    one,
    async () => {
      log(`two replicas: ${SETTINGS.warmupSeconds} s warm-up, then ${SETTINGS.durationSeconds} s, ${half} connections on each`);
      const both = () =>
        Promise.all([saturate([serviceTarget(serviceA.baseUrl, apiKey)], half, SETTINGS.durationSeconds), saturate([serviceTarget(serviceB.baseUrl, apiKey)], half, SETTINGS.durationSeconds)]);
      const warm = await Promise.all([saturate([serviceTarget(serviceA.baseUrl, apiKey)], half, SETTINGS.warmupSeconds), saturate([serviceTarget(serviceB.baseUrl, apiKey)], half, SETTINGS.warmupSeconds)]);
      const { result: run, cpuPercent } = await cpuDuring(cpuGroups([serviceA.server.pid, serviceB.server.pid]), both);
      return { warm, run, cpuPercent };
    },
    ({ warm, run }) => ({ answered2xx: [...warm, ...run].reduce((s, r) => s + r.ok2xx, 0), sent: [...warm, ...run].reduce((s, r) => s + r.sent, 0) }),
  );
  const [ra, rb] = twoReplicas.run;
  await addRow(
    'service, two replicas (sum)',
    {
      ...ra,
      reqPerSec: ra.reqPerSec + rb.reqPerSec,
      // The worse of the two: a merged histogram is not available from two autocannon runs.
      p50Ms: Math.max(ra.p50Ms, rb.p50Ms),
      p99Ms: Math.max(ra.p99Ms, rb.p99Ms),
      completed: ra.completed + rb.completed,
      sent: ra.sent + rb.sent,
      ok2xx: ra.ok2xx + rb.ok2xx,
      non2xx: ra.non2xx + rb.non2xx,
      errors: ra.errors + rb.errors,
      statusCodes: Object.fromEntries(
        [...new Set([...Object.keys(ra.statusCodes), ...Object.keys(rb.statusCodes)])].map((code) => [code, (ra.statusCodes[code] ?? 0) + (rb.statusCodes[code] ?? 0)]),
      ),
      warmup: undefined,
      cpuPercent: twoReplicas.cpuPercent,
    },
    [serviceA.server, serviceB.server],
  );

  // --- Report --------------------------------------------------------------------------
  const latency = (label: string, floor: OpenLoopResult, service: OpenLoopResult & { mainThread?: MainThreadReport }) => {
    const f = summarize(floor.latenciesNs);
    const s = summarize(service.latenciesNs);
    const ms = (ns: number) => round3(ns / 1e6);
    return {
      label,
      n: s.n,
      floorP50Ms: ms(f.p50),
      floorP99Ms: ms(f.p99),
      serviceP50Ms: ms(s.p50),
      serviceP99Ms: ms(s.p99),
      addedP50Ms: ms(s.p50 - f.p50),
      addedP99Ms: ms(s.p99 - f.p99),
      sendLagP99Ms: ms(Math.max(summarize(floor.sendLagNs).p99, summarize(service.sendLagNs).p99)),
      achievedReqPerSec: round1(service.ok2xx / Math.max(service.wallSeconds, durationSeconds)),
      non2xx: floor.non2xx + service.non2xx,
      errors: floor.errors + service.errors,
      statusCodes: { floor: floor.statusCodes, service: service.statusCodes },
      sampleBodies: { ...floor.sampleBodies, ...service.sampleBodies },
      errorCounts: service.errorCounts,
      slowest: slowestBursts(service),
      mainThread: service.mainThread,
    };
  };
  const added = [
    latency('non-streaming', floorFixed, serviceFixed),
    latency('streaming', floorStreamFixed, serviceStreamFixed),
    // Against the same floor: the upstream answers a translated message as it answers a chat completion.
    latency('/v1/messages non-streaming', floorFixed, messagesFixed),
    latency('/v1/messages streaming', floorStreamFixed, messagesStreamFixed),
  ];

  log('');
  log(`Chat completions, ${SETTINGS.model}, max_tokens 16, against the fake upstream; 1-min load at start ${startLoad[0]}, now ${round1(os.loadavg()[0])}`);
  const tuned = TUNABLES.filter((name) => serviceEnv[name] !== undefined);
  if (tuned.length > 0) log(`Service settings: ${tuned.map((name) => `${name}=${serviceEnv[name]}`).join(', ')}`);
  log(`Saturated: ${SETTINGS.connections} connections, ${SETTINGS.durationSeconds} s (autocannon; req/s = 2xx answers / s; latencies in whole ms)`);
  log(
    table(
      ['target', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'RSS MB', 'peak RSS MB'],
      rows.map((r) => [r.target, r.reqPerSec, r.p50Ms, r.p99Ms, r.non2xx, r.errors, r.rssMb ?? '-', r.peakRssMb ?? '-']),
    ),
  );
  log('');
  log(`CPU during each saturated run, % of one core (${os.cpus().length} on this machine; a node process passes 100% with its GC and libuv threads)`);
  log(
    table(
      ['target', 'gateway', 'PostgreSQL', 'fake upstream', 'load generator', 'all'],
      rows.map(({ target, run: { cpuPercent: cpu } }) =>
        cpu
          ? [target, cpu.gateway ?? '-', cpu.postgres ?? '-', cpu.fake ?? '-', cpu.load ?? '-', (cpu.gateway ?? 0) + (cpu.postgres ?? 0) + (cpu.fake ?? 0) + (cpu.load ?? 0)]
          : [target, '-', '-', '-', '-', '-'],
      ),
    ),
  );
  log('');
  log(`Added latency at a fixed ${ratePerSecond} req/s (open loop, scheduled send to last byte, microsecond timing)`);
  log(
    table(
      ['path', 'n', 'floor p50', 'floor p99', 'service p50', 'service p99', 'added p50', 'added p99', 'served req/s', 'timer lag p99', 'non-2xx', 'errors'],
      added.map((a) => [a.label, a.n, a.floorP50Ms, a.floorP99Ms, a.serviceP50Ms, a.serviceP99Ms, a.addedP50Ms, a.addedP99Ms, a.achievedReqPerSec, a.sendLagP99Ms, a.non2xx, a.errors]),
    ),
  );
  log('(all in ms)');
  for (const a of added) log(`  ${a.label}: ${describeTail(a.slowest, a.mainThread)}`);
  for (const a of added) {
    for (const [status, body] of Object.entries(a.sampleBodies)) log(`  ${a.label}: ${a.statusCodes.service[status] ?? 0} answers ${status}, e.g. ${body}`);
    for (const [message, count] of Object.entries(a.errorCounts)) log(`  ${a.label}: ${count} requests failed: ${message}`);
  }
  log('');
  log('Accounting after each measurement of the service');
  log(
    table(
      ['measurement', '2xx', 'sent', 'usage records', 'reserved', 'ledger', 'usage', 'result'],
      checks.map((c) => [
        c.measurement,
        c.answered2xx,
        c.sent,
        `${c.usageRecords} ${JSON.stringify(c.usageByStatus)}`,
        c.reservedMillicents,
        c.ledgerMatches ? 'matches' : `${c.ledgerMismatches} differ`,
        c.usageMatches ? 'matches' : 'differs',
        c.pass ? 'PASS' : 'FAIL',
      ]),
    ),
  );

  // --- Targets -------------------------------------------------------------------------
  const row = (target: string) => rows.find((r) => r.target === target)!;
  const portkeyRuns = [row(PORTKEY_ROW).reqPerSec, row(PORTKEY_AGAIN_ROW).reqPerSec];
  const portkeyReqPerSec = round1((portkeyRuns[0] + portkeyRuns[1]) / 2);
  const serviceRow = row(SERVICE_ROW);
  const serviceRows = rows.filter((r) => r.target.startsWith('service'));
  const missed: string[] = [];
  const ratio = serviceRow.reqPerSec / portkeyReqPerSec;
  if (ratio < TARGETS.throughputVsPortkey) {
    missed.push(
      `service non-streaming ${serviceRow.reqPerSec} req/s is ${round3(ratio)}x Portkey's ${portkeyReqPerSec} (the mean of its runs before and after, ` +
        `${portkeyRuns.join(' and ')}; target >= ${TARGETS.throughputVsPortkey}x)`,
    );
  }
  for (const a of added) {
    if (a.addedP50Ms > TARGETS.addedP50Ms) missed.push(`added p50 latency at ${ratePerSecond} req/s, ${a.label}: ${a.addedP50Ms} ms (target <= ${TARGETS.addedP50Ms} ms)`);
    if (a.addedP99Ms > TARGETS.addedP99Ms) missed.push(`added p99 latency at ${ratePerSecond} req/s, ${a.label}: ${a.addedP99Ms} ms (target <= ${TARGETS.addedP99Ms} ms)`);
  }
  for (const [messagesRow, chatRow] of [
    [MESSAGES_ROW, SERVICE_ROW],
    [MESSAGES_STREAM_ROW, SERVICE_STREAM_ROW],
  ]) {
    const share = row(messagesRow).reqPerSec / row(chatRow).reqPerSec;
    if (share < TARGETS.messagesVsChat) {
      missed.push(`${messagesRow} ${row(messagesRow).reqPerSec} req/s is ${round3(share)}x ${chatRow}'s ${row(chatRow).reqPerSec} (target >= ${TARGETS.messagesVsChat}x)`);
    }
  }
  const fixedRuns = [serviceFixed, serviceStreamFixed, messagesFixed, messagesStreamFixed];
  const serviceNon2xx = serviceRows.reduce((s, r) => s + r.non2xx, 0) + fixedRuns.reduce((s, r) => s + r.non2xx, 0);
  const serviceErrors = serviceRows.reduce((s, r) => s + r.errors, 0) + fixedRuns.reduce((s, r) => s + r.errors, 0);
  if (serviceNon2xx > 0 || serviceErrors > 0) missed.push(`the service answered ${serviceNon2xx} non-2xx responses and ${serviceErrors} requests failed (target: none)`);
  for (const c of checks.filter((c) => !c.pass)) {
    missed.push(
      `accounting after "${c.measurement}": ${[
        c.nothingReserved
          ? ''
          : `${c.reservedMillicents} millicents still reserved` +
            (c.holds ? ` (${c.holds.count} rows in wallet_holds, the oldest ${c.holds.oldestAgeSeconds} s old)` : ''),
        c.ledgerMatches ? '' : `${c.ledgerMismatches} wallets differ from their ledger`,
        c.usageMatches ? '' : `${c.usageRecords} usage records for ${c.answered2xx} 2xx answers of ${c.sent} sent`,
      ]
        .filter(Boolean)
        .join('; ')}`,
    );
  }
  log('');
  log(
    `Service non-streaming / Portkey: ${round3(ratio)}x (target >= ${TARGETS.throughputVsPortkey}x), against the mean of Portkey's runs before and ` +
      `after it (${portkeyRuns.join(' and ')} req/s: ${portkeyRuns.map((r) => `${round3(serviceRow.reqPerSec / r)}x`).join(' and ')})`,
  );
  log(
    `/v1/messages / chat completions: ${round3(row(MESSAGES_ROW).reqPerSec / serviceRow.reqPerSec)}x non-streaming, ` +
      `${round3(row(MESSAGES_STREAM_ROW).reqPerSec / row(SERVICE_STREAM_ROW).reqPerSec)}x streaming (target >= ${TARGETS.messagesVsChat}x)`,
  );
  if (missed.length === 0) log('All targets MET');
  else for (const m of missed) log(`Target NOT MET: ${m}`);

  const results = {
    settings: SETTINGS,
    serviceSettings: Object.fromEntries(TUNABLES.map((name) => [name, serviceEnv[name] ?? 'default'])),
    targets: TARGETS,
    targetsMet: missed.length === 0,
    missed,
    saturated: rows,
    portkeyReqPerSec,
    serviceVsPortkey: round3(ratio),
    addedLatency: added,
    checks,
    portkeyVersion: portkeyVersion(),
    loadAverage: { start: startLoad, end: os.loadavg().map(round1) },
    wallSeconds: round1((Date.now() - startedAt) / 1000),
  };
  const file = await writeResults('chat', results);
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return missed.length === 0 ? 0 : 2;
}

/**
 * Where a fixed-rate measurement's tail came from: when its slowest requests were sent (one
 * burst is one stall) and what the service's main thread went through meanwhile.
 */
function describeTail(slowest: SlowBurst[], mainThread: MainThreadReport | undefined): string {
  const count = slowest.reduce((sum, b) => sum + b.count, 0);
  const bursts = slowest
    .slice(0, 5)
    .map((b) => `${b.atSeconds} s (${b.count}, ${b.minMs === b.maxMs ? b.maxMs : `${b.minMs}-${b.maxMs}`} ms)`)
    .join(', ');
  const sent = `the slowest ${count} sent in ${slowest.length} burst(s): ${bursts}${slowest.length > 5 ? ', ...' : ''}`;
  if (!mainThread) return `${sent}; the service's metrics could not be read`;
  const gc = Object.entries(mainThread.gc)
    .map(([kind, g]) => `${kind} ${g.count} (${g.totalMs} ms, ${g.over10Ms} over 10 ms)`)
    .join(', ');
  return `${sent}; the service's event loop late by up to ${mainThread.maxDelayMs} ms (p99 ${mainThread.p99DelayMs} ms); GC: ${gc || 'none'}`;
}

/** One plain and one streamed request of each API must answer 200 before anything is measured. */
async function probeService(baseUrl: string, apiKey: string): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
  for (const [route, body] of [
    [CHAT, BODY],
    [CHAT, STREAM_BODY],
    [MESSAGES, MESSAGES_BODY],
    [MESSAGES, MESSAGES_STREAM_BODY],
  ]) {
    const res = await fetch(`${baseUrl}${route}`, { method: 'POST', headers, body });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`The service answered ${res.status} to a request to ${route}: ${text.slice(0, 500)}`);
  }
  // The answers came from the settlement journal, before their commit: reading the wallet
  // waits for it, so that the probe's usage records are not counted in the next measurement.
  const wallet = await fetch(`${baseUrl}/v1/wallet`, { headers });
  if (wallet.status !== 200) throw new Error(`The service answered ${wallet.status} to GET /v1/wallet: ${(await wallet.text()).slice(0, 500)}`);
}

/**
 * The workspaces of the many-workspaces run, through WorkspacesService as the CLI does,
 * in one app started in this process and closed again before anything is measured.
 */
async function createWorkspaces(databaseUrl: string, count: number): Promise<{ workspaceId: string; apiKey: string }[]> {
  const { createApp } = await import('../src/app.factory');
  const { loadConfig } = await import('../src/config/app-config');
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');
  const app = await createApp(loadConfig({ LOG_LEVEL: 'error' }), databaseUrl, { logger: false });
  try {
    const workspaces = app.get(WorkspacesService);
    const created: { workspaceId: string; apiKey: string }[] = [];
    for (let i = 0; i < count; i += 1) {
      const w = await workspaces.create({ name: `Benchmark ${i + 1}`, tier: 'enterprise', balanceMillicents: SETTINGS.balanceMillicents });
      await workspaces.setTier(w.workspace.id, 'enterprise', SETTINGS.customRateLimitRpm);
      created.push({ workspaceId: w.workspace.id, apiKey: w.apiKey });
    }
    return created;
  } finally {
    await closeApp(app);
  }
}

function portkeyVersion(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('@portkey-ai/gateway/package.json') as { version: string }).version;
}

runBench('chat', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
