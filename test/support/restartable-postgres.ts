import { spawn, type ChildProcess } from 'node:child_process';
import { readFile, stat } from 'node:fs/promises';
import * as path from 'node:path';
import { Client } from 'pg';
import { killQuietly, processExists, readPostmasterPid, waitUntil } from './processes';

/**
 * A PostgreSQL server a test can stop and start again on the same port: the cluster a
 * service process made under its DATA_DIR (its embedded PostgreSQL), taken over once that
 * process was killed and run again with the command line PostgreSQL itself recorded
 * (postmaster.opts).
 */
export class RestartablePostgres {
  private child?: ChildProcess;
  constructor(
    private readonly clusterDir: string,
    private readonly command: { binary: string; args: string[] },
    private readonly owner: { uid: number; gid: number },
    readonly port: number,
  ) {}

  static async takeOver(dataDir: string): Promise<RestartablePostgres> {
    const clusterDir = path.join(dataDir, 'postgres');
    const running = await readPostmasterPid(clusterDir);
    if (!running) throw new Error(`No PostgreSQL running on ${clusterDir}`);
    // postmaster.opts: `/path/to/postgres "-D" "<dir>" "-p" "<port>" ...`, as it was started.
    const opts = (await readFile(path.join(clusterDir, 'postmaster.opts'), 'utf8')).trim();
    const binary = opts.slice(0, opts.indexOf(' "'));
    const args = [...opts.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((match) => match[1]);
    const { uid, gid } = await stat(clusterDir);
    const server = new RestartablePostgres(clusterDir, { binary, args }, { uid, gid }, running.port);
    await server.stopPid(running.pid);
    return server;
  }

  async start(): Promise<void> {
    const child = spawn(this.command.binary, this.command.args, {
      stdio: ['ignore', 'ignore', 'pipe'],
      ...(process.getuid?.() === 0 ? this.owner : {}),
    });
    let log = '';
    child.stderr!.on('data', (chunk: Buffer) => (log = (log + chunk.toString()).slice(-4_000)));
    this.child = child;
    const ready = await waitUntil(async () => {
      const client = new Client({ host: '127.0.0.1', port: this.port, user: 'postgres', database: 'postgres', connectionTimeoutMillis: 1_000 });
      client.on('error', () => undefined);
      // Any answer from the server (even a refused password) means it accepts connections.
      return client.connect().then(
        () => client.end().then(() => true),
        (error: Error & { code?: string }) => error.code !== 'ECONNREFUSED' && !/starting up|shutting down/.test(error.message),
      );
    }, 30_000);
    if (!ready) throw new Error(`PostgreSQL did not start again on port ${this.port}:\n${log}`);
  }

  /** A fast shutdown (SIGINT): open connections are ended with 57P01, as in a real restart. */
  async stop(): Promise<void> {
    const running = await readPostmasterPid(this.clusterDir);
    if (running) await this.stopPid(running.pid);
    this.child = undefined;
  }

  private async stopPid(pid: number): Promise<void> {
    killQuietly(pid, 'SIGINT');
    if (!(await waitUntil(() => !processExists(pid), 30_000))) killQuietly(pid, 'SIGQUIT');
    await waitUntil(() => !processExists(pid), 5_000);
  }
}
