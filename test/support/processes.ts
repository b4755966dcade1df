import { spawn, type ChildProcess } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import * as path from 'node:path';

/** The compiled entry points (`npm test` builds them first, in `pretest`). */
export const CLI_JS = path.resolve(__dirname, '../../dist/src/cli.js');
export const MAIN_JS = path.resolve(__dirname, '../../dist/src/main.js');

/**
 * Variables the service reads (see src/config/app-config.ts). They are taken out of the
 * inherited environment, so a developer's own DATABASE_URL or PORT never leaks into a
 * spawned process: each test states exactly what the process sees.
 */
const SERVICE_VARIABLES = [
  /^NODE_ENV$/,
  /^PORT$/,
  /^HOST$/,
  /^DATABASE_/,
  /^DATA_DIR$/,
  /^REDIS_URL$/,
  /^BODY_LIMIT$/,
  /^RATE_LIMIT_/,
  /^OPENAI_/,
  /^ANTHROPIC_/,
  /^GEMINI_/,
  /^MODEL_CATALOG_FILE$/,
  /^LLM_SIMULATOR$/,
  /^WEB_SEARCH_/,
  /^STRIPE_/,
  /^PAYMENT_PROVIDER$/,
  /^TOPUP_MAX_MILLICENTS$/,
  /^AUTO_TOPUP_/,
  /^USAGE_RETENTION_DAYS$/,
  /^SESSION_SECRET$/,
  /^LOG_LEVEL$/,
  /^LOG_FORMAT$/,
  /^HTTP_(KEEP_ALIVE|HEADERS|REQUEST)_TIMEOUT_MS$/,
  /^SHUTDOWN_DRAIN_MS$/,
  /^METRICS_(TOKEN|PORT)$/,
  /^DOCUMENT_/,
  /^OTEL_/,
];

export function processEnv(overrides: Record<string, string>): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [name, value] of Object.entries(process.env)) {
    if (!SERVICE_VARIABLES.some((pattern) => pattern.test(name))) env[name] = value;
  }
  // Plain log lines, whatever the terminal running jest supports.
  return { ...env, NO_COLOR: '1', FORCE_COLOR: '0', ...overrides };
}

export interface ProcessResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  durationMs: number;
}

/**
 * Runs `node <args>` to completion. Killed (by its pid) after `timeoutMs`, and the promise
 * rejected with whatever it printed, so a hung process fails the test readably.
 */
export function runNode(
  args: string[],
  env: Record<string, string>,
  options: { timeoutMs?: number; cwd?: string } = {},
): Promise<ProcessResult> {
  const timeoutMs = options.timeoutMs ?? 60_000;
  const started = Date.now();
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env: processEnv(env), cwd: options.cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let stdout = '';
    let stderr = '';
    child.stdout.setEncoding('utf8').on('data', (chunk: string) => (stdout += chunk));
    child.stderr.setEncoding('utf8').on('data', (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => {
      if (child.pid !== undefined) killQuietly(child.pid, 'SIGKILL');
      reject(new Error(`node ${args.join(' ')} did not finish in ${timeoutMs} ms\nstdout: ${stdout}\nstderr: ${stderr}`));
    }, timeoutMs);
    child.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, stdout, stderr, durationMs: Date.now() - started });
    });
  });
}

/** Runs the operator CLI to completion (20 s at most by default). */
export function runCli(args: string[], env: Record<string, string>, options: { timeoutMs?: number } = {}): Promise<ProcessResult> {
  return runNode([CLI_JS, ...args], env, { timeoutMs: options.timeoutMs ?? 20_000, cwd: path.dirname(CLI_JS) });
}

/**
 * Runs the operator CLI's `main()` in this process, with the environment a spawned CLI
 * would see: the same contract as `runCli` (exit code, stdout, stderr) in a fraction of the
 * time, since nothing is spawned and the modules are loaded once per test file. What only a
 * real process shows (the exit code reaching the shell, nothing else on stdout) is for
 * `runCli`. `signal` is always null.
 */
export async function runCliInProcess(args: string[], env: Record<string, string>): Promise<ProcessResult> {
  // Imported on first use: files that only spawn processes do not load the whole app.
  const { main } = await import('../../src/cli');
  const started = Date.now();
  let stdout = '';
  let stderr = '';
  const code = await main(args, {
    stdout: (text) => (stdout += text),
    stderr: (text) => (stderr += text),
    env: processEnv(env),
  });
  return { code, signal: null, stdout, stderr, durationMs: Date.now() - started };
}

/** Describes a result for a failed expectation: the command's own words. */
export function describeResult(args: string[], result: ProcessResult): string {
  return `cli ${args.join(' ')} -> exit ${result.code ?? result.signal}\nstdout: ${result.stdout}\nstderr: ${result.stderr}`;
}

/** The service (`node dist/src/main.js`) as a child process, with its output collected. */
export class ServerProcess {
  stdout = '';
  stderr = '';
  /** Settles when the process has exited (never rejects). */
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
  private exitInfo: { code: number | null; signal: NodeJS.Signals | null } | null = null;

  private constructor(private readonly child: ChildProcess) {
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (this.stdout += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (this.stderr += chunk));
    this.exited = new Promise((resolve) => {
      child.on('exit', (code, signal) => {
        this.exitInfo = { code, signal };
        resolve(this.exitInfo);
      });
      child.on('error', () => {
        this.exitInfo = { code: null, signal: null };
        resolve(this.exitInfo);
      });
    });
  }

  static start(env: Record<string, string>): ServerProcess {
    const child = spawn(process.execPath, [MAIN_JS], {
      env: processEnv(env),
      cwd: path.dirname(MAIN_JS),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    return new ServerProcess(child);
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get running(): boolean {
    return this.exitInfo === null;
  }

  /** Waits until stdout matches, failing early if the process exits first. */
  async waitForStdout(pattern: RegExp, timeoutMs: number): Promise<RegExpMatchArray> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const match = this.stdout.match(pattern);
      if (match) return match;
      if (!this.running) throw new Error(`The server exited (${JSON.stringify(this.exitInfo)}) before printing ${pattern}\n${this.output()}`);
      if (Date.now() > deadline) throw new Error(`No ${pattern} on stdout within ${timeoutMs} ms\n${this.output()}`);
      await sleep(50);
    }
  }

  /** Waits until `GET <baseUrl>/health` answers 200, failing early if the process exits. */
  async waitForHealth(baseUrl: string, timeoutMs: number): Promise<void> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      if (!this.running) throw new Error(`The server exited (${JSON.stringify(this.exitInfo)}) before answering\n${this.output()}`);
      const ok = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(1_000) }).then(
        (response) => response.ok,
        () => false,
      );
      if (ok) return;
      if (Date.now() > deadline) throw new Error(`${baseUrl}/health did not answer within ${timeoutMs} ms\n${this.output()}`);
      await sleep(100);
    }
  }

  /** Sends a signal and waits (bounded) for the exit; SIGKILLs and throws on a hang. */
  async stop(
    signal: NodeJS.Signals,
    timeoutMs: number,
  ): Promise<{ code: number | null; signal: NodeJS.Signals | null; durationMs: number }> {
    const started = Date.now();
    if (this.running && this.pid !== undefined) killQuietly(this.pid, signal);
    let timer: NodeJS.Timeout | undefined;
    const result = await Promise.race([
      this.exited,
      new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), timeoutMs))),
    ]).finally(() => clearTimeout(timer));
    if (!result) {
      this.kill();
      throw new Error(`The server did not exit within ${timeoutMs} ms of ${signal}\n${this.output()}`);
    }
    return { ...result, durationMs: Date.now() - started };
  }

  /** For afterAll: SIGKILL by pid if still running. */
  kill(): void {
    if (this.running && this.pid !== undefined) killQuietly(this.pid, 'SIGKILL');
  }

  output(): string {
    return `--- stdout ---\n${this.stdout}\n--- stderr ---\n${this.stderr}`;
  }
}

/** The pid and port of an embedded PostgreSQL, from `<cluster>/postmaster.pid`; null without the file. */
export async function readPostmasterPid(clusterDir: string): Promise<{ pid: number; port: number } | null> {
  try {
    const lines = (await readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8')).split('\n');
    return { pid: Number(lines[0]), port: Number(lines[3]) };
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw error;
  }
}

export function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    // EPERM: it exists, under another user.
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export function killQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}

/** Polls until `condition` holds; false if it still does not after `timeoutMs`. */
export async function waitUntil(condition: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await condition()) return true;
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
