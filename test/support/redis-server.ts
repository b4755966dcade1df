import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import * as net from 'node:net';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { findExecutable } from './executables';
import { freePort } from '../../src/database/embedded-postgres';

/** A throwaway `redis-server` on a loopback port of its own, started and stopped by a test file. */
export interface RedisServer {
  /** `redis://127.0.0.1:<port>` */
  url: string;
  port: number;
  pid: number;
  stop(): Promise<void>;
}

const START_TIMEOUT_MS = 10_000;
const STOP_TIMEOUT_MS = 5_000;

/** The Debian binary, or `REDIS_SERVER_BIN`, or the first `redis-server` on PATH; null when there is none. */
export function findRedisServer(): string | null {
  return findExecutable('redis-server', { override: process.env.REDIS_SERVER_BIN, debianPath: '/usr/bin/redis-server' });
}

/**
 * `describe` for suites that need a real redis-server. Without the binary the suite fails
 * on CI (CI=true: a missing dependency must never turn into a green run) and is skipped
 * loudly everywhere else.
 */
export function describeWithRedisServer(name: string, fn: () => void): void {
  if (findRedisServer()) {
    describe(name, fn);
    return;
  }
  const hint =
    'redis-server is not installed (looked for $REDIS_SERVER_BIN, /usr/bin/redis-server and PATH). ' +
    'Install it with `apt-get install -y redis-server` (or run .ci/run).';
  if (process.env.CI === 'true') {
    throw new Error(`CI=true and ${hint} The suite "${name}" cannot run.`);
  }
  console.warn(`\n⚠️  SKIPPING "${name}": ${hint}\n`);
  describe.skip(`${name} [SKIPPED: redis-server not installed]`, fn);
}

/** Starts redis-server on 127.0.0.1 with persistence off and waits until it answers PING. */
export async function startRedisServer(): Promise<RedisServer> {
  const binary = findRedisServer();
  if (!binary) throw new Error('redis-server is not installed: `apt-get install -y redis-server`');
  // A port picked by freePort() may be taken by someone else before redis binds it: retry.
  let lastError: unknown;
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      return await startOnce(binary, await freePort());
    } catch (error) {
      lastError = error;
    }
  }
  throw lastError;
}

async function startOnce(binary: string, port: number): Promise<RedisServer> {
  // The working directory only matters if something asks redis to write (nothing should).
  const dir = await mkdtemp(path.join(tmpdir(), 'acs-redis-'));
  const child = spawn(
    binary,
    [
      '--port', String(port),
      '--bind', '127.0.0.1',
      '--save', '',
      '--appendonly', 'no',
      '--dir', dir,
      '--daemonize', 'no',
      '--loglevel', 'warning',
    ],
    { stdio: ['ignore', 'pipe', 'pipe'] },
  );
  let output = '';
  const collect = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-4_000);
  };
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const spawnFailed = new Promise<never>((_, reject) => child.once('error', reject));

  // Should the test process die without afterAll, do not leave the server behind.
  const killOnExit = () => {
    try {
      if (child.pid) process.kill(child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  process.once('exit', killOnExit);

  let stopped = false;
  const stop = async (): Promise<void> => {
    if (stopped) return;
    stopped = true;
    process.removeListener('exit', killOnExit);
    if (child.exitCode === null && child.signalCode === null && child.pid) {
      try {
        process.kill(child.pid, 'SIGTERM');
      } catch {
        // already gone
      }
      const timer = setTimeout(() => {
        try {
          if (child.pid) process.kill(child.pid, 'SIGKILL');
        } catch {
          // already gone
        }
      }, STOP_TIMEOUT_MS);
      await exited;
      clearTimeout(timer);
    }
    child.stdout?.destroy();
    child.stderr?.destroy();
    await rm(dir, { recursive: true, force: true });
  };

  try {
    await Promise.race([
      waitForPong(port, START_TIMEOUT_MS),
      spawnFailed,
      exited.then(() => {
        throw new Error(`redis-server exited with code ${child.exitCode} before answering PING`);
      }),
    ]);
  } catch (error) {
    await stop();
    throw new Error(`redis-server did not start on 127.0.0.1:${port}: ${String(error)}\n${output.trim()}`);
  }
  return { url: `redis://127.0.0.1:${port}`, port, pid: child.pid!, stop };
}

/** Polls with a raw RESP `PING` (no client library, so nothing is left open) until `+PONG`. */
async function waitForPong(port: number, timeoutMs: number): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await ping(port)) return;
    if (Date.now() > deadline) throw new Error(`no PONG within ${timeoutMs} ms`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

export function ping(port: number, host = '127.0.0.1'): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ port, host });
    let reply = '';
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('error', () => done(false));
    socket.once('connect', () => socket.write('PING\r\n'));
    socket.on('data', (chunk) => {
      reply += chunk.toString();
      if (reply.includes('\r\n')) done(reply.startsWith('+PONG'));
    });
  });
}
