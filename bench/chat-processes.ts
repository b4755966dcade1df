/**
 * The processes of the chat benchmark (bench/chat.ts): each server runs as its own child
 * process on 127.0.0.1 and is stopped by its PID at the end. Also what the benchmark reads
 * from them: readiness over HTTP and memory from /proc/<pid>/status.
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process';
import { readdir, readFile } from 'node:fs/promises';
import * as net from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export interface ServerProcess {
  name: string;
  pid: number;
  child: ChildProcess;
  /** The last few KB the process wrote to stdout and stderr, to show when it fails. */
  output(): string;
  /** SIGTERM, then SIGKILL after `graceMs` if it has not exited; resolves once it has. */
  stop(graceMs?: number): Promise<void>;
}

/** A port nobody listens on right now (taken by the kernel, then released for the child). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/**
 * Starts `node <args>` with exactly `env` (plus PATH and HOME), keeping the tail of its
 * output: a child whose pipe nobody reads would block on its next write.
 */
export function startNode(name: string, args: string[], env: Record<string, string>): ServerProcess {
  const child = spawn(process.execPath, args, {
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let tail = '';
  const keep = (chunk: Buffer) => {
    tail = (tail + chunk.toString('utf8')).slice(-4_000);
  };
  child.stdout!.on('data', keep);
  child.stderr!.on('data', keep);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null) resolve();
    child.once('exit', () => resolve());
  });
  return {
    name,
    pid: child.pid!,
    child,
    output: () => tail,
    async stop(graceMs = 5_000) {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** Resolves with the first line the process prints on stdout (servers that announce their port). */
export function firstLine(server: ServerProcess, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    let buffered = '';
    const timer = setTimeout(() => reject(new Error(`${server.name}: no output within ${timeoutMs} ms\n${server.output()}`)), timeoutMs);
    const onData = (chunk: Buffer) => {
      buffered += chunk.toString('utf8');
      const newline = buffered.indexOf('\n');
      if (newline >= 0) {
        clearTimeout(timer);
        server.child.stdout!.off('data', onData);
        resolve(buffered.slice(0, newline));
      }
    };
    server.child.stdout!.on('data', onData);
    server.child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`${server.name} exited with code ${code}\n${server.output()}`));
    });
  });
}

/** Polls `url` until it answers 200, or fails naming the process and its output. */
export async function waitUntilServing(server: ServerProcess, url: string, timeoutMs: number, init?: RequestInit): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < deadline) {
    if (server.child.exitCode !== null) throw new Error(`${server.name} exited with code ${server.child.exitCode}\n${server.output()}`);
    try {
      const res = await fetch(url, init);
      last = `${res.status} ${(await res.text()).slice(0, 300)}`;
      if (res.status === 200) return;
    } catch (error) {
      last = String(error);
    }
    await sleep(200);
  }
  throw new Error(`${server.name}: ${url} did not answer 200 within ${timeoutMs} ms (last: ${last})\n${server.output()}`);
}

/** Resident memory now and at its peak (VmRSS, VmHWM), in MB; undefined where /proc is not there. */
export async function memoryOf(pid: number): Promise<{ rssMb: number; peakRssMb: number } | undefined> {
  try {
    const status = await readFile(`/proc/${pid}/status`, 'utf8');
    const kb = (field: string) => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
    return { rssMb: Math.round(kb('VmRSS') / 102.4) / 10, peakRssMb: Math.round(kb('VmHWM') / 102.4) / 10 };
  } catch {
    return undefined;
  }
}

/** Runs `node <args>` to its end; answers its stdout, or fails with its stderr. */
export function runNode(args: string[], env: Record<string, string>, timeoutMs: number): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      args,
      { env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? '', ...env }, timeout: timeoutMs, maxBuffer: 10_000_000 },
      (error, stdout, stderr) => (error ? reject(new Error(`node ${args.join(' ')}: ${error.message}\n${stderr}`)) : resolve(stdout)),
    );
  });
}

/** Clock ticks per second of /proc's CPU times (USER_HZ: 100 on every Linux this runs on). */
const TICKS_PER_SECOND = 100;

/**
 * CPU ticks a process used (utime + stime), and with `reaped` also those of its children that
 * ended and that it waited for (cutime + cstime): how a backend that PostgreSQL ended during
 * a run still counts. Undefined once the process is gone.
 */
async function ticksOf(pid: number, reaped = false): Promise<number | undefined> {
  try {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
    // The fields after the command name (which may hold spaces) in parentheses; utime, stime,
    // cutime and cstime are the 14th to 17th.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return Number(fields[11]) + Number(fields[12]) + (reaped ? Number(fields[13]) + Number(fields[14]) : 0);
  } catch {
    return undefined;
  }
}

/** A process and its direct children (PostgreSQL's backends are children of its postmaster). */
async function withChildren(pid: number): Promise<number[]> {
  const children: number[] = [];
  for (const entry of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const status = await readFile(`/proc/${entry}/status`, 'utf8').catch(() => '');
    if (new RegExp(`^PPid:\\s+${pid}$`, 'm').test(status)) children.push(Number(entry));
  }
  return [pid, ...children];
}

/** The postmaster listening on this port, found by its command line (`postgres -D <dir> -p <port>`). */
export async function postmasterPid(port: number): Promise<number | undefined> {
  for (const entry of await readdir('/proc').catch(() => [] as string[])) {
    if (!/^\d+$/.test(entry)) continue;
    const args = (await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '')).split('\0');
    if (/(^|\/)postgres$/.test(args[0]) && args[args.indexOf('-p') + 1] === String(port)) return Number(entry);
  }
  return undefined;
}

/**
 * CPU used by groups of processes while `measure` runs, in % of one core (all threads of a
 * process count: a node process can pass 100% with its GC and libuv threads). Each group
 * is a list of root pids; `tree` groups also count the roots' direct children, those that
 * end meanwhile included (through the root's reaped children's times). A group without pids
 * (no gateway for the floor; a postmaster not found) is undefined, as is every group where
 * /proc is not there.
 */
export async function cpuDuring<Group extends string, T>(
  groups: Record<Group, { pids: number[]; tree?: boolean }>,
  measure: () => Promise<T>,
): Promise<{ result: T; cpuPercent: Record<Group, number | undefined> | undefined }> {
  const names = Object.keys(groups) as Group[];
  const members = async (name: Group) => {
    const { pids, tree } = groups[name];
    return tree ? (await Promise.all(pids.map(withChildren))).flat() : pids;
  };
  /** Per group, each member's ticks; a tree's roots with their reaped children's. */
  const ticks = (name: Group, pids: number[]) =>
    Promise.all(pids.map(async (pid) => [pid, await ticksOf(pid, groups[name].tree === true && groups[name].pids.includes(pid))] as const));
  const before = await Promise.all(names.map(async (name) => new Map(await ticks(name, await members(name)))));
  const startedAt = process.hrtime.bigint();
  const result = await measure();
  const seconds = Number(process.hrtime.bigint() - startedAt) / 1e9;
  const used = await Promise.all(
    names.map(async (name, index) => {
      const earlier = before[index];
      const pids = [...new Set([...earlier.keys(), ...(await members(name))])];
      let total = 0;
      for (const [pid, now] of await ticks(name, pids)) {
        const then = earlier.get(pid) ?? 0;
        // Started meanwhile: counts whole. Ended meanwhile: a tree's root counted its whole
        // life among its reaped children's times, so what it had used before comes off.
        if (now !== undefined) total += now - then;
        else if (groups[name].tree) total -= then;
      }
      return total;
    }),
  );
  if (before.every((map) => [...map.values()].every((value) => value === undefined))) return { result, cpuPercent: undefined };
  const cpuPercent = Object.fromEntries(
    names.map((name, index) => [name, groups[name].pids.length === 0 ? undefined : Math.round((used[index] / TICKS_PER_SECOND / seconds) * 100)]),
  ) as Record<Group, number | undefined>;
  return { result, cpuPercent };
}

/** What a service process's main thread went through during a measurement (see mainThreadDuring). */
export interface MainThreadReport {
  /** How late prom-client's 10 ms timer on the event loop fired, at the longest and at p99, in ms: a stall of the main thread. */
  maxDelayMs: number;
  p99DelayMs: number;
  /** Per kind (minor, major, incremental, weakcb): collections, their total pause, and how many paused more than 10 ms. */
  gc: Record<string, { count: number; totalMs: number; over10Ms: number }>;
}

/** prom-client's default `eventLoopMonitoringPrecision`, which the service keeps. */
const EVENT_LOOP_TIMER_SECONDS = 0.01;

/**
 * What a service process's main thread went through while `measure` ran, read from its
 * `/metrics` (prom-client's default metrics) before and after: the longest event-loop delay
 * (prom-client resets its `monitorEventLoopDelay` histogram at each reading, so the second
 * reading covers the measurement alone) and the garbage collections by kind. Undefined when
 * the metrics could not be read: the measurement itself does not depend on them.
 */
export async function mainThreadDuring<T>(metricsUrl: string, measure: () => Promise<T>): Promise<{ result: T; mainThread: MainThreadReport | undefined }> {
  const before = await readMetrics(metricsUrl);
  const result = await measure();
  const after = await readMetrics(metricsUrl);
  if (!before || !after) return { result, mainThread: undefined };
  const value = (text: string, series: string) => Number(new RegExp(`^${series.replace(/[{}"=.]/g, '\\$&')} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);
  const gc: MainThreadReport['gc'] = {};
  for (const kind of new Set([...after.matchAll(/^acs_nodejs_gc_duration_seconds_count\{kind="(\w+)"\}/gm)].map((m) => m[1]))) {
    const delta = (series: string) => value(after, series) - (value(before, series) || 0);
    const count = delta(`acs_nodejs_gc_duration_seconds_count{kind="${kind}"}`);
    // Buckets are cumulative: what took more than 10 ms is the count less the bucket up to 10 ms.
    const upTo10Ms = delta(`acs_nodejs_gc_duration_seconds_bucket{le="0.01",kind="${kind}"}`);
    if (count > 0) gc[kind] = { count, totalMs: Math.round(delta(`acs_nodejs_gc_duration_seconds_sum{kind="${kind}"}`) * 1e4) / 10, over10Ms: count - upTo10Ms };
  }
  // monitorEventLoopDelay records the time between the timer's ticks, its own 10 ms included.
  const lateMs = (seconds: number) => Math.max(0, Math.round((seconds - EVENT_LOOP_TIMER_SECONDS) * 1e4) / 10);
  return {
    result,
    mainThread: { maxDelayMs: lateMs(value(after, 'acs_nodejs_eventloop_lag_max_seconds')), p99DelayMs: lateMs(value(after, 'acs_nodejs_eventloop_lag_p99_seconds')), gc },
  };
}

async function readMetrics(url: string): Promise<string | undefined> {
  try {
    const res = await fetch(url);
    return res.status === 200 ? await res.text() : undefined;
  } catch {
    return undefined;
  }
}
