/**
 * The load generators of the chat benchmark (bench/chat.ts), each off the main thread so
 * that the client never shares an event loop with the orchestration:
 *
 * - `saturate()`: autocannon on its own worker thread (`workers: 1`), a fixed number of
 *   connections each sending its next request when the previous answer ended (closed loop):
 *   throughput, and latency in autocannon's whole milliseconds.
 * - `openLoop()`: our own client on a worker thread that sends a request every 1/rate
 *   seconds whatever the answers (open loop), timed with `process.hrtime.bigint()` from the
 *   moment the request was SCHEDULED to the last byte of the answer, so a server that falls
 *   behind shows its queueing in the latency instead of slowing the client down (the
 *   "coordinated omission" of closed-loop clients). A send that the timer fires late counts
 *   as latency too, alike for every target, so it cancels in "service minus floor".
 *
 * Only Node's own modules at the top: the worker thread loads this file again.
 */
import * as http from 'node:http';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';

export interface Target {
  /** http://127.0.0.1:port */
  baseUrl: string;
  path: string;
  headers: Record<string, string>;
  body: string;
}

// ---------------------------------------------------------------------------------------
// Closed loop: autocannon.
// ---------------------------------------------------------------------------------------
interface AutocannonResult {
  latency: { p50: number; p99: number; average: number; max: number };
  requests: { total: number; sent: number };
  duration: number;
  errors: number;
  timeouts: number;
  non2xx: number;
  '2xx': number;
  statusCodeStats: Record<string, { count: number }>;
}
type Autocannon = (options: Record<string, unknown>) => Promise<AutocannonResult>;

export interface SaturatedRun {
  /** The warm-up run before it, when there was one (its requests reached the server too). */
  warmup?: SaturatedRun;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  meanMs: number;
  maxMs: number;
  /** Answers that ended within the duration. */
  completed: number;
  /** Requests written, including those still in flight at the cut-off (the server may still serve them). */
  sent: number;
  ok2xx: number;
  non2xx: number;
  /** Connection errors and timeouts. */
  errors: number;
  statusCodes: Record<string, number>;
  /** CPU by process group during the run, in % of one core (bench/chat.ts fills it in; see cpuDuring). */
  cpuPercent?: Record<'gateway' | 'postgres' | 'fake' | 'load', number | undefined>;
}

/**
 * `connections` connections against the target for `seconds`. With several `targets`
 * (e.g. one API key each), every connection sends them in turn.
 */
export async function saturate(targets: Target[], connections: number, seconds: number): Promise<SaturatedRun> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports
  const autocannon = require('autocannon') as Autocannon;
  const [first] = targets;
  const r = await autocannon({
    url: `${first.baseUrl}${first.path}`,
    method: 'POST',
    connections,
    duration: seconds,
    timeout: 30,
    workers: 1,
    requests: targets.map((t) => ({ method: 'POST', path: t.path, headers: { 'content-type': 'application/json', ...t.headers }, body: t.body })),
  });
  return {
    reqPerSec: r['2xx'] / r.duration,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    meanMs: r.latency.average,
    maxMs: r.latency.max,
    completed: r.requests.total,
    sent: r.requests.sent,
    ok2xx: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors + r.timeouts,
    statusCodes: Object.fromEntries(Object.entries(r.statusCodeStats).map(([code, s]) => [code, s.count])),
  };
}

// ---------------------------------------------------------------------------------------
// Open loop: a request every 1/rate s, microsecond timing (runs in a worker thread).
// ---------------------------------------------------------------------------------------
export interface OpenLoopJob {
  target: Target;
  ratePerSecond: number;
  /** Sent at the same rate before the measurement; their timings are thrown away. */
  warmupSeconds: number;
  durationSeconds: number;
  timeoutMs: number;
}

export interface OpenLoopResult {
  /**
   * Latency of each measured request, scheduled send to last byte, in nanoseconds; for a
   * request that failed or was abandoned, the time until then (a lower bound).
   */
  latenciesNs: number[];
  /** When each of them was scheduled, in nanoseconds after the first measured send (same order). */
  sentAtNs: number[];
  /** How late the timer fired each measured send, in nanoseconds (part of the latency above). */
  sendLagNs: number[];
  /** Every request, warm-up included (what the server saw). */
  sent: number;
  /** 2xx answers, warm-up included (each must have its usage record). */
  totalOk2xx: number;
  /** The rest counts measured requests only. */
  ok2xx: number;
  non2xx: number;
  errors: number;
  statusCodes: Record<string, number>;
  /** The start of the first answer of each non-2xx status, to tell why. */
  sampleBodies: Record<string, string>;
  /** Failed requests by error message ('timeout': abandoned after timeoutMs). */
  errorCounts: Record<string, number>;
  /** Time from the first measured send to the last answer, in seconds. */
  wallSeconds: number;
}

async function openLoopClient(job: OpenLoopJob): Promise<OpenLoopResult> {
  const url = new URL(job.target.baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const body = Buffer.from(job.target.body);
  const headers = { 'content-type': 'application/json', 'content-length': String(body.length), ...job.target.headers };
  const intervalNs = BigInt(Math.round(1e9 / job.ratePerSecond));
  const warmupCount = Math.round(job.warmupSeconds * job.ratePerSecond);
  const total = warmupCount + Math.round(job.durationSeconds * job.ratePerSecond);

  const result: OpenLoopResult = { latenciesNs: [], sentAtNs: [], sendLagNs: [], sent: 0, totalOk2xx: 0, ok2xx: 0, non2xx: 0, errors: 0, statusCodes: {}, sampleBodies: {}, errorCounts: {}, wallSeconds: 0 };
  let outstanding = 0;
  let fired = () => 0;
  let lastAnswerAt = 0n;
  const start = process.hrtime.bigint() + 10_000_000n;
  const measuredFrom = start + BigInt(warmupCount) * intervalNs;

  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (fired() === total && outstanding === 0) {
        agent.destroy();
        result.wallSeconds = Number(lastAnswerAt - measuredFrom) / 1e9;
        resolve(result);
      }
    };
    const fire = (index: number, scheduled: bigint) => {
      const measured = index >= warmupCount;
      if (measured) result.sendLagNs.push(Number(process.hrtime.bigint() - scheduled));
      outstanding += 1;
      result.sent += 1;
      let settled = false;
      const done = (status: number | undefined, text = '') => {
        if (settled) return;
        settled = true;
        outstanding -= 1;
        lastAnswerAt = process.hrtime.bigint();
        if (status !== undefined && status >= 200 && status < 300) result.totalOk2xx += 1;
        if (measured) {
          if (status === undefined) {
            // Abandoned (or failed) requests keep their place in the percentiles, with the time
            // waited so far: leaving them out would report the survivors of an overload only.
            result.errors += 1;
            result.errorCounts[text] = (result.errorCounts[text] ?? 0) + 1;
            result.latenciesNs.push(Number(lastAnswerAt - scheduled));
            result.sentAtNs.push(Number(scheduled - measuredFrom));
          }
          else {
            result.statusCodes[status] = (result.statusCodes[status] ?? 0) + 1;
            if (status >= 200 && status < 300) result.ok2xx += 1;
            else {
              result.non2xx += 1;
              result.sampleBodies[status] ??= text.slice(0, 300);
            }
            result.latenciesNs.push(Number(lastAnswerAt - scheduled));
            result.sentAtNs.push(Number(scheduled - measuredFrom));
          }
        }
        finishIfDone();
      };
      const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: job.target.path, headers, agent }, (res) => {
        const status = res.statusCode ?? 0;
        let text = '';
        res.on('data', (chunk: Buffer) => {
          if (status >= 300 && text.length < 300) text += chunk.toString('utf8');
        });
        res.on('end', () => done(status, text));
        res.on('error', (error) => done(undefined, error.message));
      });
      req.setTimeout(job.timeoutMs, () => req.destroy(new Error('timeout')));
      req.on('error', (error) => done(undefined, error.message));
      req.end(body);
    };
    fired = fireOnSchedule(start, intervalNs, total, fire, finishIfDone);
  });
}

/**
 * Calls `fire(i, scheduledAt)` for i = 0 .. total - 1 at `start + i x intervalNs` (monotonic
 * clock): every send whose time has come, then a sleep until the next one. It never waits for
 * answers (an open loop). Calls `allFired` after the last; returns how many have fired so far.
 */
export function fireOnSchedule(start: bigint, intervalNs: bigint, total: number, fire: (index: number, scheduled: bigint) => void, allFired: () => void): () => number {
  let count = 0;
  const tick = () => {
    const now = process.hrtime.bigint();
    while (count < total) {
      const scheduled = start + BigInt(count) * intervalNs;
      if (scheduled > now) break;
      fire(count, scheduled);
      count += 1;
    }
    if (count < total) {
      const next = start + BigInt(count) * intervalNs;
      setTimeout(tick, Math.max(0, Number(next - process.hrtime.bigint()) / 1e6));
    } else allFired();
  };
  setTimeout(tick, Math.max(0, Number(start - process.hrtime.bigint()) / 1e6));
  return () => count;
}

if (!isMainThread && (workerData as { role?: string } | null)?.role === 'chat-open-loop') {
  openLoopClient((workerData as { job: OpenLoopJob }).job).then(
    (result) => parentPort!.postMessage({ ok: true, result }),
    (error: unknown) => parentPort!.postMessage({ ok: false, error: String(error) }),
  );
}

/** Runs the open-loop client on a worker thread and answers what it measured. */
export function openLoop(job: OpenLoopJob): Promise<OpenLoopResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(__filename, { workerData: { role: 'chat-open-loop', job } });
    worker.once('message', (message: { ok: boolean; result?: OpenLoopResult; error?: string }) => {
      void worker.terminate();
      if (message.ok) resolve(message.result!);
      else reject(new Error(`open-loop client: ${message.error}`));
    });
    worker.once('error', reject);
  });
}

/** A run of slow requests sent close together: one stall of the server delays every request sent during it. */
export interface SlowBurst {
  /** When the first of them was sent, in seconds after the first measured send. */
  atSeconds: number;
  count: number;
  minMs: number;
  maxMs: number;
}

/**
 * The requests at or above the 99th percentile (as `summarize` takes it: the sorted sample at
 * index floor(0.99 x n)), grouped by when they were sent: requests sent within `gapMs` of the
 * one before fall in the same burst. One burst of twenty says one stall; twenty bursts of one
 * say a cost spread over the run.
 */
export function slowestBursts(run: Pick<OpenLoopResult, 'latenciesNs' | 'sentAtNs'>, gapMs = 100): SlowBurst[] {
  const n = run.latenciesNs.length;
  if (n === 0) return [];
  const threshold = [...run.latenciesNs].sort((a, b) => a - b)[Math.floor(0.99 * n)];
  const slow = run.latenciesNs
    .map((latency, i) => ({ latency, sentAt: run.sentAtNs[i] }))
    .filter((r) => r.latency >= threshold)
    .sort((a, b) => a.sentAt - b.sentAt);
  const bursts: SlowBurst[] = [];
  let last = -Infinity;
  for (const { latency, sentAt } of slow) {
    const ms = Math.round(latency / 1e4) / 100;
    const burst = bursts.at(-1);
    if (burst && sentAt - last <= gapMs * 1e6) {
      burst.count += 1;
      burst.minMs = Math.min(burst.minMs, ms);
      burst.maxMs = Math.max(burst.maxMs, ms);
    } else bursts.push({ atSeconds: Math.round(sentAt / 1e6) / 1e3, count: 1, minMs: ms, maxMs: ms });
    last = sentAt;
  }
  return bursts;
}
