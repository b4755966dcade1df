import { Injectable, OnApplicationShutdown } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client, type ClientConfig } from 'pg';
import { DataSource } from 'typeorm';

/** `/health/ready`'s answer about the database comes within this, whatever the database does. */
export const READINESS_WAIT_MS = 500;
/** A probe (connecting, or SELECT 1) that takes longer drops its connection; the next probe opens another. */
export const PROBE_TIMEOUT_MS = 5_000;

/**
 * Whether PostgreSQL answers, for the readiness probe: on a connection of its own, never the
 * pool's (a pool exhausted by requests waiting on a frozen database would make the probe
 * wait too), one probe at a time (probes arriving meanwhile share it), and each caller waits
 * at most READINESS_WAIT_MS for it: a database that does not answer by then is "down".
 */
@Injectable()
export class DatabaseProbe implements OnApplicationShutdown {
  private client: Client | null = null;
  private probing: Promise<boolean> | null = null;
  private closed = false;

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** True when PostgreSQL answered `SELECT 1` within READINESS_WAIT_MS. */
  async answers(): Promise<boolean> {
    this.probing ??= this.probe().finally(() => (this.probing = null));
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(false), READINESS_WAIT_MS)));
    try {
      return await Promise.race([this.probing, late]);
    } finally {
      clearTimeout(timer);
    }
  }

  onApplicationShutdown(): void {
    this.closed = true;
    this.drop();
  }

  /** Always settles within PROBE_TIMEOUT_MS, whatever the connection does: the next probe starts afresh. */
  private async probe(): Promise<boolean> {
    if (this.closed) return false;
    let timer: NodeJS.Timeout | undefined;
    const timedOut = new Promise<boolean>((resolve) => {
      timer = setTimeout(() => {
        this.drop();
        resolve(false);
      }, PROBE_TIMEOUT_MS);
    });
    try {
      return await Promise.race([this.selectOne(), timedOut]);
    } finally {
      clearTimeout(timer);
    }
  }

  private async selectOne(): Promise<boolean> {
    try {
      const client = this.client ?? (await this.connect());
      await client.query('SELECT 1');
      return true;
    } catch {
      this.drop();
      return false;
    }
  }

  private async connect(): Promise<Client> {
    const { url, extra } = this.dataSource.options as { url?: string; extra?: { application_name?: string } };
    const config: ClientConfig = { connectionString: url, connectionTimeoutMillis: PROBE_TIMEOUT_MS, application_name: extra?.application_name };
    const client = new Client(config);
    // A connection lost while idle is only noticed here: the next probe opens another.
    client.on('error', () => {
      if (this.client === client) this.client = null;
    });
    this.client = client;
    await client.connect();
    return client;
  }

  /**
   * Ends the probe's connection at once (it may be waiting on a server that answers nothing).
   * Its socket is destroyed rather than the client ended: pg never settles a `connect()` that
   * `end()` interrupted.
   */
  private drop(): void {
    const client = this.client;
    this.client = null;
    const { connection } = (client ?? {}) as { connection?: { stream?: { destroy(): void } } };
    connection?.stream?.destroy();
  }
}
