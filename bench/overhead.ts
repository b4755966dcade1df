/**
 * What do authentication and rate limiting cost per request?
 *
 * Compares `GET /health` (public: no key, not counted) with `GET /v1/models` (API key
 * checked, request counted against the workspace's rate) on the real app, wired by the
 * same factory as production, on its own embedded PostgreSQL. See bench/README.md.
 *
 *   npm run bench
 *
 * The server runs on this process's main thread; every load generator runs on a worker
 * thread (autocannon's `workers: 1`, and our own sequential client), so client and server
 * do not share an event loop.
 */
import 'reflect-metadata';
import * as http from 'node:http';
import * as os from 'node:os';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { type BenchContext, runBench, summarize, table, writeResults } from './harness';

// ---------------------------------------------------------------------------------------
// Settings: one place, recorded in the JSON output.
// ---------------------------------------------------------------------------------------
const SETTINGS = {
  connections: 10,
  warmupSeconds: 3,
  durationSeconds: 10,
  rounds: 2,
  /** Sequential (one keep-alive connection, one request in flight) precise measurement. */
  sequential: { rounds: 2, requestsPerRound: 3_000, warmupRequests: 1_000 },
  /** The rate limiter must count every request but never block. */
  customRateLimitRpm: 100_000_000,
  /** The whole run is killed (and cleaned up) after this. */
  hardTimeoutMs: 170_000,
} as const;

const TARGET_P50_OVERHEAD_MS = 0.3;
const HEALTH = '/health';
const MODELS = '/v1/models';

// ---------------------------------------------------------------------------------------
// Minimal typing of the parts of autocannon used here (it ships no types).
// ---------------------------------------------------------------------------------------
interface Histogram {
  average: number;
  mean: number;
  stddev: number;
  min: number;
  max: number;
  total: number;
  p50: number;
  p90: number;
  p97_5: number;
  p99: number;
  p99_9: number;
}
interface AutocannonResult {
  latency: Histogram;
  requests: Histogram;
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  statusCodeStats: Record<string, { count: number }>;
}
type Autocannon = (options: Record<string, unknown>) => Promise<AutocannonResult>;

// ---------------------------------------------------------------------------------------
// Sequential client (runs in a worker thread).
// ---------------------------------------------------------------------------------------
interface SequentialJob {
  port: number;
  apiKey: string;
  rounds: number;
  requestsPerRound: number;
  warmupRequests: number;
}
interface SequentialSamples {
  /** [round][endpoint] -> latencies in nanoseconds */
  rounds: { health: number[]; models: number[] }[];
  non2xx: { health: number; models: number };
  /** X-RateLimit-Remaining of the first and last /v1/models response. */
  rateLimitRemaining: { first: number; last: number };
}

async function sequentialClient(job: SequentialJob): Promise<SequentialSamples> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  const targets = {
    health: { path: HEALTH, headers: {} as Record<string, string> },
    models: { path: MODELS, headers: { authorization: `Bearer ${job.apiKey}` } },
  };
  const non2xx = { health: 0, models: 0 };
  const remaining: number[] = [];

  const once = (name: 'health' | 'models'): Promise<number> =>
    new Promise((resolve, reject) => {
      const started = process.hrtime.bigint();
      const req = http.request(
        { host: '127.0.0.1', port: job.port, method: 'GET', agent, ...targets[name] },
        (res) => {
          res.on('data', () => undefined);
          res.on('error', reject);
          res.on('end', () => {
            const elapsed = Number(process.hrtime.bigint() - started);
            const status = res.statusCode ?? 0;
            if (status < 200 || status > 299) non2xx[name] += 1;
            if (name === 'models') remaining.push(Number(res.headers['x-ratelimit-remaining']));
            resolve(elapsed);
          });
        },
      );
      req.setTimeout(5_000, () => req.destroy(new Error(`${name}: no answer within 5 s`)));
      req.on('error', reject);
      req.end();
    });

  for (let i = 0; i < job.warmupRequests; i += 1) {
    await once('health');
    await once('models');
  }
  non2xx.health = 0;
  non2xx.models = 0;
  const firstRemaining = remaining[0];

  const rounds: SequentialSamples['rounds'] = [];
  for (let r = 0; r < job.rounds; r += 1) {
    const round = { health: [] as number[], models: [] as number[] };
    // Strictly interleaved, in ABBA order, so that drift (GC, JIT, the key cache refreshing,
    // other processes on the machine) hits both endpoints alike.
    for (let i = 0; i < job.requestsPerRound; i += 1) {
      const order: ('health' | 'models')[] = i % 2 === 0 ? ['health', 'models'] : ['models', 'health'];
      for (const name of order) round[name].push(await once(name));
    }
    rounds.push(round);
  }
  agent.destroy();
  return { rounds, non2xx, rateLimitRemaining: { first: firstRemaining, last: remaining[remaining.length - 1] } };
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === 'sequential-client') {
  sequentialClient((workerData as { job: SequentialJob }).job).then(
    (samples) => parentPort!.postMessage({ ok: true, samples }),
    (error: unknown) => parentPort!.postMessage({ ok: false, error: String(error) }),
  );
}

function runSequentialClient(job: SequentialJob): Promise<SequentialSamples> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(__filename, { workerData: { role: 'sequential-client', job } });
    worker.once('message', (message: { ok: boolean; samples?: SequentialSamples; error?: string }) => {
      void worker.terminate();
      if (message.ok) resolve(message.samples!);
      else reject(new Error(`sequential client: ${message.error}`));
    });
    worker.once('error', reject);
  });
}

// ---------------------------------------------------------------------------------------
// Statistics and formatting.
// ---------------------------------------------------------------------------------------
/** Latencies measured in nanoseconds, reported in microseconds. */
function summarizeUs(nanoseconds: number[]) {
  const s = summarize(nanoseconds);
  return { n: s.n, meanUs: s.mean / 1_000, medianUs: s.p50 / 1_000, p90Us: s.p90 / 1_000, p99Us: s.p99 / 1_000, minUs: s.min / 1_000 };
}

const round1 = (v: number) => Math.round(v * 10) / 10;
const round3 = (v: number) => Math.round(v * 1000) / 1000;

// ---------------------------------------------------------------------------------------
// The run.
// ---------------------------------------------------------------------------------------
async function main({ log, startApp, startedAt, startLoad }: BenchContext): Promise<number> {
  // Loaded here rather than at the top, so that the sequential client's worker (this same file) does not load the app.
  const { WorkspacesService } = await import('../src/workspaces/workspaces.service');
  const { DEFAULT_CATALOG } = await import('../src/models/model-catalog');
  const { ModelDto } = await import('../src/models/dto/model.dto');
  const { ApiKeysService } = await import('../src/workspaces/api-keys.service');
  const { RateLimitService } = await import('../src/limits/rate-limit.service');
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const autocannon = require('autocannon') as Autocannon;

  const { app, baseUrl, port } = await startApp();
  const workspaces = app.get(WorkspacesService);
  const created = await workspaces.create({ name: 'Benchmark', tier: 'enterprise' });
  await workspaces.setTier(created.workspace.id, 'enterprise', SETTINGS.customRateLimitRpm);
  const apiKey = created.apiKey;
  log(`App on ${baseUrl}, PostgreSQL ready (${Date.now() - startedAt} ms)`);

  // --- Sanity: the limiter really counts, and does not block -----------------------------
  const probe = async () => {
    const res = await fetch(`${baseUrl}${MODELS}`, { headers: { authorization: `Bearer ${apiKey}` } });
    await res.arrayBuffer();
    return { status: res.status, limit: res.headers.get('x-ratelimit-limit'), remaining: Number(res.headers.get('x-ratelimit-remaining')) };
  };
  const [a, b] = [await probe(), await probe()];
  if (a.status !== 200 || b.status !== 200 || a.limit !== String(SETTINGS.customRateLimitRpm) || b.remaining !== a.remaining - 1) {
    throw new Error(`Rate-limit sanity check failed: ${JSON.stringify({ a, b })}`);
  }
  const health = await fetch(`${baseUrl}${HEALTH}`);
  const healthHasRateHeaders = health.headers.has('x-ratelimit-limit');
  await health.arrayBuffer();
  if (health.status !== 200 || healthHasRateHeaders) throw new Error('/health is not a plain public 200');

  // --- autocannon: throughput and latency under load -----------------------------------
  const cannon = async (urlPath: string, seconds: number): Promise<AutocannonResult> =>
    autocannon({
      url: `${baseUrl}${urlPath}`,
      headers: urlPath === MODELS ? { authorization: `Bearer ${apiKey}` } : {},
      connections: SETTINGS.connections,
      duration: seconds,
      timeout: 5,
      workers: 1, // the client on its own thread, off the server's event loop
    });
  log(`Warm-up: ${SETTINGS.warmupSeconds} s per endpoint (discarded)`);
  await cannon(HEALTH, SETTINGS.warmupSeconds);
  await cannon(MODELS, SETTINGS.warmupSeconds);

  interface CannonRow {
    endpoint: string;
    round: number;
    reqPerSec: number;
    totalRequests: number;
    latencyMeanMs: number;
    p50Ms: number;
    p90Ms: number;
    p99Ms: number;
    maxMs: number;
    serverUsPerRequest: number;
    non2xx: number;
    errors: number;
    timeouts: number;
    statusCodes: Record<string, number>;
    /** 1-minute load average of the machine right after the run (other processes skew results). */
    loadAverage1m: number;
  }
  const cannonRows: CannonRow[] = [];
  for (let round = 1; round <= SETTINGS.rounds; round += 1) {
    for (const endpoint of [HEALTH, MODELS]) {
      log(`autocannon ${endpoint}, round ${round}: ${SETTINGS.connections} connections, ${SETTINGS.durationSeconds} s`);
      const r = await cannon(endpoint, SETTINGS.durationSeconds);
      const reqPerSec = r.requests.total / r.duration;
      cannonRows.push({
        endpoint,
        round,
        reqPerSec: round1(reqPerSec),
        totalRequests: r.requests.total,
        latencyMeanMs: round3(r.latency.average),
        p50Ms: r.latency.p50,
        p90Ms: r.latency.p90,
        p99Ms: r.latency.p99,
        maxMs: r.latency.max,
        // The server thread is saturated at a fixed concurrency: its time per request is 1/throughput.
        serverUsPerRequest: round1(1e6 / reqPerSec),
        non2xx: r.non2xx,
        errors: r.errors,
        timeouts: r.timeouts,
        statusCodes: Object.fromEntries(Object.entries(r.statusCodeStats).map(([code, s]) => [code, s.count])),
        loadAverage1m: round1(os.loadavg()[0]),
      });
    }
  }

  // --- Sequential: one request in flight, microsecond timing ---------------------------
  log('Sequential keep-alive client: one request at a time, endpoints interleaved');
  const sequential = await runSequentialClient({ port, apiKey, ...SETTINGS.sequential });

  const remainingAfter = (await probe()).remaining;

  // --- How much of the difference is just the bigger body of /v1/models? --------------
  const bodyCost = (build: () => unknown, iterations = 200_000) => {
    for (let i = 0; i < 20_000; i += 1) JSON.stringify(build());
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iterations; i += 1) JSON.stringify(build());
    return Number(process.hrtime.bigint() - t0) / iterations / 1_000;
  };
  const modelsBodyUs = bodyCost(() => ({ object: 'list', data: DEFAULT_CATALOG.map(ModelDto.from) }));
  const healthBodyUs = bodyCost(() => ({ status: 'ok' }));
  const modelsBodyBytes = JSON.stringify({ object: 'list', data: DEFAULT_CATALOG.map(ModelDto.from) }).length;

  // --- The two services the guards call, without HTTP or Nest around them ------------
  const asyncCost = async (call: () => Promise<unknown>, iterations = 100_000) => {
    for (let i = 0; i < 10_000; i += 1) await call();
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < iterations; i += 1) await call();
    return Number(process.hrtime.bigint() - t0) / iterations / 1_000;
  };
  const apiKeys = app.get(ApiKeysService);
  const rateLimits = app.get(RateLimitService);
  // A cached key (the state of nearly every request); a separate tracker, so the workspace's count is untouched.
  const authenticateUs = await asyncCost(() => apiKeys.authenticate(apiKey));
  const consumeUs = await asyncCost(() => rateLimits.consume('bench:micro', SETTINGS.customRateLimitRpm));

  // --- Report --------------------------------------------------------------------------
  const mean = (rows: CannonRow[], pick: (r: CannonRow) => number) => rows.reduce((s, r) => s + pick(r), 0) / rows.length;
  const healthRows = cannonRows.filter((r) => r.endpoint === HEALTH);
  const modelRows = cannonRows.filter((r) => r.endpoint === MODELS);
  const cannonOverhead = {
    p50DifferenceMs: round3(mean(modelRows, (r) => r.p50Ms) - mean(healthRows, (r) => r.p50Ms)),
    meanLatencyDifferenceMs: round3(mean(modelRows, (r) => r.latencyMeanMs) - mean(healthRows, (r) => r.latencyMeanMs)),
    serverUsPerRequestDifference: round1(mean(modelRows, (r) => r.serverUsPerRequest) - mean(healthRows, (r) => r.serverUsPerRequest)),
  };

  const seqRounds = sequential.rounds.map((r, i) => ({ round: i + 1, health: summarizeUs(r.health), models: summarizeUs(r.models) }));
  const seqAll = {
    health: summarizeUs(sequential.rounds.flatMap((r) => r.health)),
    models: summarizeUs(sequential.rounds.flatMap((r) => r.models)),
  };
  const seqOverhead = {
    medianDifferenceUs: round1(seqAll.models.medianUs - seqAll.health.medianUs),
    meanDifferenceUs: round1(seqAll.models.meanUs - seqAll.health.meanUs),
    perRoundMedianDifferenceUs: seqRounds.map((r) => round1(r.models.medianUs - r.health.medianUs)),
  };
  const modelsNon2xx = modelRows.reduce((s, r) => s + r.non2xx, 0) + sequential.non2xx.models;
  const healthNon2xx = healthRows.reduce((s, r) => s + r.non2xx, 0) + sequential.non2xx.health;
  const connectionErrors = cannonRows.reduce((s, r) => s + r.errors + r.timeouts, 0);
  const valid = modelsNon2xx === 0 && healthNon2xx === 0 && connectionErrors === 0;
  const modelsRequestsCounted =
    modelRows.reduce((s, r) => s + r.totalRequests, 0) + sequential.rounds.reduce((s, r) => s + r.models.length, 0);
  const targetMet = seqOverhead.medianDifferenceUs / 1000 < TARGET_P50_OVERHEAD_MS;

  log('');
  log(`autocannon: ${SETTINGS.connections} connections, ${SETTINGS.durationSeconds} s per run, rounds alternate /health and /v1/models`);
  log('(latencies are autocannon histogram values: whole milliseconds; "server us/req" = 1e6 / req/s)');
  log(
    table(
      ['endpoint', 'round', 'req/s', 'mean ms', 'p50 ms', 'p90 ms', 'p99 ms', 'max ms', 'server us/req', 'non-2xx', 'errors', 'load 1m'],
      cannonRows.map((r) => [r.endpoint, r.round, r.reqPerSec, r.latencyMeanMs, r.p50Ms, r.p90Ms, r.p99Ms, r.maxMs, r.serverUsPerRequest, r.non2xx, r.errors + r.timeouts, r.loadAverage1m]),
    ),
  );
  log(
    `/v1/models minus /health: p50 ${cannonOverhead.p50DifferenceMs} ms (integer-ms histogram), ` +
      `mean latency ${cannonOverhead.meanLatencyDifferenceMs} ms, server time per request ${cannonOverhead.serverUsPerRequestDifference} us`,
  );
  log('');
  log('Sequential: one keep-alive connection, one request in flight, timed in microseconds (client on a worker thread)');
  log(
    table(
      ['endpoint', 'round', 'n', 'mean us', 'median us', 'p90 us', 'p99 us', 'min us'],
      [
        ...seqRounds.flatMap((r) => [
          [HEALTH, r.round, r.health.n, round1(r.health.meanUs), round1(r.health.medianUs), round1(r.health.p90Us), round1(r.health.p99Us), round1(r.health.minUs)],
          [MODELS, r.round, r.models.n, round1(r.models.meanUs), round1(r.models.medianUs), round1(r.models.p90Us), round1(r.models.p99Us), round1(r.models.minUs)],
        ]),
        [HEALTH, 'all', seqAll.health.n, round1(seqAll.health.meanUs), round1(seqAll.health.medianUs), round1(seqAll.health.p90Us), round1(seqAll.health.p99Us), round1(seqAll.health.minUs)],
        [MODELS, 'all', seqAll.models.n, round1(seqAll.models.meanUs), round1(seqAll.models.medianUs), round1(seqAll.models.p90Us), round1(seqAll.models.p99Us), round1(seqAll.models.minUs)],
      ],
    ),
  );
  log(
    `/v1/models minus /health: median ${seqOverhead.medianDifferenceUs} us (per round: ${seqOverhead.perRoundMedianDifferenceUs.join(', ')}), ` +
      `mean ${seqOverhead.meanDifferenceUs} us`,
  );
  log(
    `Of which building + serializing the bigger body (${modelsBodyBytes} bytes vs 15): ~${round1(modelsBodyUs - healthBodyUs)} us ` +
      `(in-process JSON.stringify, ${round1(modelsBodyUs)} vs ${round1(healthBodyUs)} us)`,
  );
  log(
    `In-process, no HTTP: ApiKeysService.authenticate (cached key) ${round3(authenticateUs)} us, ` +
      `RateLimitService.consume (memory storage) ${round3(consumeUs)} us per call`,
  );
  log('');
  // Between the first warm-up response and the last measured one, every /v1/models request must have been counted
  // (unless the 60 s window happened to roll over in between, which makes Remaining jump back up).
  const expectedDecrement = SETTINGS.sequential.warmupRequests - 1 + SETTINGS.sequential.rounds * SETTINGS.sequential.requestsPerRound;
  const observedDecrement = sequential.rateLimitRemaining.first - sequential.rateLimitRemaining.last;
  log(
    `Rate limiter: limit ${SETTINGS.customRateLimitRpm}/min; during the sequential run X-RateLimit-Remaining went down by ` +
      `${observedDecrement} for ${expectedDecrement} requests ` +
      `(${observedDecrement === expectedDecrement ? 'every request counted' : 'the 60 s window rolled over in between'}); ` +
      `${remainingAfter} remaining at the end`,
  );
  log(`/v1/models requests measured: ${modelsRequestsCounted}; non-2xx: ${modelsNon2xx}; /health non-2xx: ${healthNon2xx}; connection errors: ${connectionErrors}`);
  log(valid ? 'Benchmark VALID (every response 2xx)' : 'Benchmark INVALID: some responses were not 2xx or failed');
  log(
    `Target: auth + rate limiting add < ${TARGET_P50_OVERHEAD_MS} ms at p50 -> measured ${round3(seqOverhead.medianDifferenceUs / 1000)} ms ` +
      `(sequential median difference): ${targetMet ? 'MET' : 'NOT MET'}`,
  );

  const results = {
    settings: SETTINGS,
    valid,
    target: { p50OverheadMs: TARGET_P50_OVERHEAD_MS, measuredMs: round3(seqOverhead.medianDifferenceUs / 1000), met: targetMet },
    autocannon: { runs: cannonRows, overhead: cannonOverhead },
    sequential: {
      rounds: seqRounds,
      all: seqAll,
      overhead: seqOverhead,
      non2xx: sequential.non2xx,
    },
    bodySerialization: { modelsUs: round3(modelsBodyUs), healthUs: round3(healthBodyUs), modelsBytes: modelsBodyBytes },
    inProcessUs: { authenticateCachedKey: round3(authenticateUs), rateLimitConsume: round3(consumeUs) },
    loadAverage: { start: startLoad, end: os.loadavg().map(round1) },
    rateLimiter: {
      limitRpm: SETTINGS.customRateLimitRpm,
      remaining: { ...sequential.rateLimitRemaining, end: remainingAfter },
      sequentialRun: { expectedDecrement, observedDecrement },
    },
    counts: { modelsRequests: modelsRequestsCounted, modelsNon2xx, healthNon2xx, connectionErrors },
    wallSeconds: round1((Date.now() - startedAt) / 1000),
  };
  const file = await writeResults('overhead', results);
  log(`Results written to ${file} (${results.wallSeconds} s)`);
  return valid ? 0 : 2;
}

// The sequential client's worker thread runs this file too; only the main thread runs the benchmark.
if (isMainThread) runBench('overhead', { hardTimeoutMs: SETTINGS.hardTimeoutMs }, main);
