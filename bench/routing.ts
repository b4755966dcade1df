/**
 * Upstream routing under faults (issue 32): one model with three deployments behind fake
 * upstreams, a fixed 200 req/s for 60 s while one deployment answers 500s, another 429s and
 * the third hangs, each for a while; then the throughput of the service against Portkey's
 * gateway with a fallback config over the same fakes. See bench/README.md.
 *
 *   npm run bench:routing
 *
 * Every server is its own process on 127.0.0.1, as in bench/chat.ts: the fakes (one process,
 * three ports, bench/routing-upstream.ts), Portkey's gateway, and the service as production
 * runs it on the harness's embedded PostgreSQL, with a MODEL_CATALOG_FILE written here. The
 * accounting is checked after each measurement of the service, as bench/chat.ts does.
 *
 * Exit code: 0 when every target is met, 2 when one is missed (printed), 1 on an error.
 */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import { Client } from 'pg';
import { type Check, readAccounting, settleAndCheck } from './accounting';
import { saturate, type SaturatedRun, type Target } from './chat-load';
import { cpuDuring, firstLine, freePort, postmasterPid, runNode, startNode, waitUntilServing } from './chat-processes';
import { type BenchContext, runBench, summarize, table, writeResults } from './harness';
import { type RequestRecord, routingLoad, type RoutingLoadResult } from './routing-load';
import type { DeploymentStats, FaultMode, Phase } from './routing-upstream';

// ---------------------------------------------------------------------------------------
// Settings: one place, recorded in the JSON output.
// ---------------------------------------------------------------------------------------
const DEPLOYMENTS = ['a', 'b', 'c'] as const;
type Label = (typeof DEPLOYMENTS)[number];

const SETTINGS = {
  model: 'gpt-4o-mini',
  /** The fixed-rate scenario: t = 0 is the first measured send. */
  scenario: {
    ratePerSecond: 200,
    warmupSeconds: 2,
    durationSeconds: 60,
    /** Every 10th request streamed: a share of streams, judged apart. */
    streamEvery: 10,
    timeoutMs: 30_000,
    faults: {
      a: [{ mode: '500', from: 20, to: 40 }],
      b: [{ mode: '429', from: 30, to: 40 }],
      c: [{ mode: 'hang', from: 50, to: 55 }],
    } satisfies Record<Label, Phase[]>,
  },
  /** The floor: the same client straight at one fake, 10 s at the same rate. */
  floorSeconds: 10,
  /** Bounds one attempt: a hung deployment fails over after this long. */
  upstreamTimeoutMs: 2_000,
  saturated: { connections: 32, warmupSeconds: 3, durationSeconds: 10 },
  balanceMillicents: 1_000_000_000_000,
  customRateLimitRpm: 100_000_000,
  settleGraceMs: 10_000,
  hardTimeoutMs: 420_000,
} as const;

const TARGETS = {
  /** Non-streaming requests of the scenario answered 2xx, of those sent. */
  nonStreamingAnswered: 1,
  /** Service req/s, all deployments up, at least this times Portkey's with its fallback config. */
  throughputVsPortkey: 1.5,
} as const;

const CHAT = '/v1/chat/completions';
const BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });
const STREAM_BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16, stream: true });

const round1 = (v: number) => Math.round(v * 10) / 10;
const round3 = (v: number) => Math.round(v * 1000) / 1000;
const ms = (ns: number) => round3(ns / 1e6);

// ---------------------------------------------------------------------------------------
// What the scenario's requests say.
// ---------------------------------------------------------------------------------------
interface Latencies {
  n: number;
  p50Ms: number | null;
  p99Ms: number | null;
}

function latencies(records: RequestRecord[]): Latencies {
  if (records.length === 0) return { n: 0, p50Ms: null, p99Ms: null };
  const s = summarize(records.map((r) => r.latencyNs));
  return { n: s.n, p50Ms: ms(s.p50), p99Ms: ms(s.p99) };
}

const answered = (r: RequestRecord) => r.status !== undefined && r.status >= 200 && r.status < 300;
const failedOver = (r: RequestRecord) => answered(r) && (r.attempts ?? 1) > 1;

interface PathReport {
  path: 'non-streaming' | 'streaming';
  sent: number;
  answered: number;
  successRate: number;
  non2xx: Record<string, number>;
  errors: Record<string, number>;
  samples: Record<string, string>;
  all: Latencies;
  /** Answered at the first attempt, and after more than one. */
  firstAttempt: Latencies;
  failedOver: Latencies;
  attempts: Record<string, number>;
}

function pathReport(pathName: PathReport['path'], records: RequestRecord[]): PathReport {
  const non2xx: Record<string, number> = {};
  const errors: Record<string, number> = {};
  const samples: Record<string, string> = {};
  const attempts: Record<string, number> = {};
  for (const r of records) {
    if (r.status === undefined) errors[r.error ?? '?'] = (errors[r.error ?? '?'] ?? 0) + 1;
    else if (!answered(r)) {
      non2xx[r.status] = (non2xx[r.status] ?? 0) + 1;
      samples[r.status] ??= r.sample ?? '';
    } else attempts[String(r.attempts ?? '?')] = (attempts[String(r.attempts ?? '?')] ?? 0) + 1;
  }
  const ok = records.filter(answered);
  return {
    path: pathName,
    sent: records.length,
    answered: ok.length,
    successRate: records.length === 0 ? 1 : ok.length / records.length,
    non2xx,
    errors,
    samples,
    // Failed requests keep their place in "all", with the time they took.
    all: latencies(records),
    firstAttempt: latencies(ok.filter((r) => !failedOver(r))),
    failedOver: latencies(ok.filter(failedOver)),
    attempts,
  };
}

interface WindowReport {
  window: string;
  faults: string;
  sent: number;
  answered: number;
  failedOver: number;
  p50Ms: number | null;
  p99Ms: number | null;
  /** Per deployment: what its fake received (by the mode it answered in), and what it served by the answers' x_service. */
  received: Record<Label, Partial<Record<FaultMode, number>>>;
  served: Record<string, number>;
}

function faultsDuring(from: number, to: number): string {
  const active = DEPLOYMENTS.flatMap((label) =>
    (SETTINGS.scenario.faults[label] as readonly Phase[]).filter((p) => p.from < to && p.to > from).map((p) => `${label.toUpperCase()} ${p.mode}${p.from > from || p.to < to ? ` ${p.from}-${p.to} s` : ''}`),
  );
  return active.join(', ') || 'none';
}

function windows(records: RequestRecord[], stats: Record<Label, DeploymentStats>): WindowReport[] {
  const windowSeconds = stats.a.windowSeconds;
  const reports: WindowReport[] = [];
  for (let from = 0; from < SETTINGS.scenario.durationSeconds; from += windowSeconds) {
    const index = from / windowSeconds;
    const inWindow = records.filter((r) => r.atMs >= from * 1000 && r.atMs < (from + windowSeconds) * 1000);
    const all = latencies(inWindow);
    const served: Record<string, number> = {};
    for (const r of inWindow.filter(answered)) served[String(r.deployment)] = (served[String(r.deployment)] ?? 0) + 1;
    reports.push({
      window: `${from}-${from + windowSeconds} s`,
      faults: faultsDuring(from, from + windowSeconds),
      sent: inWindow.length,
      answered: inWindow.filter(answered).length,
      failedOver: inWindow.filter(failedOver).length,
      p50Ms: all.p50Ms,
      p99Ms: all.p99Ms,
      received: Object.fromEntries(DEPLOYMENTS.map((label) => [label, stats[label].windows[index] ?? {}])) as WindowReport['received'],
      served,
    });
  }
  return reports;
}

const describeCounts = (counts: Partial<Record<string, number>>) =>
  Object.entries(counts)
    .map(([mode, n]) => (mode === 'ok' ? String(n) : `${n} ${mode}`))
    .join(' + ') || '0';

// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------
interface Row {
  target: string;
  faults: string;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  non2xx: number;
  errors: number;
  /** Requests the fakes received during the measured run, per deployment and mode. */
  received: Record<Label, Partial<Record<FaultMode, number>>>;
  run: SaturatedRun;
}

async function main({ databaseUrl, log, onCleanup, startedAt, startLoad }: BenchContext): Promise<number> {
  const dist = path.join(__dirname, '..');
  const cliJs = path.join(dist, 'src', 'cli.js');
  const mainJs = path.join(dist, 'src', 'main.js');
  const portkeyJs = require.resolve('@portkey-ai/gateway/build/start-server.js');
  log(`1-min load average at start: ${startLoad[0]} on ${os.cpus().length} CPUs; Node.js ${process.version} (every process of the run)`);
  const start = (name: string, args: string[], env: Record<string, string>) => {
    const server = startNode(name, args, env);
    onCleanup(() => server.stop());
    return server;
  };

  // --- The fakes: three deployments of one model ---------------------------------------
  const fakes = start('fake upstreams', [path.join(__dirname, 'routing-upstream.js'), String(DEPLOYMENTS.length)], {});
  const ports = (JSON.parse(await firstLine(fakes, 10_000)) as { ports: number[] }).ports;
  const fakeUrl = Object.fromEntries(DEPLOYMENTS.map((label, i) => [label, `http://127.0.0.1:${ports[i]}`])) as Record<Label, string>;
  for (const label of DEPLOYMENTS) await waitUntilServing(fakes, `${fakeUrl[label]}/v1/models`, 5_000);
  const controlFake = async (label: Label, what: 'mode' | 'schedule', body: unknown) => {
    const res = await fetch(`${fakeUrl[label]}/__control/${what}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    if (res.status !== 200) throw new Error(`fake ${label}: ${what} answered ${res.status} ${await res.text()}`);
  };
  const setModes = (modes: Record<Label, FaultMode>) => Promise.all(DEPLOYMENTS.map((label) => controlFake(label, 'mode', { mode: modes[label] })));
  const readStats = async () =>
    Object.fromEntries(
      await Promise.all(DEPLOYMENTS.map(async (label) => [label, (await (await fetch(`${fakeUrl[label]}/__control/stats`)).json()) as DeploymentStats])),
    ) as Record<Label, DeploymentStats>;
  /** Requests each fake received since its counts last started, by mode. */
  const receivedTotals = async () => {
    const stats = await readStats();
    const totals = {} as Record<Label, Partial<Record<FaultMode, number>>>;
    for (const label of DEPLOYMENTS) {
      const sum: Partial<Record<FaultMode, number>> = {};
      for (const counts of Object.values(stats[label].windows)) for (const [mode, n] of Object.entries(counts)) sum[mode as FaultMode] = (sum[mode as FaultMode] ?? 0) + n;
      totals[label] = sum;
    }
    return totals;
  };
  const subtractTotals = (after: Record<Label, Partial<Record<FaultMode, number>>>, before: Record<Label, Partial<Record<FaultMode, number>>>) =>
    Object.fromEntries(
      DEPLOYMENTS.map((label) => [
        label,
        Object.fromEntries(Object.entries(after[label]).map(([mode, n]) => [mode, n - (before[label][mode as FaultMode] ?? 0)]).filter(([, n]) => (n as number) > 0)),
      ]),
    ) as Record<Label, Partial<Record<FaultMode, number>>>;

  // --- Portkey's gateway, with a fallback config over the three ---------------------------
  const portkeyPort = await freePort();
  const portkey = start('Portkey gateway', ['-r', path.join(__dirname, 'loopback-only.js'), portkeyJs, `--port=${portkeyPort}`, '--headless'], { NODE_ENV: 'production' });
  const portkeyUrl = `http://127.0.0.1:${portkeyPort}`;
  const portkeyConfig = {
    strategy: { mode: 'fallback' },
    targets: DEPLOYMENTS.map((label) => ({ provider: 'openai', api_key: 'bench', custom_host: `${fakeUrl[label]}/v1` })),
  };
  const portkeyHeaders = { 'x-portkey-config': JSON.stringify(portkeyConfig) };
  await waitUntilServing(portkey, `${portkeyUrl}${CHAT}`, 30_000, { method: 'POST', headers: { 'content-type': 'application/json', ...portkeyHeaders }, body: BODY });
  // That it routes to the fakes by the config, in its order: with A answering 500, a request must reach A, then B.
  await setModes({ a: '500', b: 'ok', c: 'ok' });
  const beforeProbe = await receivedTotals();
  const probe = await fetch(`${portkeyUrl}${CHAT}`, { method: 'POST', headers: { 'content-type': 'application/json', ...portkeyHeaders }, body: BODY });
  const probeText = await probe.text();
  const probed = subtractTotals(await receivedTotals(), beforeProbe);
  if (probe.status !== 200 || probed.a['500'] !== 1 || probed.b.ok !== 1 || Object.keys(probed.c).length !== 0) {
    throw new Error(`Portkey's fallback config does not route as configured: ${probe.status} ${probeText.slice(0, 300)}; the fakes received ${JSON.stringify(probed)}`);
  }
  await setModes({ a: 'ok', b: 'ok', c: 'ok' });
  log(`Fakes A, B, C on ${DEPLOYMENTS.map((l) => fakeUrl[l]).join(', ')}; Portkey ${portkeyVersion()} on ${portkeyUrl}, fallback A -> B -> C (with A answering 500, a request reached A then B and answered 200)`);

  // --- The service, with the three as deployments of one model --------------------------
  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'acs-bench-routing-data-'));
  onCleanup(() => rm(dataDir, { recursive: true, force: true }));
  const catalogFile = path.join(dataDir, 'catalog.json');
  const catalog = {
    models: [
      {
        id: SETTINGS.model,
        provider: 'openai',
        context_length: 128_000,
        input_price: 15_000,
        output_price: 60_000,
        deployments: DEPLOYMENTS.map((label) => ({ label, provider: 'openai', base_url: `${fakeUrl[label]}/v1`, api_key_env: `BENCH_KEY_${label.toUpperCase()}`, weight: 1 })),
      },
    ],
  };
  await writeFile(catalogFile, JSON.stringify(catalog, null, 2));
  const serviceEnv: Record<string, string> = {
    NODE_ENV: 'production',
    DATABASE_URL: databaseUrl,
    DATA_DIR: dataDir,
    SESSION_SECRET: randomBytes(32).toString('base64url'),
    SIGNUP: 'closed',
    MODEL_CATALOG_FILE: catalogFile,
    ...Object.fromEntries(DEPLOYMENTS.map((label) => [`BENCH_KEY_${label.toUpperCase()}`, `bench-${label}`])),
    // The single-key variables too, at A: a service without deployments (before issue 32) still runs, on A alone.
    OPENAI_API_KEY: 'bench',
    OPENAI_BASE_URL: `${fakeUrl.a}/v1`,
    UPSTREAM_TIMEOUT_MS: String(SETTINGS.upstreamTimeoutMs),
    LLM_SIMULATOR: 'off',
    LOG_LEVEL: 'error',
    HOST: '127.0.0.1',
  };
  const cli = async (...args: string[]) => JSON.parse(await runNode([cliJs, ...args], serviceEnv, 60_000)) as Record<string, unknown>;
  const created = await cli('workspace', 'create', '--name', 'Routing benchmark', '--tier', 'enterprise', '--balance', String(SETTINGS.balanceMillicents));
  const workspaceId = created.workspace_id as string;
  const apiKey = created.api_key as string;
  await cli('workspace', 'set-tier', '--workspace', workspaceId, '--tier', 'enterprise', '--rpm', String(SETTINGS.customRateLimitRpm));
  const port = await freePort();
  const service = start('service', [mainJs], { ...serviceEnv, PORT: String(port), METRICS_PORT: String(await freePort()) });
  const serviceUrl = `http://127.0.0.1:${port}`;
  await waitUntilServing(service, `${serviceUrl}/health/ready`, 60_000);
  const serviceHeaders = { authorization: `Bearer ${apiKey}` };
  await probeService(serviceUrl, apiKey);
  log(`Service on ${serviceUrl} (pid ${service.pid}, NODE_ENV=production, UPSTREAM_TIMEOUT_MS=${SETTINGS.upstreamTimeoutMs}), catalog: ${SETTINGS.model} on A, B, C, weights 1:1:1`);

  const db = new Client({ connectionString: databaseUrl });
  await db.connect();
  onCleanup(() => db.end());
  const checks: Check[] = [];
  const measureService = async <T>(label: string, measure: () => Promise<T>, counted: (r: T) => { answered2xx: number; sent: number }) => {
    const before = await readAccounting(db, [workspaceId]);
    const result = await measure();
    const check = await settleAndCheck(db, [workspaceId], label, before, counted(result), SETTINGS.settleGraceMs);
    checks.push(check);
    log(
      `  accounting after "${label}": reserved ${check.reservedMillicents} (${check.nothingReserved ? 'PASS' : 'FAIL'}), ledger = balance (${check.ledgerMatches ? 'PASS' : 'FAIL'}), ` +
        `usage records ${check.usageRecords} ${JSON.stringify(check.usageByStatus)} for ${check.answered2xx} 2xx answers of ${check.sent} sent (${check.usageMatches ? 'PASS' : 'FAIL'}) [${check.waitedMs} ms]`,
    );
    return result;
  };

  // --- 1. The floor: the same client, straight at fake A ---------------------------------
  const { ratePerSecond, warmupSeconds, durationSeconds, streamEvery, timeoutMs } = SETTINGS.scenario;
  const load = (baseUrl: string, headers: Record<string, string>, seconds: number) => {
    const t0 = Date.now() + 500 + warmupSeconds * 1000;
    return { t0, run: routingLoad({ baseUrl, path: CHAT, headers, body: BODY, streamBody: STREAM_BODY, streamEvery, ratePerSecond, t0, warmupSeconds, durationSeconds: seconds, timeoutMs }) };
  };
  log(`floor: fake A alone, ${ratePerSecond} req/s (every ${streamEvery}th streamed), ${warmupSeconds} s warm-up, ${SETTINGS.floorSeconds} s measured`);
  const floor = await load(fakeUrl.a, { authorization: 'Bearer bench' }, SETTINGS.floorSeconds).run;

  // --- 2. The scenario -------------------------------------------------------------------
  log(
    `scenario: the service, ${ratePerSecond} req/s (every ${streamEvery}th streamed), ${warmupSeconds} s warm-up, ${durationSeconds} s measured; ` +
      DEPLOYMENTS.map((label) => `${label.toUpperCase()}: ${SETTINGS.scenario.faults[label].map((p) => `${p.mode} ${p.from}-${p.to} s`).join(', ')}`).join('; '),
  );
  const scenario = await measureService(
    'scenario',
    async () => {
      const { t0, run } = load(serviceUrl, serviceHeaders, durationSeconds);
      await Promise.all(DEPLOYMENTS.map((label) => controlFake(label, 'schedule', { t0, phases: SETTINGS.scenario.faults[label] })));
      return run;
    },
    (r: RoutingLoadResult) => ({ answered2xx: r.totalOk2xx, sent: r.sent }),
  );
  const stats = await readStats();
  await setModes({ a: 'ok', b: 'ok', c: 'ok' });

  // --- 3. Saturated: the service and Portkey, all up; then both with A answering 500 -----
  const { connections, warmupSeconds: satWarmup, durationSeconds: satSeconds } = SETTINGS.saturated;
  const rows: Row[] = [];
  const postmaster = await postmasterPid(Number(new URL(databaseUrl).port));
  const saturated = async (target: string, faults: string, t: Target, gateway: number): Promise<Row> => {
    log(`${target}, ${faults}: ${satWarmup} s warm-up, then ${satSeconds} s at ${connections} connections`);
    const warmup = await saturate([t], connections, satWarmup);
    const before = await receivedTotals();
    const cpuGroups = { gateway: { pids: [gateway] }, postgres: { pids: postmaster ? [postmaster] : [], tree: true }, fake: { pids: [fakes.pid] }, load: { pids: [process.pid] } };
    const { result: run, cpuPercent } = await cpuDuring(cpuGroups, () => saturate([t], connections, satSeconds));
    const received = subtractTotals(await receivedTotals(), before);
    const row = { target, faults, reqPerSec: round1(run.reqPerSec), p50Ms: run.p50Ms, p99Ms: run.p99Ms, non2xx: run.non2xx, errors: run.errors, received, run: { ...run, warmup, cpuPercent } };
    rows.push(row);
    return row;
  };
  const cannonCounts = (r: Row) => ({ answered2xx: r.run.ok2xx + (r.run.warmup?.ok2xx ?? 0), sent: r.run.sent + (r.run.warmup?.sent ?? 0) });
  const serviceTarget: Target = { baseUrl: serviceUrl, path: CHAT, headers: serviceHeaders, body: BODY };
  const portkeyTarget: Target = { baseUrl: portkeyUrl, path: CHAT, headers: portkeyHeaders, body: BODY };
  const portkeyBefore = await saturated('Portkey, fallback A -> B -> C', 'all up', portkeyTarget, portkey.pid);
  const serviceUp = await measureService('saturated, all up', () => saturated('service, A/B/C by weight', 'all up', serviceTarget, service.pid), cannonCounts);
  const portkeyAfter = await saturated('Portkey, fallback A -> B -> C, again', 'all up', portkeyTarget, portkey.pid);
  await setModes({ a: '500', b: 'ok', c: 'ok' });
  const serviceFault = await measureService('saturated, A answering 500', () => saturated('service, A/B/C by weight', 'A answers 500', serviceTarget, service.pid), cannonCounts);
  const portkeyFault = await saturated('Portkey, fallback A -> B -> C', 'A answers 500', portkeyTarget, portkey.pid);
  await setModes({ a: 'ok', b: 'ok', c: 'ok' });

  // --- Report ----------------------------------------------------------------------------
  const nonStreaming = pathReport('non-streaming', scenario.records.filter((r) => !r.stream));
  const streaming = pathReport('streaming', scenario.records.filter((r) => r.stream));
  const floorPlain = latencies(floor.records.filter((r) => !r.stream));
  const floorStream = latencies(floor.records.filter((r) => r.stream));
  const floorOf = (p: PathReport) => (p.path === 'streaming' ? floorStream : floorPlain);
  const minus = (a: number | null, b: number | null) => (a === null || b === null ? null : round3(a - b));
  const paths = [nonStreaming, streaming].map((p) => ({
    ...p,
    floor: floorOf(p),
    addedByFailover: {
      overFloorP50Ms: minus(p.failedOver.p50Ms, floorOf(p).p50Ms),
      overFloorP99Ms: minus(p.failedOver.p99Ms, floorOf(p).p99Ms),
      overFirstAttemptP50Ms: minus(p.failedOver.p50Ms, p.firstAttempt.p50Ms),
      overFirstAttemptP99Ms: minus(p.failedOver.p99Ms, p.firstAttempt.p99Ms),
    },
  }));
  const byWindow = windows(scenario.records, stats);
  // The failed-over requests by what they failed over from: the faults of the window they were sent in.
  const failoverByWindow = byWindow
    .map((w, i) => ({ window: w.window, faults: w.faults, ...latencies(scenario.records.filter((r) => failedOver(r) && Math.floor(r.atMs / 1000 / stats.a.windowSeconds) === i)) }))
    .filter((w) => w.n > 0);

  log('');
  log(
    `Scenario: ${SETTINGS.model} on deployments A, B, C (weights 1:1:1), ${ratePerSecond} req/s open loop for ${durationSeconds} s, every ${streamEvery}th request streamed; ` +
      `1-min load at start ${startLoad[0]}, now ${round1(os.loadavg()[0])}`,
  );
  log(
    table(
      ['path', 'sent', 'answered 2xx', 'success', 'p50', 'p99', 'first attempt p50', 'p99', 'failed over', 'p50', 'p99', 'floor p50', 'p99', 'added p50', 'p99'],
      paths.map((p) => [
        p.path,
        p.sent,
        p.answered,
        `${round3(p.successRate * 100)}%`,
        p.all.p50Ms,
        p.all.p99Ms,
        p.firstAttempt.p50Ms,
        p.firstAttempt.p99Ms,
        p.failedOver.n,
        p.failedOver.p50Ms ?? '-',
        p.failedOver.p99Ms ?? '-',
        p.floor.p50Ms,
        p.floor.p99Ms,
        p.addedByFailover.overFloorP50Ms ?? '-',
        p.addedByFailover.overFloorP99Ms ?? '-',
      ]),
    ),
  );
  log('(ms; scheduled send to last byte; "added" = failed-over requests minus the floor, the same client straight at one fake)');
  for (const p of paths) {
    log(`  ${p.path}: attempts per answered request ${JSON.stringify(p.attempts)}`);
    for (const [status, n] of Object.entries(p.non2xx)) log(`  ${p.path}: ${n} answered ${status}, e.g. ${p.samples[status]}`);
    for (const [message, n] of Object.entries(p.errors)) log(`  ${p.path}: ${n} failed: ${message}`);
  }
  log('');
  log('Failed-over requests by the window they were sent in');
  log(table(['window', 'faults', 'failed over', 'p50 ms', 'p99 ms'], failoverByWindow.map((w) => [w.window, w.faults, w.n, w.p50Ms, w.p99Ms])));
  log('');
  log('Per 10 s window: what each fake received (answered normally + in its fault mode), and what each deployment served (the answers\' x_service.deployment)');
  const servedLabels = [...new Set(byWindow.flatMap((w) => Object.keys(w.served)))].sort();
  log(
    table(
      ['window', 'faults', 'sent', '2xx', 'failed over', 'p50 ms', 'p99 ms', 'A received', 'B received', 'C received', ...servedLabels.map((l) => `served by ${l}`)],
      byWindow.map((w) => [w.window, w.faults, w.sent, w.answered, w.failedOver, w.p50Ms, w.p99Ms, ...DEPLOYMENTS.map((l) => describeCounts(w.received[l])), ...servedLabels.map((l) => w.served[l] ?? 0)]),
    ),
  );
  log('');
  log(`Saturated: ${connections} connections, ${satSeconds} s after ${satWarmup} s of warm-up (autocannon; req/s = 2xx answers / s; whole ms)`);
  log(
    table(
      ['target', 'deployments', 'req/s', 'p50 ms', 'p99 ms', 'non-2xx', 'errors', 'A received', 'B received', 'C received', 'gateway CPU %'],
      rows.map((r) => [r.target, r.faults, r.reqPerSec, r.p50Ms, r.p99Ms, r.non2xx, r.errors, ...DEPLOYMENTS.map((l) => describeCounts(r.received[l])), r.run.cpuPercent?.gateway ?? '-']),
    ),
  );
  log('');
  log('Accounting after each measurement of the service');
  log(
    table(
      ['measurement', '2xx', 'sent', 'usage records', 'reserved', 'ledger', 'usage', 'result'],
      checks.map((c) => [c.measurement, c.answered2xx, c.sent, `${c.usageRecords} ${JSON.stringify(c.usageByStatus)}`, c.reservedMillicents, c.ledgerMatches ? 'matches' : 'differs', c.usageMatches ? 'matches' : 'differs', c.pass ? 'PASS' : 'FAIL']),
    ),
  );

  // --- Targets ---------------------------------------------------------------------------
  const missed: string[] = [];
  if (nonStreaming.successRate < TARGETS.nonStreamingAnswered) {
    missed.push(`${nonStreaming.answered} of ${nonStreaming.sent} non-streaming requests answered 2xx (${round3(nonStreaming.successRate * 100)}%; target 100%)`);
  }
  const portkeyRuns = [portkeyBefore.reqPerSec, portkeyAfter.reqPerSec];
  const portkeyReqPerSec = round1((portkeyRuns[0] + portkeyRuns[1]) / 2);
  const ratio = serviceUp.reqPerSec / portkeyReqPerSec;
  const faultRatio = serviceFault.reqPerSec / portkeyFault.reqPerSec;
  if (ratio < TARGETS.throughputVsPortkey) {
    missed.push(`service ${serviceUp.reqPerSec} req/s is ${round3(ratio)}x Portkey's ${portkeyReqPerSec} (mean of ${portkeyRuns.join(' and ')}), all up; target >= ${TARGETS.throughputVsPortkey}x`);
  }
  for (const c of checks.filter((c) => !c.pass)) {
    missed.push(
      `accounting after "${c.measurement}": ${[
        c.nothingReserved ? '' : `${c.reservedMillicents} millicents still reserved`,
        c.ledgerMatches ? '' : 'the wallet differs from its ledger',
        c.usageMatches ? '' : `${c.usageRecords} usage records for ${c.answered2xx} 2xx answers of ${c.sent} sent`,
      ]
        .filter(Boolean)
        .join('; ')}`,
    );
  }
  log('');
  log(
    `Service / Portkey, all up: ${round3(ratio)}x (target >= ${TARGETS.throughputVsPortkey}x; against the mean of Portkey's runs before and after, ${portkeyRuns.join(' and ')} req/s); ` +
      `with A answering 500: ${round3(faultRatio)}x (no target)`,
  );
  if (missed.length === 0) log('All targets MET');
  else for (const m of missed) log(`Target NOT MET: ${m}`);

  const results = {
    settings: SETTINGS,
    targets: TARGETS,
    targetsMet: missed.length === 0,
    missed,
    catalog,
    portkeyConfig,
    scenario: { paths, failoverByWindow, windows: byWindow, sendLagP99Ms: ms(scenario.sendLagP99Ns), floorSendLagP99Ms: ms(floor.sendLagP99Ns) },
    saturated: rows,
    portkeyReqPerSec,
    serviceVsPortkey: round3(ratio),
    serviceVsPortkeyWithAFailing: round3(faultRatio),
    checks,
    portkeyVersion: portkeyVersion(),
    loadAverage: { start: startLoad, end: os.loadavg().map(round1) },
    wallSeconds: round1((Date.now() - startedAt) / 1000),
  };
  const file = await writeResults('routing', results);
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return missed.length === 0 ? 0 : 2;
}

/** One plain and one streamed chat request must answer 200 before anything is measured. */
async function probeService(baseUrl: string, apiKey: string): Promise<void> {
  const headers = { 'content-type': 'application/json', authorization: `Bearer ${apiKey}` };
  for (const body of [BODY, STREAM_BODY]) {
    const res = await fetch(`${baseUrl}${CHAT}`, { method: 'POST', headers, body });
    const text = await res.text();
    if (res.status !== 200) throw new Error(`The service answered ${res.status} to a chat request: ${text.slice(0, 500)}`);
  }
  // Reading the wallet waits for the probes' settlement, so that their records are not counted in the first measurement.
  const wallet = await fetch(`${baseUrl}/v1/wallet`, { headers });
  if (wallet.status !== 200) throw new Error(`The service answered ${wallet.status} to GET /v1/wallet: ${(await wallet.text()).slice(0, 500)}`);
}

function portkeyVersion(): string {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  return (require('@portkey-ai/gateway/package.json') as { version: string }).version;
}

runBench('routing', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
