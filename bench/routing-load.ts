/**
 * The open-loop client of the routing benchmark (bench/routing.ts), on a worker thread: as
 * chat-load.ts's `openLoop()` (a request every 1/rate s whatever the answers, timed with
 * `process.hrtime.bigint()` from its SCHEDULED send to the last byte), but it keeps every
 * request apart (when it was sent, plain or streamed, its status, and the `x_service` of its
 * answer: how many upstream attempts it took and which deployment answered), and it starts
 * at a wall-clock time given by the caller, so that the fakes' fault schedule and the load
 * share one t0.
 *
 * Only Node's own modules at the top: the worker thread loads this file again.
 */
import * as http from 'node:http';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { fireOnSchedule } from './chat-load';

export interface RoutingLoadJob {
  baseUrl: string;
  path: string;
  headers: Record<string, string>;
  body: string;
  /** Sent instead of `body` by every `streamEvery`-th request (0: none). */
  streamBody: string;
  streamEvery: number;
  ratePerSecond: number;
  /** Date.now() of the first measured send; the warm-up's sends come before it. */
  t0: number;
  warmupSeconds: number;
  durationSeconds: number;
  timeoutMs: number;
}

/** One measured request. */
export interface RequestRecord {
  /** Scheduled send, in ms after t0. */
  atMs: number;
  latencyNs: number;
  stream: boolean;
  /** HTTP status; undefined when the request failed or was abandoned (`error`). */
  status?: number;
  error?: string;
  /** From the answer's x_service (the last chunk's when streamed); undefined when absent. */
  attempts?: number;
  deployment?: string | null;
  /** The start of a non-2xx answer. */
  sample?: string;
}

export interface RoutingLoadResult {
  records: RequestRecord[];
  /** Every request, warm-up included (what the server saw), and the 2xx answers among them. */
  sent: number;
  totalOk2xx: number;
  /** How late the timer fired the measured sends, p99, in ns. */
  sendLagP99Ns: number;
}

const ATTEMPTS = /"x_service"\s*:\s*\{[^}]*?"attempts"\s*:\s*(\d+)/;
const DEPLOYMENT = /"x_service"\s*:\s*\{[^}]*?"deployment"\s*:\s*(null|"([^"]*)")/;

async function client(job: RoutingLoadJob): Promise<RoutingLoadResult> {
  const url = new URL(job.baseUrl);
  const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity });
  const bodies = [job.body, job.streamBody].map((b) => Buffer.from(b));
  const intervalNs = BigInt(Math.round(1e9 / job.ratePerSecond));
  const warmupCount = Math.round(job.warmupSeconds * job.ratePerSecond);
  const total = warmupCount + Math.round(job.durationSeconds * job.ratePerSecond);
  // t0 on this thread's monotonic clock; the first send is the warm-up's.
  const t0Ns = process.hrtime.bigint() + BigInt(Math.round((job.t0 - Date.now()) * 1e6));
  const start = t0Ns - BigInt(warmupCount) * intervalNs;

  const result: RoutingLoadResult = { records: [], sent: 0, totalOk2xx: 0, sendLagP99Ns: 0 };
  const lags: number[] = [];
  let outstanding = 0;
  let fired = () => 0;

  return new Promise((resolve) => {
    const finishIfDone = () => {
      if (fired() === total && outstanding === 0) {
        agent.destroy();
        lags.sort((a, b) => a - b);
        result.sendLagP99Ns = lags[Math.floor(0.99 * lags.length)] ?? 0;
        resolve(result);
      }
    };
    const fire = (index: number, scheduled: bigint) => {
      const measured = index >= warmupCount;
      if (measured) lags.push(Number(process.hrtime.bigint() - scheduled));
      const stream = job.streamEvery > 0 && index % job.streamEvery === job.streamEvery - 1;
      const body = bodies[stream ? 1 : 0];
      outstanding += 1;
      result.sent += 1;
      let settled = false;
      const done = (status: number | undefined, text: string) => {
        if (settled) return;
        settled = true;
        outstanding -= 1;
        const latencyNs = Number(process.hrtime.bigint() - scheduled);
        const ok = status !== undefined && status >= 200 && status < 300;
        if (ok) result.totalOk2xx += 1;
        if (measured) {
          const record: RequestRecord = { atMs: Number(scheduled - t0Ns) / 1e6, latencyNs, stream };
          if (status === undefined) record.error = text;
          else {
            record.status = status;
            const attempts = ATTEMPTS.exec(text);
            if (attempts) record.attempts = Number(attempts[1]);
            const deployment = DEPLOYMENT.exec(text);
            if (deployment) record.deployment = deployment[2] ?? null;
            if (!ok) record.sample = text.slice(0, 300);
          }
          result.records.push(record);
        }
        finishIfDone();
      };
      const headers = { 'content-type': 'application/json', 'content-length': String(body.length), ...job.headers };
      const req = http.request({ host: url.hostname, port: url.port, method: 'POST', path: job.path, headers, agent }, (res) => {
        const status = res.statusCode ?? 0;
        // A plain answer is small; of a stream only the end holds x_service.
        let text = '';
        res.setEncoding('utf8');
        res.on('data', (chunk: string) => {
          text = stream && text.length > 8_000 ? text.slice(-4_000) + chunk : text + chunk;
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

if (!isMainThread && (workerData as { role?: string } | null)?.role === 'routing-open-loop') {
  client((workerData as { job: RoutingLoadJob }).job).then(
    (result) => parentPort!.postMessage({ ok: true, result }),
    (error: unknown) => parentPort!.postMessage({ ok: false, error: String(error) }),
  );
}

/** Runs the client on a worker thread and answers every measured request. */
export function routingLoad(job: RoutingLoadJob): Promise<RoutingLoadResult> {
  return new Promise((resolve, reject) => {
    const worker = new Worker(__filename, { workerData: { role: 'routing-open-loop', job } });
    worker.once('message', (message: { ok: boolean; result?: RoutingLoadResult; error?: string }) => {
      void worker.terminate();
      if (message.ok) resolve(message.result!);
      else reject(new Error(`routing open-loop client: ${message.error}`));
    });
    worker.once('error', reject);
  });
}
