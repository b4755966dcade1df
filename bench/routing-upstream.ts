/**
 * The fake upstreams of the routing benchmark (bench/routing.ts): several deployments of one
 * model, each a port of this one process, each with a fault mode that can be set at once or
 * on a schedule. In mode `ok` a request goes to chat-upstream.ts's handler, unchanged: the
 * same fast answers as the chat benchmark's floor.
 *
 *   node dist/bench/routing-upstream.js <count>     (prints {"ports": [...]} on its first line)
 *
 * Modes: `ok`; `500` (HTTP 500 with OpenAI's error body); `429` (with `Retry-After`, OpenAI's
 * rate-limit body); `hang` (reads the request and never answers: a timeout before the first
 * byte). Control, on any port, about that port's deployment:
 *
 * - POST /__control/mode  {"mode": "500"}: from now on, until the next control request;
 * - POST /__control/schedule  {"t0": <epoch ms>, "phases": [{"mode": "500", "from": 20, "to": 40}]}:
 *   the mode of a phase between t0 + from and t0 + to seconds, `ok` otherwise; the counts start
 *   again, by 10 s window after t0;
 * - GET /__control/stats: requests received by window and by what they were answered.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { handle as answer } from './chat-upstream';

export const FAULT_MODES = ['ok', '500', '429', 'hang'] as const;
export type FaultMode = (typeof FAULT_MODES)[number];

export interface Phase {
  mode: FaultMode;
  /** Seconds after t0. */
  from: number;
  to: number;
}

/** What one deployment received: per 10 s window after t0 (negative before it), per mode it answered in. */
export interface DeploymentStats {
  windowSeconds: number;
  t0: number;
  windows: Record<string, Partial<Record<FaultMode, number>>>;
}

const WINDOW_SECONDS = 10;
/** What the fake tells a client to wait after a 429, in seconds. */
export const RETRY_AFTER_SECONDS = 10;

const json = (value: unknown) => Buffer.from(JSON.stringify(value));
const SERVER_ERROR = json({ error: { message: 'The server had an error while processing your request.', type: 'server_error', param: null, code: null } });
const RATE_LIMITED = json({
  error: { message: 'Rate limit reached for gpt-4o-mini on requests per min (RPM): Limit 500.', type: 'requests', param: null, code: 'rate_limit_exceeded' },
});

class Deployment {
  private mode: FaultMode = 'ok';
  private t0 = Date.now();
  private phases: Phase[] = [];
  private windows = new Map<number, Record<string, number>>();

  modeNow(now: number): FaultMode {
    const at = (now - this.t0) / 1000;
    for (const phase of this.phases) if (at >= phase.from && at < phase.to) return phase.mode;
    return this.mode;
  }

  count(now: number, mode: FaultMode): void {
    const window = Math.floor((now - this.t0) / 1000 / WINDOW_SECONDS);
    let counts = this.windows.get(window);
    if (!counts) this.windows.set(window, (counts = {}));
    counts[mode] = (counts[mode] ?? 0) + 1;
  }

  setMode(mode: FaultMode): void {
    this.mode = mode;
    this.phases = [];
  }

  schedule(t0: number, phases: Phase[]): void {
    this.mode = 'ok';
    this.t0 = t0;
    this.phases = phases;
    this.windows.clear();
  }

  stats(): DeploymentStats {
    return { windowSeconds: WINDOW_SECONDS, t0: this.t0, windows: Object.fromEntries(this.windows) };
  }
}

function send(res: ServerResponse, status: number, body: Buffer, headers: Record<string, string | number> = {}): void {
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': body.length, ...headers });
  res.end(body);
}

function readJson(req: IncomingMessage): Promise<unknown> {
  return new Promise((resolve, reject) => {
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (chunk: string) => (body += chunk));
    req.on('end', () => {
      try {
        resolve(JSON.parse(body || '{}'));
      } catch (error) {
        reject(error as Error);
      }
    });
  });
}

function control(deployment: Deployment, req: IncomingMessage, res: ServerResponse): void {
  if (req.method === 'GET' && req.url === '/__control/stats') {
    req.resume();
    return send(res, 200, json(deployment.stats()));
  }
  readJson(req).then(
    (body) => {
      const b = body as { mode?: FaultMode; t0?: number; phases?: Phase[] };
      if (req.url === '/__control/mode' && FAULT_MODES.includes(b.mode!)) deployment.setMode(b.mode!);
      else if (req.url === '/__control/schedule' && typeof b.t0 === 'number' && Array.isArray(b.phases) && b.phases.every((p) => FAULT_MODES.includes(p.mode))) {
        deployment.schedule(b.t0, b.phases);
      } else return send(res, 400, json({ error: `unknown control request ${req.method} ${req.url}` }));
      send(res, 200, json({ ok: true }));
    },
    (error: unknown) => send(res, 400, json({ error: String(error) })),
  );
}

function handler(deployment: Deployment) {
  return (req: IncomingMessage, res: ServerResponse): void => {
    if (req.url?.startsWith('/__control/')) return control(deployment, req, res);
    if (req.method !== 'POST') return answer(req, res);
    const now = Date.now();
    const mode = deployment.modeNow(now);
    deployment.count(now, mode);
    if (mode === 'ok') return answer(req, res);
    req.resume();
    if (mode === '500') return send(res, 500, SERVER_ERROR);
    if (mode === '429') return send(res, 429, RATE_LIMITED, { 'retry-after': RETRY_AFTER_SECONDS });
    // hang: the request is read and never answered; the socket goes when the client gives up.
  };
}

/** Starts `count` deployments on 127.0.0.1, each on a free port. */
export async function startRoutingUpstreams(count: number): Promise<number[]> {
  const ports: number[] = [];
  for (let i = 0; i < count; i += 1) {
    const server = createServer(handler(new Deployment()));
    // Clients keep their connections for the whole run; Node's default closes idle ones after 5 s.
    server.keepAliveTimeout = 120_000;
    server.headersTimeout = 130_000;
    // A hung request must outlive any client's timeout: the client decides when it has waited enough.
    server.requestTimeout = 0;
    ports.push(
      await new Promise<number>((resolve, reject) => {
        server.once('error', reject);
        server.listen(0, '127.0.0.1', () => resolve((server.address() as AddressInfo).port));
      }),
    );
  }
  return ports;
}

if (require.main === module) {
  startRoutingUpstreams(Number(process.argv[2] ?? 3)).then(
    (ports) => process.stdout.write(`${JSON.stringify({ ports })}\n`),
    (error: unknown) => {
      console.error(`routing-upstream: ${String(error)}`);
      process.exit(1);
    },
  );
}
