/// <reference types="jest" />
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { findExecutable } from './executables';
import { freePort } from '../../src/database/embedded-postgres';

/**
 * A real HAProxy (Debian's `haproxy`) on 127.0.0.1 in front of service replicas, started
 * and stopped by a test file with a generated configuration: round robin per request,
 * health checks on `/health/ready`, timeouts long enough for streams (HAProxy forwards a
 * response as it comes: nothing to turn off for server-sent events).
 */
export interface LoadBalancer {
  /** `http://127.0.0.1:<port>`: where clients send their requests. */
  url: string;
  pid: number;
  /** Requests each backend server has answered so far, by server name (`replica0`, `replica1`, ...). */
  served(): Promise<Record<string, number>>;
  /** Waits until HAProxy's health checks see every server up. */
  waitUntilAllUp(timeoutMs: number): Promise<void>;
  stop(): Promise<void>;
}

/** The response header naming the replica that answered (HAProxy's server name). */
export const SERVED_BY_HEADER = 'x-served-by';

const START_TIMEOUT_MS = 10_000;

/** `HAPROXY_BIN`, Debian's /usr/sbin/haproxy, or the first `haproxy` on PATH; null when there is none. */
export function findHaproxy(): string | null {
  return findExecutable('haproxy', { override: process.env.HAPROXY_BIN, debianPath: '/usr/sbin/haproxy' });
}

/**
 * The configuration for `backends` (`127.0.0.1:<port>` each). Each request is balanced on
 * its own (HAProxy's HTTP mode), and the answer names its server in `X-Served-By` so that a
 * test can tell where a request landed.
 */
export function haproxyConfig(options: { port: number; statsPort: number; backends: string[] }): string {
  return [
    'global',
    '  maxconn 4096',
    'defaults',
    '  mode http',
    '  timeout connect 5s',
    // A stream may be silent for as long as the service lets an upstream pause (UPSTREAM_IDLE_TIMEOUT_MS).
    '  timeout client 120s',
    '  timeout server 120s',
    '  timeout http-request 30s',
    '  timeout http-keep-alive 10s',
    '  option redispatch',
    '  retries 2',
    'frontend api',
    `  bind 127.0.0.1:${options.port}`,
    '  default_backend replicas',
    'backend replicas',
    '  balance roundrobin',
    '  option httpchk GET /health/ready',
    `  http-response set-header X-Served-By %s`,
    ...options.backends.map((backend, i) => `  server replica${i} ${backend} check inter 500ms fall 2 rise 1`),
    'frontend stats',
    `  bind 127.0.0.1:${options.statsPort}`,
    '  stats enable',
    '  stats uri /stats',
    '  stats refresh 0',
    '',
  ].join('\n');
}

/** `describe` for suites that need HAProxy: fails on CI without it, skipped loudly elsewhere (as redis-server). */
export function describeWithHaproxy(name: string, fn: () => void): void {
  if (findHaproxy()) {
    describe(name, fn);
    return;
  }
  const hint = 'haproxy is not installed (looked for $HAPROXY_BIN, /usr/sbin/haproxy and PATH). Install it with `apt-get install -y haproxy` (or run .ci/run).';
  if (process.env.CI === 'true') throw new Error(`CI=true and ${hint} The suite "${name}" cannot run.`);
  console.warn(`\n⚠️  SKIPPING "${name}": ${hint}\n`);
  describe.skip(`${name} [SKIPPED: haproxy not installed]`, fn);
}

/** Starts HAProxy in the foreground in front of `backends` and waits until it accepts requests. */
export async function startLoadBalancer(backends: string[]): Promise<LoadBalancer> {
  const binary = findHaproxy();
  if (!binary) throw new Error('haproxy is not installed: `apt-get install -y haproxy`');
  const dir = await mkdtemp(path.join(tmpdir(), 'acs-haproxy-'));
  const [port, statsPort] = [await freePort(), await freePort()];
  const configFile = path.join(dir, 'haproxy.cfg');
  await writeFile(configFile, haproxyConfig({ port, statsPort, backends }));

  // -db: foreground, no daemon; -W is not needed (one process).
  const child = spawn(binary, ['-db', '-f', configFile], { stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  const collect = (chunk: Buffer) => (output = (output + chunk.toString()).slice(-4_000));
  child.stdout?.on('data', collect);
  child.stderr?.on('data', collect);
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  const killOnExit = () => {
    try {
      if (child.pid) process.kill(child.pid, 'SIGKILL');
    } catch {
      // already gone
    }
  };
  process.once('exit', killOnExit);

  const statsUrl = `http://127.0.0.1:${statsPort}/stats;csv`;
  /** Rows of HAProxy's CSV statistics for the backend's servers. */
  const serverRows = async (): Promise<Record<string, string>[]> => {
    const text = await (await fetch(statsUrl, { signal: AbortSignal.timeout(2_000) })).text();
    const [header, ...lines] = text.trim().split('\n');
    const columns = header.replace(/^# /, '').split(',');
    return lines
      .map((line) => Object.fromEntries(line.split(',').map((value, i) => [columns[i], value])))
      .filter((row) => row.pxname === 'replicas' && row.svname.startsWith('replica'));
  };

  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    process.removeListener('exit', killOnExit);
    if (child.exitCode === null && child.signalCode === null && child.pid) {
      // SIGUSR1 would wait for open connections to finish; a test wants it gone now.
      process.kill(child.pid, 'SIGTERM');
      const timer = setTimeout(killOnExit, 5_000);
      await exited;
      clearTimeout(timer);
    }
    await rm(dir, { recursive: true, force: true });
  };

  const deadline = Date.now() + START_TIMEOUT_MS;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      await stop();
      throw new Error(`haproxy exited before accepting requests:\n${output}`);
    }
    const up = await serverRows().then(
      () => true,
      () => false,
    );
    if (up) break;
    if (Date.now() > deadline) {
      await stop();
      throw new Error(`haproxy did not answer on 127.0.0.1:${statsPort} within ${START_TIMEOUT_MS} ms:\n${output}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }

  return {
    url: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    served: async () => Object.fromEntries((await serverRows()).map((row) => [row.svname, Number(row.stot)])),
    waitUntilAllUp: async (timeoutMs) => {
      const until = Date.now() + timeoutMs;
      for (;;) {
        const rows = await serverRows();
        if (rows.length === backends.length && rows.every((row) => row.status === 'UP')) return;
        if (Date.now() > until) throw new Error(`Not every server is UP after ${timeoutMs} ms: ${rows.map((r) => `${r.svname}=${r.status}`).join(', ')}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
    },
    stop,
  };
}
