import { ChildProcess, execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync, rmSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { Client } from 'pg';

/** A database the process can use, and how to let go of it. */
export interface DatabaseHandle {
  url: string;
  /** True when this process must stop the embedded server: it started it, or took it over from a process that is gone. */
  ownsServer: boolean;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  database: string;
  log?: (message: string) => void;
  /**
   * Runs PostgreSQL in a process group of its own (the service, which stops it after its
   * drain). Otherwise it shares the caller's group, so that Ctrl-C on a CLI command or a test
   * run stops it with them.
   */
  ownProcessGroup?: boolean;
}

const USER = 'postgres';

/**
 * The embedded database cannot be used, for a reason the operator can fix; its message is
 * the whole story, printed without a stack.
 */
export class EmbeddedPostgresError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'EmbeddedPostgresError';
  }
}

/**
 * The embedded PostgreSQL under DATA_DIR. A server already running on that directory
 * (the app, while the CLI runs) is reused; otherwise one is started on a free loopback
 * port (for the service, in its own process group). The process that started it stops it
 * with `stop()` (or, exiting without doing so, asks it to shut down); a server whose starter
 * is gone (killed with SIGKILL) is taken over, so that this process stops it instead.
 */
export async function openEmbeddedPostgres(options: EmbeddedPostgresOptions): Promise<DatabaseHandle> {
  const log = options.log ?? (() => undefined);
  const clusterDir = path.join(options.dataDir, 'postgres');
  await fs.mkdir(options.dataDir, { recursive: true });
  const password = await readOrCreatePassword(options.dataDir);

  const running = await findRunningServer(clusterDir);
  if (running) {
    const url = connectionUrl(password, running.port, options.database);
    await ensureDatabase(connectionUrl(password, running.port, 'postgres'), options.database);
    const owner = await readOwner(options.dataDir);
    if (owner !== null && isRunning(owner)) return { url, ownsServer: false, stop: async () => undefined };
    await writeOwner(options.dataDir);
    log(`Took over the embedded PostgreSQL (pid ${running.pid}) left running on ${clusterDir} by a process that is gone`);
    return { url, ownsServer: true, stop: once(() => stopServerOf(options.dataDir, running.pid)) };
  }

  // PostgreSQL refuses to run as root; the package then runs it as the `postgres` user.
  const runAs = isRoot() ? await postgresUser() : null;
  if (runAs) await assertReachable(runAs, [clusterDir, (await importBinaries()).postgres]);

  const EmbeddedPostgres = await importEmbeddedPostgres();
  const binaries = await importBinaries();
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: USER,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    createPostgresUser: true,
    onLog: () => undefined,
    onError: (error: unknown) => log(`embedded PostgreSQL: ${String(error)}`),
  });

  if (!existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    log(`Creating the embedded PostgreSQL cluster in ${clusterDir}`);
    await initialise(server, options.dataDir, runAs);
  }
  const postmaster = await startServer(binaries.postgres, clusterDir, port, runAs, options.ownProcessGroup ?? false);
  await writeOwner(options.dataDir);
  const stopWhenExiting = () => stopAtExit(options.dataDir, postmaster);
  process.on('exit', stopWhenExiting);
  const stop = once(async () => {
    await stopServerOf(options.dataDir, postmaster.pid!);
    process.removeListener('exit', stopWhenExiting);
  });
  try {
    await ensureDatabase(connectionUrl(password, port, 'postgres'), options.database);
  } catch (error) {
    await stop(); // nobody else would stop it
    throw error;
  }
  log(`Embedded PostgreSQL listening on 127.0.0.1:${port} (data in ${clusterDir})`);
  return { url: connectionUrl(password, port, options.database), ownsServer: true, stop };
}

/**
 * Runs `postgres` on the cluster, for the service in a process group (and session) of its own
 * (`detached`): a signal to the service's group (Ctrl-C in a terminal, `kill -TERM -<pgid>`, a
 * closed terminal's SIGHUP) reaches the service alone, which stops the database itself once
 * its requests are settled. The package's own start cannot be told to do so, hence the spawn
 * here (as the package does it: same arguments, English messages, the `postgres` user under
 * root). Resolves once the server accepts connections.
 */
async function startServer(binary: string, clusterDir: string, port: number, runAs: PosixUser | null, detached: boolean): Promise<ChildProcess> {
  await ensureExecutable(binary);
  const child = spawn(binary, ['-D', clusterDir, '-p', String(port), '-c', 'listen_addresses=127.0.0.1'], {
    detached,
    stdio: ['ignore', 'ignore', 'pipe'],
    env: { ...process.env, LC_MESSAGES: 'C' },
    ...(runAs ?? {}),
  });
  // Read for as long as it runs (a full pipe would stall the server); the last lines explain a failed start.
  let output = '';
  child.stderr!.setEncoding('utf8');
  const ready = new Promise<void>((resolve, reject) => {
    child.stderr!.on('data', (chunk: string) => {
      output = (output + chunk).slice(-2_000);
      if (output.includes('database system is ready to accept connections')) resolve();
    });
    child.once('error', reject);
    child.once('exit', (code, signal) => reject(new Error(`postgres exited (${signal ?? `code ${code}`})`)));
  });
  try {
    await ready;
  } catch (error) {
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGQUIT');
    throw new EmbeddedPostgresError(
      `The embedded PostgreSQL in ${clusterDir} did not start: ${String(error)}${output.trim() ? `: ${output.trim()}` : ''}. ` +
        'Another server may hold its lock, or the directory is not writable.',
    );
  }
  // Nothing more to match: later lines are read and dropped.
  output = '';
  child.stderr!.removeAllListeners('data').resume();
  return child;
}

/** Binaries unpacked without their mode bits (some package managers) are made executable; left alone when they are. */
async function ensureExecutable(file: string): Promise<void> {
  const { mode } = await fs.stat(file);
  if ((mode & 0o555) !== 0o555) await fs.chmod(file, mode | 0o555);
}

/**
 * When the process exits before it stopped its database (a fatal error, a stop forced past
 * its bound), the server is asked for a fast shutdown, which it completes on its own: in a
 * process group of its own, nothing else would stop it.
 */
function stopAtExit(dataDir: string, postmaster: ChildProcess): void {
  if (postmaster.exitCode !== null || postmaster.signalCode !== null) return;
  postmaster.kill('SIGINT');
  try {
    if (readFileSync(ownerFile(dataDir), 'utf8').trim() === String(process.pid)) rmSync(ownerFile(dataDir), { force: true });
  } catch {
    // no record: nothing to remove
  }
}

/**
 * Creates the cluster. The package hands initdb the superuser password in a file it writes
 * to os.tmpdir(), readable by every user (0644), and leaves it there when initdb cannot be
 * spawned. So TMPDIR points, meanwhile, at a folder of our own in DATA_DIR that only the
 * user initdb runs as can enter (0700), removed whatever happens.
 */
async function initialise(server: EmbeddedPostgresServer, dataDir: string, runAs: PosixUser | null): Promise<void> {
  // Left by a process killed during initdb, the one case the `finally` below cannot cover.
  for (const entry of await fs.readdir(dataDir)) {
    if (entry.startsWith('.initdb-')) await fs.rm(path.join(dataDir, entry), { recursive: true, force: true });
  }
  const privateDir = await fs.mkdtemp(path.join(dataDir, '.initdb-'));
  const tmpdir = process.env.TMPDIR;
  try {
    if (runAs) await fs.chown(privateDir, runAs.uid, runAs.gid);
    process.env.TMPDIR = privateDir;
    await server.initialise();
  } catch (error) {
    throw new EmbeddedPostgresError(`Creating the embedded PostgreSQL cluster in ${path.join(dataDir, 'postgres')} failed: ${String(error)}`);
  } finally {
    if (tmpdir === undefined) delete process.env.TMPDIR;
    else process.env.TMPDIR = tmpdir;
    await fs.rm(privateDir, { recursive: true, force: true });
  }
}

interface PosixUser {
  uid: number;
  gid: number;
}

function isRoot(): boolean {
  return process.getuid?.() === 0;
}

/** The `postgres` user the server runs as under root, created as the package would create it when missing. */
async function postgresUser(): Promise<PosixUser> {
  const run = promisify(execFile);
  const ids = async () => ({
    uid: Number((await run('id', ['-u', USER])).stdout),
    gid: Number((await run('id', ['-g', USER])).stdout),
  });
  try {
    return await ids();
  } catch {
    await run('groupadd', [USER]).catch(() => undefined);
    await run('useradd', ['-g', USER, USER]);
    return ids();
  }
}

/**
 * Fails with one sentence when `user` cannot reach every target: PostgreSQL and initdb run
 * as that user and must enter every folder down to their binaries and their cluster. Checked
 * before anything is spawned, because a binary it cannot reach makes the package crash the
 * process (an unhandled spawn EACCES) with the password file left behind.
 */
async function assertReachable(user: PosixUser, targets: string[]): Promise<void> {
  for (const target of targets) {
    const parts = path.resolve(target).split(path.sep).filter(Boolean);
    for (let depth = 0; depth <= parts.length; depth++) {
      const folder = path.sep + parts.slice(0, depth).join(path.sep);
      const stats = await fs.stat(folder).catch(() => null);
      if (!stats) break; // created later, by this process, for that user
      if (!stats.isDirectory()) continue;
      const searchBit = stats.uid === user.uid ? 0o100 : stats.gid === user.gid ? 0o010 : 0o001;
      if ((stats.mode & searchBit) === 0) {
        throw new EmbeddedPostgresError(
          `The embedded PostgreSQL runs as the user "${USER}" (the service runs as root), which cannot enter ${folder} ` +
            `on the way to ${target}: make that folder traversable (chmod o+x ${folder}), or set DATABASE_URL to use a PostgreSQL server of your own.`,
        );
      }
    }
  }
}

/**
 * Who started the server running on DATA_DIR: the pid of that process, in a file next to
 * the cluster. Null when no process is recorded.
 */
async function readOwner(dataDir: string): Promise<number | null> {
  const pid = Number((await fs.readFile(ownerFile(dataDir), 'utf8').catch(() => '')).trim());
  return Number.isInteger(pid) && pid > 0 ? pid : null;
}

async function writeOwner(dataDir: string): Promise<void> {
  await fs.writeFile(ownerFile(dataDir), `${process.pid}\n`, { mode: 0o600 });
}

/** Only this process's own record is removed: another may have taken the server over since. */
async function removeOwner(dataDir: string): Promise<void> {
  if ((await readOwner(dataDir)) === process.pid) await fs.rm(ownerFile(dataDir), { force: true });
}

function ownerFile(dataDir: string): string {
  return path.join(dataDir, 'embedded-postgres.owner');
}

/**
 * Stops the server, started here or taken over (then not our child: no exit event), by its
 * pid: a fast shutdown (SIGINT: sessions end, a checkpoint is written), then an immediate
 * one if it is still up after 30 s.
 */
async function stopServerOf(dataDir: string, pid: number): Promise<void> {
  const gone = async (timeoutMs: number) => {
    const deadline = Date.now() + timeoutMs;
    while (isRunning(pid)) {
      if (Date.now() > deadline) return false;
      await sleep(50);
    }
    return true;
  };
  signal(pid, 'SIGINT');
  if (!(await gone(30_000))) {
    signal(pid, 'SIGQUIT');
    await gone(5_000);
  }
  await removeOwner(dataDir);
}

function signal(pid: number, name: NodeJS.Signals): void {
  try {
    process.kill(pid, name);
  } catch {
    // already gone
  }
}

/** True while `pid` runs; a zombie (exited, not yet reaped by its new parent) does not. */
function isRunning(pid: number): boolean {
  try {
    process.kill(pid, 0);
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
  try {
    // /proc/<pid>/stat: "pid (comm) state ..."; comm may hold spaces and parentheses.
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return true; // no /proc (macOS): the signal check is all there is
  }
}

function once(action: () => Promise<void>): () => Promise<void> {
  let done: Promise<void> | undefined;
  return () => (done ??= action());
}

/** The part of `embedded-postgres` used here (its own types need ESM module resolution). */
interface EmbeddedPostgresServer {
  initialise(): Promise<void>;
}
type EmbeddedPostgresClass = new (options: Record<string, unknown>) => EmbeddedPostgresServer;

/**
 * `embedded-postgres` is ESM-only. TypeScript compiling to CommonJS would turn `import()`
 * into `require()`, so the import is built at run time to stay a real dynamic import.
 */
const dynamicImport = new Function('specifier', 'return import(specifier)') as <T>(specifier: string) => Promise<T>;

/** What `async-exit-hook`, loaded by `embedded-postgres`, listens to on the process. */
const PACKAGE_HOOKED_EVENTS = ['exit', 'beforeExit', 'SIGHUP', 'SIGINT', 'SIGTERM', 'SIGBREAK', 'message'] as const;

async function importEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  // As a plain emitter: Node's typings list process.listeners() per signal name only.
  const emitter: NodeJS.EventEmitter = process;
  const before = new Map(PACKAGE_HOOKED_EVENTS.map((event) => [event, emitter.listeners(event)]));
  const module = await dynamicImport<{ default: EmbeddedPostgresClass }>('embedded-postgres');
  // The package installs hooks that stop its clusters and exit at once: on SIGINT, SIGTERM,
  // SIGHUP, and even `beforeExit`. The service owns its shutdown order (drain requests, give
  // back leases, close the pool, then stop the database) and the server is started here, not
  // by the package: every hook it added is taken off again.
  for (const event of PACKAGE_HOOKED_EVENTS) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)!.includes(listener)) emitter.removeListener(event, listener as (...args: unknown[]) => void);
    }
  }
  return module.default;
}

/** The package of PostgreSQL binaries for this machine, named as `embedded-postgres` names it on Linux and macOS. */
function importBinaries(): Promise<{ postgres: string; initdb: string }> {
  return dynamicImport(`@embedded-postgres/${os.platform()}-${os.arch()}`);
}

async function readOrCreatePassword(dataDir: string): Promise<string> {
  const file = path.join(dataDir, 'embedded-postgres.password');
  try {
    return (await fs.readFile(file, 'utf8')).trim();
  } catch {
    const password = randomBytes(24).toString('hex');
    await fs.writeFile(file, `${password}\n`, { mode: 0o600 });
    return password;
  }
}

/** Reads the cluster's `postmaster.pid` (pid on line 1, port on line 4) if its server is alive. */
async function findRunningServer(clusterDir: string): Promise<{ pid: number; port: number } | null> {
  let lines: string[];
  try {
    lines = (await fs.readFile(path.join(clusterDir, 'postmaster.pid'), 'utf8')).split('\n');
  } catch {
    return null;
  }
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || !Number.isInteger(port) || pid <= 0) return null;
  // A stale lock file of a server that is gone: postgres clears it itself on its next start.
  if (!isRunning(pid)) return null;
  return { pid, port };
}

async function ensureDatabase(adminUrl: string, database: string): Promise<void> {
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    const { rowCount } = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [database]);
    if (!rowCount) await client.query(`CREATE DATABASE ${client.escapeIdentifier(database)}`);
  } finally {
    await client.end();
  }
}

function connectionUrl(password: string, port: number, database: string): string {
  return `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address() as net.AddressInfo;
      server.close(() => resolve(address.port));
    });
  });
}
