/**
 * What the gateway benchmarks (bench/chat.ts, bench/embeddings.ts) set up and measure alike:
 * the fake OpenAI-compatible upstream (bench/chat-upstream.ts) as the floor, Portkey's
 * open-source gateway in front of it as the peer, and the service as production runs it
 * (`node dist/src/main.js`, NODE_ENV=production, OPENAI_BASE_URL = the fake) on the
 * harness's embedded PostgreSQL, with one workspace made by the CLI. Then the measurements:
 * saturated (autocannon), at a fixed rate (open loop), and the accounting check after each
 * measurement of the service (nothing left reserved, every wallet equal to its ledger, one
 * usage record per answered request).
 */
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
import { type BenchContext, summarize } from './harness';

export const round1 = (v: number) => Math.round(v * 10) / 10;
export const round3 = (v: number) => Math.round(v * 1000) / 1000;

/** The service's settings that a gateway benchmark passes on from its own environment when set. */
export const TUNABLES = ['SETTLEMENT_SYNCHRONOUS_COMMIT', 'WALLET_LEASE_IDLE_MS'] as const;

export interface RigSettings {
  connections: number;
  warmupSeconds: number;
  durationSeconds: number;
  openLoop: { ratePerSecond: number; warmupSeconds: number; durationSeconds: number; timeoutMs: number };
  balanceMillicents: number;
  customRateLimitRpm: number;
  settleGraceMs: number;
}

export interface RigOptions {
  /** The benchmark's name, in its temporary directory's. */
  name: string;
  settings: RigSettings;
  /** A request Portkey must answer 200 (through the fake) before anything is measured. */
  portkeyProbe: { path: string; body: string };
  /** Scripts preloaded into Portkey's process besides bench/loopback-only.js (their names in dist/bench). */
  portkeyPreloads?: string[];
}

export type FixedRateRun = OpenLoopResult & { mainThread?: MainThreadReport };

export interface GatewayRig {
  upstream: ServerProcess;
  upstreamUrl: string;
  portkey: ServerProcess;
  portkeyUrl: string;
  /** Portkey's headers that route a request to the fake as an OpenAI upstream. */
  portkeyHeaders: Record<string, string>;
  serviceEnv: Record<string, string>;
  /** The one workspace, made by the CLI as an operator makes it. */
  workspaceId: string;
  apiKey: string;
  db: Client;
  /** The accounting checks so far, one per measurement of the service. */
  checks: Check[];
  startService(name: string): Promise<{ server: ServerProcess; baseUrl: string; metricsUrl: string }>;
  saturated(label: string, targets: Target[], gateway?: number[]): Promise<SaturatedRun>;
  /** With `metricsUrl` (the service's), also what the service's main thread went through meanwhile; at the settings' rate unless given. */
  fixedRate(label: string, target: Target, metricsUrl?: string, rate?: number): Promise<FixedRateRun>;
  /** Measures the service and checks the accounting the measurement left behind. */
  measureService<T>(label: string, workspaceIds: string[], measure: () => Promise<T>, counted: (r: T) => { answered2xx: number; sent: number }): Promise<T>;
  cannonCounts(r: SaturatedRun): { answered2xx: number; sent: number };
  /** Where the CPU went during a measured run: the gateway's processes (none for the floor), PostgreSQL, the fake, the load generator. */
  cpuGroups(gateway: number[]): Record<'gateway' | 'postgres' | 'fake' | 'load', { pids: number[]; tree?: boolean }>;
  openCounts(r: OpenLoopResult): { answered2xx: number; sent: number };
}

/** Starts the fake upstream, Portkey and the workspace; the service is started by the caller (`startService`), as many as it wants. */
export async function startGatewayRig({ databaseUrl, log, onCleanup }: BenchContext, { name, settings, portkeyProbe, portkeyPreloads = [] }: RigOptions): Promise<GatewayRig> {
  const dist = path.join(__dirname, '..'); // dist/
  const cliJs = path.join(dist, 'src', 'cli.js');
  const mainJs = path.join(dist, 'src', 'main.js');
  const portkeyJs = require.resolve('@portkey-ai/gateway/build/start-server.js');

  // BENCH_CPU_PROF=<dir>: every gateway process (Portkey's and the service's) writes a V8 CPU profile there when it
  // stops (open it in Chrome's DevTools); the two side by side say where each spends a request.
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(process.env.BENCH_CPU_PROF)}`] : [];
  log(`Node.js ${process.version} (every process of the run)`);
  const start = (processName: string, args: string[], env: Record<string, string>) => {
    const server = startNode(processName, args, env);
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
  const preloads = ['loopback-only.js', ...portkeyPreloads].flatMap((file) => ['-r', path.join(__dirname, file)]);
  const portkey = start('Portkey gateway', [...profile, ...preloads, portkeyJs, `--port=${portkeyPort}`, '--headless'], {
    NODE_ENV: 'production',
  });
  const portkeyUrl = `http://127.0.0.1:${portkeyPort}`;
  const portkeyHeaders = { authorization: 'Bearer bench', 'x-portkey-provider': 'openai', 'x-portkey-custom-host': `${upstreamUrl}/v1` };
  await waitUntilServing(portkey, `${portkeyUrl}${portkeyProbe.path}`, 30_000, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...portkeyHeaders },
    body: portkeyProbe.body,
  });
  log(`Fake upstream on ${upstreamUrl}, Portkey ${portkeyVersion()} on ${portkeyUrl} (answers 200 through the fake)`);

  // --- The workspace -------------------------------------------------------------------
  const dataDir = await mkdtemp(path.join(os.tmpdir(), `acs-bench-${name}-data-`));
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
    ...Object.fromEntries(TUNABLES.filter((tunable) => process.env[tunable] !== undefined).map((tunable) => [tunable, process.env[tunable]!])),
  };
  const cli = async (...args: string[]) => JSON.parse(await runNode([cliJs, ...args], serviceEnv, 60_000)) as Record<string, unknown>;
  const created = await cli('workspace', 'create', '--name', 'Benchmark', '--tier', 'enterprise', '--balance', String(settings.balanceMillicents));
  const workspaceId = created.workspace_id as string;
  const apiKey = created.api_key as string;
  await cli('workspace', 'set-tier', '--workspace', workspaceId, '--tier', 'enterprise', '--rpm', String(settings.customRateLimitRpm));

  const startService = async (serviceName: string) => {
    const port = await freePort();
    // Its own metrics port: the fixed-rate measurements read the event loop's delays and the GC pauses from it.
    const metricsPort = await freePort();
    const server = start(serviceName, [...profile, mainJs], { ...serviceEnv, PORT: String(port), METRICS_PORT: String(metricsPort) });
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitUntilServing(server, `${baseUrl}/health/ready`, 60_000);
    return { server, baseUrl, metricsUrl: `http://127.0.0.1:${metricsPort}/metrics` };
  };

  const db = new Client({ connectionString: databaseUrl });
  await db.connect();
  onCleanup(() => db.end());

  const checks: Check[] = [];
  const postmaster = await postmasterPid(Number(new URL(databaseUrl).port));
  /** Where the CPU went during a measured run: the gateway's processes (none for the floor), PostgreSQL, the fake, the load generator. */
  const cpuGroups = (gateway: number[]) => ({
    gateway: { pids: gateway },
    postgres: { pids: postmaster ? [postmaster] : [], tree: true },
    fake: { pids: [upstream.pid] },
    load: { pids: [process.pid] },
  });
  const saturated = async (label: string, targets: Target[], gateway: number[] = []): Promise<SaturatedRun> => {
    log(`${label}: ${settings.warmupSeconds} s warm-up, then ${settings.durationSeconds} s at ${settings.connections} connections`);
    const warm = await saturate(targets, settings.connections, settings.warmupSeconds);
    const { result: run, cpuPercent } = await cpuDuring(cpuGroups(gateway), () => saturate(targets, settings.connections, settings.durationSeconds));
    return { ...run, warmup: warm, cpuPercent };
  };
  const { ratePerSecond, warmupSeconds, durationSeconds, timeoutMs } = settings.openLoop;
  const fixedRate = async (label: string, target: Target, metricsUrl?: string, rate = ratePerSecond): Promise<FixedRateRun> => {
    log(`${label}: open loop at ${rate} req/s, ${warmupSeconds} s warm-up, ${durationSeconds} s measured`);
    const run = () => openLoop({ target, ratePerSecond: rate, warmupSeconds, durationSeconds, timeoutMs });
    if (!metricsUrl) return run();
    const { result, mainThread } = await mainThreadDuring(metricsUrl, run);
    return { ...result, mainThread };
  };
  const measureService = async <T>(label: string, workspaceIds: string[], measure: () => Promise<T>, counted: (r: T) => { answered2xx: number; sent: number }) => {
    const before = await readAccounting(db, workspaceIds);
    const backgroundBefore = await readBackgroundWork(db);
    const result = await measure();
    const background = subtractBackgroundWork(await readBackgroundWork(db), backgroundBefore);
    const check = await settleAndCheck(db, workspaceIds, label, before, counted(result), settings.settleGraceMs);
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
  return {
    upstream,
    upstreamUrl,
    portkey,
    portkeyUrl,
    portkeyHeaders,
    serviceEnv,
    workspaceId,
    apiKey,
    db,
    checks,
    startService,
    saturated,
    fixedRate,
    measureService,
    cpuGroups,
    cannonCounts: (r) => ({ answered2xx: r.ok2xx + (r.warmup?.ok2xx ?? 0), sent: r.sent + (r.warmup?.sent ?? 0) }),
    openCounts: (r) => ({ answered2xx: r.totalOk2xx, sent: r.sent }),
  };
}

/** One saturated run of a target, as the tables show it. */
export interface Row {
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

/** The row of a saturated run, with the memory of the gateway processes measured (none for the floor). */
export async function saturatedRow(target: string, run: SaturatedRun, services: ServerProcess[] = []): Promise<Row> {
  const memory = await Promise.all(services.map((s) => memoryOf(s.pid)));
  const known = memory.filter((m) => m !== undefined);
  return {
    target,
    reqPerSec: round1(run.reqPerSec),
    p50Ms: run.p50Ms,
    p99Ms: run.p99Ms,
    non2xx: run.non2xx,
    errors: run.errors,
    rssMb: known.length ? round1(known.reduce((s, m) => s + m.rssMb, 0)) : undefined,
    peakRssMb: known.length ? round1(known.reduce((s, m) => s + m.peakRssMb, 0)) : undefined,
    run,
  };
}

/** Every table of a gateway benchmark: saturated runs, their CPU, the added latencies (each list its own table, at its rate), the accounting. */
export function reportGatewayRun(
  log: (message: string) => void,
  run: { settings: Pick<RigSettings, 'connections' | 'durationSeconds'>; rows: Row[]; added: Array<{ rate: number | string; latencies: AddedLatency[] }>; checks: Check[] },
  table: (header: string[], rows: unknown[][]) => string,
): void {
  reportSaturated(log, run.settings, run.rows, table);
  log('');
  reportCpu(log, run.rows, table);
  for (const { rate, latencies } of run.added) {
    log('');
    reportAddedLatency(log, rate, latencies, table);
  }
  log('');
  reportChecks(log, run.checks, table);
}

/** The table of saturated runs. */
export function reportSaturated(log: (message: string) => void, settings: Pick<RigSettings, 'connections' | 'durationSeconds'>, rows: Row[], table: (header: string[], rows: unknown[][]) => string): void {
  log(`Saturated: ${settings.connections} connections, ${settings.durationSeconds} s (autocannon; req/s = 2xx answers / s; latencies in whole ms)`);
  log(
    table(
      ['target', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'RSS MB', 'peak RSS MB'],
      rows.map((r) => [r.target, r.reqPerSec, r.p50Ms, r.p99Ms, r.non2xx, r.errors, r.rssMb ?? '-', r.peakRssMb ?? '-']),
    ),
  );
}

/** The latency a fixed-rate run of the service added over the floor's, at the same rate. */
export function addedLatency(label: string, floor: OpenLoopResult, service: FixedRateRun, durationSeconds: number) {
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
}

export type AddedLatency = ReturnType<typeof addedLatency>;

/** The table of added latencies, then where each tail came from and what failed. */
export function reportAddedLatency(log: (message: string) => void, rate: number | string, added: AddedLatency[], table: (header: string[], rows: unknown[][]) => string): void {
  log(`Added latency at a fixed ${rate} req/s (open loop, scheduled send to last byte, microsecond timing)`);
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
}

export interface GatewayTargets {
  /** The service's saturated req/s, at least this times Portkey's in the same run. */
  throughputVsPortkey: number;
  addedP50Ms: number;
  addedP99Ms: number;
}

/**
 * The service's row against the mean of Portkey's runs before and after it (this machine's
 * speed drifts), and the added latencies against the targets: what was missed, one line each.
 */
export function judgeAgainstPortkey(
  rows: Row[],
  names: { service: string; portkey: [string, string] },
  added: AddedLatency[],
  ratePerSecond: number,
  targets: GatewayTargets,
): { portkeyRuns: number[]; portkeyReqPerSec: number; ratio: number; missed: string[] } {
  const row = (target: string) => rows.find((r) => r.target === target)!;
  const portkeyRuns = names.portkey.map((name) => row(name).reqPerSec);
  const portkeyReqPerSec = round1((portkeyRuns[0] + portkeyRuns[1]) / 2);
  const service = row(names.service).reqPerSec;
  const ratio = service / portkeyReqPerSec;
  const missed: string[] = [];
  if (ratio < targets.throughputVsPortkey) {
    missed.push(
      `${names.service} ${service} req/s is ${round3(ratio)}x Portkey's ${portkeyReqPerSec} (the mean of its runs before and after, ` +
        `${portkeyRuns.join(' and ')}; target >= ${targets.throughputVsPortkey}x)`,
    );
  }
  for (const a of added) {
    if (a.addedP50Ms > targets.addedP50Ms) missed.push(`added p50 latency at ${ratePerSecond} req/s, ${a.label}: ${a.addedP50Ms} ms (target <= ${targets.addedP50Ms} ms)`);
    if (a.addedP99Ms > targets.addedP99Ms) missed.push(`added p99 latency at ${ratePerSecond} req/s, ${a.label}: ${a.addedP99Ms} ms (target <= ${targets.addedP99Ms} ms)`);
  }
  return { portkeyRuns, portkeyReqPerSec, ratio, missed };
}

/** What a gateway benchmark writes to bench/results/<name>-latest.json, besides its own fields. */
export function gatewayResults(
  run: { settings: object; targets: object; missed: string[]; rows: Row[]; portkeyReqPerSec: number; ratio: number; added: AddedLatency[]; checks: Check[] },
  ctx: Pick<BenchContext, 'startLoad' | 'startedAt'>,
) {
  return {
    settings: run.settings,
    targets: run.targets,
    targetsMet: run.missed.length === 0,
    missed: run.missed,
    saturated: run.rows,
    portkeyReqPerSec: run.portkeyReqPerSec,
    serviceVsPortkey: round3(run.ratio),
    addedLatency: run.added,
    checks: run.checks,
    portkeyVersion: portkeyVersion(),
    loadAverage: { start: ctx.startLoad, end: os.loadavg().map(round1) },
    wallSeconds: round1((Date.now() - ctx.startedAt) / 1000),
  };
}

/** The table of accounting checks, one per measurement of the service. */
export function reportChecks(log: (message: string) => void, checks: Check[], table: (header: string[], rows: unknown[][]) => string): void {
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
}

/** What a failed accounting check missed, one line each. */
export function missedChecks(checks: Check[]): string[] {
  return checks
    .filter((c) => !c.pass)
    .map(
      (c) =>
        `accounting after "${c.measurement}": ${[
          c.nothingReserved
            ? ''
            : `${c.reservedMillicents} millicents still reserved` + (c.holds ? ` (${c.holds.count} rows in wallet_holds, the oldest ${c.holds.oldestAgeSeconds} s old)` : ''),
          c.ledgerMatches ? '' : `${c.ledgerMismatches} wallets differ from their ledger`,
          c.usageMatches ? '' : `${c.usageRecords} usage records for ${c.answered2xx} 2xx answers of ${c.sent} sent`,
        ]
          .filter(Boolean)
          .join('; ')}`,
    );
}

/** The CPU table of saturated runs, % of one core per group. */
export function reportCpu(log: (message: string) => void, rows: { target: string; run: SaturatedRun }[], table: (header: string[], rows: unknown[][]) => string): void {
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
}

/**
 * Where a fixed-rate measurement's tail came from: when its slowest requests were sent (one
 * burst is one stall) and what the service's main thread went through meanwhile.
 */
export function describeTail(slowest: SlowBurst[], mainThread: MainThreadReport | undefined): string {
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

export function portkeyVersion(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('@portkey-ai/gateway/package.json') as { version: string }).version;
}

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
