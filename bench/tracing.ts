/**
 * What OpenTelemetry costs the chat path (issue 45): the service with tracing off, on at 100 %
 * sampling and on at 10 % (and at 10 % without the pg instrumentation), each exporting
 * (traces in protobuf, metrics) to an OTLP/HTTP sink in this process, against chat.ts's fake
 * upstream. For each: saturated throughput (non-streaming, 32 connections), the service
 * process's CPU time per request meanwhile (all its threads, from /proc: what decides its
 * throughput, and far less disturbed by other processes than a rate), and the latency added
 * over the fake at 200 req/s (open loop) with the CPU it takes. The variants are interleaved
 * and "off" runs three times, so that the spread between its runs says how much of a
 * difference is noise. See bench/README.md.
 *
 *   npm run bench:tracing
 *
 * Exit code: 0 when 10 % sampling costs at most 10 % of the throughput of a CPU-bound
 * service (its CPU per request against off's), every request answered 200 and off exported
 * nothing; 2 when not (printed); 1 on an error. */
import 'reflect-metadata';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { openLoop, type OpenLoopResult, saturate, type Target } from './chat-load';
import { cpuDuring, firstLine, freePort, runNode, type ServerProcess, startNode, waitUntilServing } from './chat-processes';
import { type BenchContext, runBench, summarize, table, writeResults } from './harness';

const SETTINGS = {
  model: 'gpt-4o-mini',
  connections: 32,
  warmupSeconds: 3,
  durationSeconds: 10,
  openLoop: { ratePerSecond: 200, warmupSeconds: 2, durationSeconds: 10, timeoutMs: 30_000 },
  balanceMillicents: 1_000_000_000_000,
  customRateLimitRpm: 100_000_000,
  hardTimeoutMs: 900_000,
} as const;

/** 10 % sampling may cost at most this share of off's throughput (issue 45). */
const MAX_COST_AT_10_PERCENT = 0.1;

const CHAT = '/v1/chat/completions';
const BODY = JSON.stringify({ model: SETTINGS.model, messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 16 });

interface Variant {
  label: string;
  /** Runs of a group are averaged: the machine's noise shows between them. */
  group: 'off' | 'full' | 'tenth' | 'tenthWithoutPg';
  env: Record<string, string>;
}

interface Measured {
  label: string;
  group: Variant['group'];
  reqPerSec: number;
  saturatedP50Ms: number;
  saturatedP99Ms: number;
  /** The service process's CPU time per answered request in the saturated run (all threads). */
  cpuMsPerRequest: number | undefined;
  addedP50Ms: number;
  addedP99Ms: number;
  /** The service's CPU at 200 req/s, in % of one core. */
  cpuPercentAtRate: number | undefined;
  non2xx: number;
  errors: number;
  /** Spans and export requests the sink received during this variant. */
  exports: number;
  exportedKb: number;
}

async function main({ databaseUrl, log, onCleanup, startLoad }: BenchContext): Promise<number> {
  const dist = path.join(__dirname, '..');
  const cliJs = path.join(dist, 'src', 'cli.js');
  const mainJs = path.join(dist, 'src', 'main.js');
  log(`1-min load average at start: ${startLoad[0]} on ${os.cpus().length} CPUs; Node.js ${process.version}`);
  const start = (name: string, args: string[], env: Record<string, string>): ServerProcess => {
    const server = startNode(name, args, env);
    onCleanup(() => server.stop());
    return server;
  };

  // The fake upstream (chat.ts's floor) and the OTLP sink: answers every export 200, counts it, keeps nothing.
  const upstream = start('fake upstream', [path.join(__dirname, 'chat-upstream.js'), '0'], {});
  const upstreamUrl = `http://127.0.0.1:${(JSON.parse(await firstLine(upstream, 10_000)) as { port: number }).port}`;
  await waitUntilServing(upstream, `${upstreamUrl}/v1/models`, 5_000);
  const sink = { requests: 0, bytes: 0 };
  const sinkServer = createServer((req, res) => {
    req.on('data', (chunk: Buffer) => (sink.bytes += chunk.length));
    req.on('end', () => {
      sink.requests += 1;
      res.writeHead(200, { 'Content-Type': 'application/x-protobuf' }).end();
    });
  });
  await new Promise<void>((resolve) => sinkServer.listen(0, '127.0.0.1', resolve));
  onCleanup(() => new Promise((resolve) => sinkServer.close(resolve)));
  const sinkUrl = `http://127.0.0.1:${(sinkServer.address() as AddressInfo).port}`;

  const dataDir = await mkdtemp(path.join(os.tmpdir(), 'acs-bench-tracing-data-'));
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
  };
  const cli = async (...args: string[]) => JSON.parse(await runNode([cliJs, ...args], serviceEnv, 60_000)) as Record<string, unknown>;
  const created = await cli('workspace', 'create', '--name', 'Benchmark', '--tier', 'enterprise', '--balance', String(SETTINGS.balanceMillicents));
  const apiKey = created.api_key as string;
  await cli('workspace', 'set-tier', '--workspace', created.workspace_id as string, '--tier', 'enterprise', '--rpm', String(SETTINGS.customRateLimitRpm));

  const otel = (ratio: string): Record<string, string> => ({
    OTEL_EXPORTER_OTLP_ENDPOINT: sinkUrl,
    OTEL_TRACES_SAMPLER: 'parentbased_traceidratio',
    OTEL_TRACES_SAMPLER_ARG: ratio,
  });
  // Interleaved, so that a machine busier at one moment does not weigh on one variant only.
  const variants: Variant[] = [
    { label: 'off', group: 'off', env: {} },
    { label: 'on, 100 % sampled', group: 'full', env: otel('1') },
    { label: 'on, 10 % sampled', group: 'tenth', env: otel('0.1') },
    { label: 'off, again', group: 'off', env: {} },
    { label: 'on, 10 %, no pg spans', group: 'tenthWithoutPg', env: { ...otel('0.1'), OTEL_NODE_DISABLED_INSTRUMENTATIONS: 'pg' } },
    { label: 'on, 10 % sampled, again', group: 'tenth', env: otel('0.1') },
    { label: 'off, third', group: 'off', env: {} },
  ];
  const floorTarget: Target = { baseUrl: upstreamUrl, path: CHAT, headers: { authorization: 'Bearer bench' }, body: BODY };
  const { ratePerSecond, warmupSeconds, durationSeconds, timeoutMs } = SETTINGS.openLoop;
  const fixedRate = (target: Target): Promise<OpenLoopResult> => openLoop({ target, ratePerSecond, warmupSeconds, durationSeconds, timeoutMs });
  log(`Floor: the fake upstream alone at ${ratePerSecond} req/s`);
  const floor = summarize((await fixedRate(floorTarget)).latenciesNs);

  // BENCH_CPU_PROF=<dir>: each service process writes a V8 CPU profile there when it stops (where the cost of each variant goes).
  const profile = process.env.BENCH_CPU_PROF ? ['--cpu-prof', `--cpu-prof-dir=${path.resolve(process.env.BENCH_CPU_PROF)}`] : [];
  const results: Measured[] = [];
  for (const variant of variants) {
    const port = await freePort();
    const server = start(`service (${variant.label})`, [...profile, mainJs], { ...serviceEnv, ...variant.env, PORT: String(port) });
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitUntilServing(server, `${baseUrl}/health/ready`, 60_000);
    const target: Target = { baseUrl, path: CHAT, headers: { authorization: `Bearer ${apiKey}` }, body: BODY };
    const probe = await fetch(`${baseUrl}${CHAT}`, { method: 'POST', headers: { 'content-type': 'application/json', ...target.headers }, body: BODY });
    if (probe.status !== 200) throw new Error(`The service (${variant.label}) answered ${probe.status}: ${(await probe.text()).slice(0, 300)}`);
    const before = { ...sink };
    log(`${variant.label}: saturated ${SETTINGS.durationSeconds} s (after ${SETTINGS.warmupSeconds} s warm-up), then ${ratePerSecond} req/s for ${durationSeconds} s`);
    await saturate([target], SETTINGS.connections, SETTINGS.warmupSeconds);
    const service = { service: { pids: [server.pid] } };
    const { result: run, cpuPercent } = await cpuDuring(service, () => saturate([target], SETTINGS.connections, SETTINGS.durationSeconds));
    const { result: fixed, cpuPercent: cpuAtRate } = await cpuDuring(service, () => fixedRate(target));
    // The stop flushes what is left: counted with this variant.
    await server.stop(15_000);
    const s = summarize(fixed.latenciesNs);
    const ms = (ns: number) => Math.round(ns / 1e3) / 1e3;
    results.push({
      label: variant.label,
      group: variant.group,
      reqPerSec: Math.round(run.reqPerSec),
      saturatedP50Ms: run.p50Ms,
      saturatedP99Ms: run.p99Ms,
      cpuMsPerRequest: cpuPercent?.service === undefined ? undefined : Math.round(((cpuPercent.service / 100) * SETTINGS.durationSeconds * 1e6) / run.ok2xx) / 1e3,
      cpuPercentAtRate: cpuAtRate?.service,
      addedP50Ms: ms(s.p50 - floor.p50),
      addedP99Ms: ms(s.p99 - floor.p99),
      non2xx: run.non2xx + fixed.non2xx,
      errors: run.errors + fixed.errors,
      exports: sink.requests - before.requests,
      exportedKb: Math.round((sink.bytes - before.bytes) / 1024),
    });
  }

  log(
    '\n' +
      table(
        ['variant', 'req/s (saturated)', 'CPU ms/req', 'p50 ms', 'p99 ms', `added p50 ms @${ratePerSecond}/s`, `added p99 ms @${ratePerSecond}/s`, `CPU % @${ratePerSecond}/s`, 'non-2xx', 'errors', 'exports', 'exported KB'],
        results.map((r) => [r.label, r.reqPerSec, r.cpuMsPerRequest, r.saturatedP50Ms, r.saturatedP99Ms, r.addedP50Ms, r.addedP99Ms, r.cpuPercentAtRate, r.non2xx, r.errors, r.exports, r.exportedKb]),
      ),
  );
  const cpuOf = (group: Variant['group']) => {
    const runs = results.filter((r) => r.group === group).map((r) => r.cpuMsPerRequest ?? Number.NaN);
    return { mean: runs.reduce((sum, v) => sum + v, 0) / runs.length, spread: (Math.max(...runs) - Math.min(...runs)) / Math.min(...runs) };
  };
  const off = cpuOf('off');
  // A CPU-bound process's throughput is 1 / its CPU per request: the share of it tracing takes.
  const costOf = (group: Variant['group']) => 1 - off.mean / cpuOf(group).mean;
  const percent = (share: number) => `${(share * 100).toFixed(1)} %`;
  const tenthCost = costOf('tenth');
  const fullCost = costOf('full');
  log(
    `CPU per request, off: ${off.mean.toFixed(3)} ms (mean of its runs, which differ by up to ${percent(off.spread)}). ` +
      `Throughput a CPU-bound service loses: 100 % sampled ${percent(fullCost)}, 10 % sampled ${percent(tenthCost)}, 10 % without pg spans ${percent(costOf('tenthWithoutPg'))}`,
  );
  const file = await writeResults('tracing', { settings: SETTINGS, floorP50Ms: floor.p50 / 1e6, floorP99Ms: floor.p99 / 1e6, results, offCpuSpread: off.spread, tenthCost, fullCost });
  log(`Results: ${file}`);
  const failures = [
    ...results.filter((r) => r.non2xx + r.errors > 0).map((r) => `${r.label}: ${r.non2xx} non-2xx, ${r.errors} errors`),
    ...(!(tenthCost <= MAX_COST_AT_10_PERCENT) ? [`10 % sampling costs ${(tenthCost * 100).toFixed(1)} % of a CPU-bound throughput (target: at most ${MAX_COST_AT_10_PERCENT * 100} %)`] : []),
    ...(results.some((r) => r.group === 'off' && r.exports > 0) ? ['tracing off exported something'] : []),
  ];
  for (const failure of failures) log(`MISSED: ${failure}`);
  return failures.length === 0 ? 0 : 2;
}

runBench('tracing', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
