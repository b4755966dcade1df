/**
 * What every benchmark needs around its measurements: its own embedded PostgreSQL in a
 * temporary directory, migrated; the real app when it wants one; and everything stopped
 * and removed again at the end, on an error, on Ctrl-C or after a hard timeout, so that a
 * run never leaves a postgres process or a data directory behind.
 *
 * Only Node's own modules are imported at the top: overhead.ts loads this file again in
 * its client's worker thread, which must not load the app.
 */
import type { INestApplication, INestApplicationContext } from '@nestjs/common';
import { execFileSync } from 'node:child_process';
import { chmod, mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import type { AddressInfo } from 'node:net';
import { request } from 'node:http';
import * as os from 'node:os';
import * as path from 'node:path';
import type { AppConfig } from '../src/config/app-config';

export interface BenchContext {
  databaseUrl: string;
  log(message: string): void;
  /** Runs at the end, in reverse order of registration (what was started last stops first). */
  onCleanup(cleanup: () => Promise<unknown>): void;
  /** Date.now() before PostgreSQL started, for wall times. */
  startedAt: number;
  /** os.loadavg() at the start, rounded: other processes on the machine skew the numbers. */
  startLoad: number[];
  /** The app as production builds it (createApp()), listening on a free loopback port. */
  startApp(): Promise<{ app: INestApplication; config: AppConfig; baseUrl: string; port: number }>;
}

/**
 * Runs `body` and exits the process with the code it returns (1 if it throws, or on a
 * signal or the hard timeout), after the cleanups have run.
 */
export function runBench(name: string, options: { hardTimeoutMs: number }, body: (ctx: BenchContext) => Promise<number>): void {
  run(name, options.hardTimeoutMs, body).then(
    (code) => process.exit(code),
    (error: unknown) => {
      console.error(`Benchmark failed: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
      process.exit(1);
    },
  );
}

async function run(name: string, hardTimeoutMs: number, body: (ctx: BenchContext) => Promise<number>): Promise<number> {
  // Loaded before the clock starts, so that the wall times count starting PostgreSQL and the
  // app, not Node loading their modules (and not at the top of this file: see above).
  const { createApp } = await import('../src/app.factory');
  const { loadConfig } = await import('../src/config/app-config');
  const { runMigrations } = await import('../src/database/data-source');
  const { openEmbeddedPostgres } = await import('../src/database/embedded-postgres');

  const cleanups: (() => Promise<unknown>)[] = [];
  // One cleanup, however many callers: after a signal, the benchmark's body usually fails
  // (its database is going away) and must wait for that same cleanup before the process
  // exits, or the exit cuts it short and leaves the temporary directory behind.
  let cleaning: Promise<void> | undefined;
  const cleanUp = () =>
    (cleaning ??= (async () => {
      // Reverse order: the app (its pool) first, then PostgreSQL, then its directory.
      for (const cleanup of cleanups.reverse()) await cleanup().catch((e) => console.error(`cleanup: ${String(e)}`));
    })());
  const abort = (reason: string) => {
    console.error(`\n${reason}: stopping`);
    void cleanUp().finally(() => process.exit(1));
  };
  process.once('SIGINT', () => abort('SIGINT'));
  process.once('SIGTERM', () => abort('SIGTERM'));
  const hardTimeout = setTimeout(() => abort(`Not finished after ${hardTimeoutMs / 1000} s`), hardTimeoutMs);
  hardTimeout.unref();

  const log = (message: string) => process.stdout.write(`${message}\n`);
  const onCleanup = (cleanup: () => Promise<unknown>) => void cleanups.push(cleanup);
  const startedAt = Date.now();
  const startLoad = os.loadavg().map((v) => Math.round(v * 10) / 10);
  if (startLoad[0] > 0.5) {
    log(`Note: the machine is not idle (1-min load average ${startLoad[0]} on ${os.cpus().length} CPUs); expect noisier numbers.`);
  }
  try {
    const dataDir = await mkdtemp(path.join(os.tmpdir(), `acs-bench-${name}-`));
    onCleanup(() => rm(dataDir, { recursive: true, force: true }));
    await chmod(dataDir, 0o755); // postgres runs as an unprivileged user when we are root
    const database = await openEmbeddedPostgres({ dataDir, database: 'acs_bench' });
    onCleanup(() => database.stop());
    await runMigrations(database.url);

    const startApp = async () => {
      const config = loadConfig({ LOG_LEVEL: 'error' });
      const app = await createApp(config, database.url, { logger: false });
      onCleanup(() => closeApp(app));
      await app.listen(0, '127.0.0.1');
      const { port } = app.getHttpServer().address() as AddressInfo;
      return { app, config, baseUrl: `http://127.0.0.1:${port}`, port };
    };
    return await body({ databaseUrl: database.url, log, onCleanup, startedAt, startLoad, startApp });
  } finally {
    clearTimeout(hardTimeout);
    await cleanUp();
  }
}

/** Closes a Nest app or application context, in time for PostgreSQL to be stopped after it. */
export async function closeApp(app: INestApplicationContext): Promise<void> {
  await app.close();
  // pg-pool's end() resolves before its clients' connections are really closed; stopping
  // PostgreSQL at once would make them report "terminating connection due to administrator command".
  await new Promise((resolve) => setTimeout(resolve, 200));
}

/**
 * A positive number from `--<name> N` on the command line, else from the environment variable
 * `env`, else `fallback`.
 */
export function numberOption(name: string, env: string, fallback: number): number {
  const index = process.argv.indexOf(`--${name}`);
  const raw = index >= 0 ? process.argv[index + 1] : process.env[env];
  const value = raw === undefined ? fallback : Number(raw);
  if (!Number.isFinite(value) || value <= 0) throw new Error(`--${name} must be a positive number (got ${raw})`);
  return value;
}

export interface Summary {
  n: number;
  mean: number;
  min: number;
  p50: number;
  p90: number;
  p95: number;
  p99: number;
  max: number;
}

/**
 * Mean, extremes and percentiles of samples, in their own unit, unrounded. The percentile
 * q is the sample at index floor(q * n) of the sorted samples, in every benchmark, so that
 * their figures are comparable.
 */
export function summarize(samples: number[]): Summary {
  const sorted = [...samples].sort((a, b) => a - b);
  const at = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
  return {
    n: sorted.length,
    mean: sorted.reduce((sum, v) => sum + v, 0) / sorted.length,
    min: sorted[0],
    p50: at(0.5),
    p90: at(0.9),
    p95: at(0.95),
    p99: at(0.99),
    max: sorted[sorted.length - 1],
  };
}

/** `summarize` of milliseconds, each figure rounded to 0.01 ms, as the search benchmarks report them. */
export function summarizeMs(ms: number[]) {
  const s = summarize(ms);
  const round = (v: number) => Math.round(v * 100) / 100;
  return { n: s.n, meanMs: round(s.mean), p50Ms: round(s.p50), p95Ms: round(s.p95), p99Ms: round(s.p99), maxMs: round(s.max) };
}

/** A seeded xorshift generator of numbers in [0, 1): the benchmarks' made-up corpora are the same in every run. */
export function rng(seed: number) {
  let state = seed >>> 0 || 1;
  return () => {
    state ^= state << 13;
    state ^= state >>> 17;
    state ^= state << 5;
    return (state >>> 0) / 4294967296;
  };
}

/** Milliseconds since a `process.hrtime.bigint()`. */
export const elapsedMs = (start: bigint) => Number(process.hrtime.bigint() - start) / 1e6;

/** A plain-text table: the first column left-aligned, the others (numbers) right-aligned. */
export function table(header: string[], rows: unknown[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => String(r[i]).length)));
  const line = (cells: unknown[]) => cells.map((c, i) => (i === 0 ? String(c).padEnd(widths[i]) : String(c).padStart(widths[i]))).join('  ');
  return [line(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(line)].join('\n');
}

/**
 * Writes bench/results/<name>-latest.json (ignored by git), headed by when, at which
 * commit and on what machine it was measured; returns its path relative to the cwd.
 */
export async function writeResults(name: string, results: Record<string, unknown>): Promise<string> {
  const machine = { cpus: os.cpus().length, cpuModel: os.cpus()[0]?.model, node: process.version, platform: `${os.platform()} ${os.release()}` };
  // From dist/bench/ back to the sources' bench/, so the results do not land in dist/.
  const resultsDir = path.join(__dirname, '..', '..', 'bench', 'results');
  await mkdir(resultsDir, { recursive: true });
  const file = path.join(resultsDir, `${name}-latest.json`);
  await writeFile(file, `${JSON.stringify({ generatedAt: new Date().toISOString(), commit: gitCommit(), machine, ...results }, null, 2)}\n`);
  return path.relative(process.cwd(), file);
}

function gitCommit(): string | undefined {
  try {
    return execFileSync('git', ['rev-parse', '--short', 'HEAD'], { cwd: __dirname, encoding: 'utf8' }).trim();
  } catch {
    return undefined;
  }
}

/**
 * One GET: milliseconds to the response's first byte and to its end, and the status. `auth` is
 * the dashboard's session cookie, or the headers to send (an API key's Authorization).
 */
export function timedGet(url: string, auth: string | Record<string, string>): Promise<{ ttfb: number; total: number; status: number; bytes: number }> {
  const headers = typeof auth === 'string' ? { cookie: auth, accept: 'text/html' } : auth;
  return new Promise((resolve, reject) => {
    const started = process.hrtime.bigint();
    const req = request(url, { headers }, (res) => {
      let ttfb: number | null = null;
      let bytes = 0;
      res.on('data', (chunk: Buffer) => {
        ttfb ??= Number(process.hrtime.bigint() - started) / 1e6;
        bytes += chunk.length;
      });
      res.on('end', () => {
        const total = Number(process.hrtime.bigint() - started) / 1e6;
        resolve({ ttfb: ttfb ?? total, total, status: res.statusCode ?? 0, bytes });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * Creates the daily partitions of usage_records from `daysBack` days ago to a week ahead, so
 * that records seeded into past days have a partition to land in (the service only keeps
 * yesterday to a week ahead ready: a real deployment got its past days as they came).
 */
export async function coverUsageDays(db: { query: (sql: string) => Promise<unknown> }, daysBack: number): Promise<void> {
  await db.query(`SELECT ensure_usage_record_partitions((now() AT TIME ZONE 'UTC')::date - ${daysBack}, (now() AT TIME ZONE 'UTC')::date + 7)`);
}

/** Signs a person up through the pages, as a browser does; returns the session cookie and their new workspace's id. */
export async function signUp(baseUrl: string, email: string, name: string): Promise<{ cookie: string; workspaceId: string }> {
  const page = await fetch(`${baseUrl}/signup`);
  const cookie = page.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ');
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await page.text())?.[1];
  if (!csrf) throw new Error('No CSRF token on /signup');
  const form = new URLSearchParams({ _csrf: csrf, email, name, password: 'correct horse battery staple' });
  const response = await fetch(`${baseUrl}/signup`, {
    method: 'POST',
    headers: { cookie, 'content-type': 'application/x-www-form-urlencoded' },
    body: form,
    redirect: 'manual',
  });
  const workspaceId = /\/w\/([0-9a-f-]{36})$/.exec(response.headers.get('location') ?? '')?.[1];
  const session = response.headers.getSetCookie().map((line) => line.split(';')[0]).join('; ') || cookie;
  if (response.status !== 303 || !workspaceId) throw new Error(`Sign-up answered ${response.status}`);
  return { cookie: session, workspaceId };
}

/** The vocabulary of the seeded conversation messages (dashboard-pages.ts, conversation-search.ts). */
export const MESSAGE_WORDS = (
  'invoice refund shipping delivery warranty battery screen keyboard printer router password account billing ' +
  'subscription upgrade downgrade cancel order tracking package damaged replacement discount coupon payment card ' +
  'bank transfer receipt address phone email support ticket escalate manager urgent weekend holiday schedule meeting ' +
  'report export import spreadsheet database backup restore server network outage latency error'
).split(' ');
