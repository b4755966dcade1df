import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { DataSource } from 'typeorm';
import { ProvidersService } from '../providers.service';
import type { DeploymentState } from './deployment-router';

/** How often a replica writes its router's snapshot. */
const REPORT_INTERVAL_MS = 5_000;
/** A failed write is logged at most this often: the database may be away for a while. */
const ERROR_LOG_INTERVAL_MS = 60_000;

/** A replica's upsert of its rows; the same statement drops the rows of replicas silent for 10 minutes (they died). */
const REPORT_SQL = `
WITH reported AS (
  INSERT INTO deployment_health
    (replica, deployment, model, label, provider, state, cooldown_until, in_flight, requests, errors, p50_ms, updated_at)
  SELECT $1, d.deployment, d.model, d.label, d.provider, d.state, d.cooldown_until, d.in_flight, d.requests, d.errors, d.p50_ms, now()
  FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::timestamptz[], $8::int[], $9::int[], $10::int[], $11::int[])
    AS d(deployment, model, label, provider, state, cooldown_until, in_flight, requests, errors, p50_ms)
  ON CONFLICT (replica, deployment) DO UPDATE SET
    model = EXCLUDED.model, label = EXCLUDED.label, provider = EXCLUDED.provider, state = EXCLUDED.state,
    cooldown_until = EXCLUDED.cooldown_until, in_flight = EXCLUDED.in_flight, requests = EXCLUDED.requests,
    errors = EXCLUDED.errors, p50_ms = EXCLUDED.p50_ms, updated_at = EXCLUDED.updated_at
)
DELETE FROM deployment_health WHERE updated_at < now() - interval '10 minutes'`;

/**
 * Writes this replica's view of its deployments (ProvidersService.deployments) to
 * `deployment_health` every 5 s, for the CLI's `deployments` command: the CLI is another
 * process and cannot read a server's memory. Nothing is written when the catalog has no
 * deployments. A failed write is logged at most every minute and never throws; the rows go
 * when the replica stops. Not part of the CLI's context, so the CLI starts no such timer.
 */
@Injectable()
export class DeploymentHealthReporter implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('DeploymentHealth');
  /** This process, as its rows name it: host, pid and start time (a reused pid is another replica). */
  readonly replica = replicaName();
  private timer?: NodeJS.Timeout;
  private writing: Promise<void> = Promise.resolve();
  /** Writes asked for and not yet done: the timer adds none while one is under way (a database that hangs holds one connection, not a queue). */
  private pending = 0;
  private stopped = false;
  private lastErrorLog = 0;

  constructor(
    private readonly providers: ProvidersService,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  onApplicationBootstrap(): void {
    if (this.providers.deployments().length === 0) return;
    this.timer = setInterval(() => {
      if (this.pending === 0) void this.report();
    }, REPORT_INTERVAL_MS).unref();
    void this.report();
  }

  /** Writes the snapshot now (the timer's work; tests call it to not wait 5 s). One write at a time. */
  report(): Promise<void> {
    this.pending += 1;
    this.writing = this.writing.then(() => this.write()).finally(() => (this.pending -= 1));
    return this.writing;
  }

  /** Before TypeORM closes the pool: the write under way ends, then this replica's rows go. */
  async beforeApplicationShutdown(): Promise<void> {
    this.stopped = true;
    clearInterval(this.timer);
    await this.writing;
    if (this.timer === undefined) return;
    await this.dataSource
      .query(`DELETE FROM deployment_health WHERE replica = $1`, [this.replica])
      .catch((error) => this.warn(`Could not remove this replica's deployment health (removed by the others within 10 minutes): ${String(error)}`));
  }

  private async write(): Promise<void> {
    if (this.stopped) return;
    const snapshot = this.providers.deployments();
    if (snapshot.length === 0) return;
    const column = <T>(pick: (d: (typeof snapshot)[number]) => T) => snapshot.map(pick);
    try {
      await this.dataSource.query(REPORT_SQL, [
        this.replica,
        column((d) => d.id),
        column((d) => d.model),
        column((d) => d.label),
        column((d) => d.provider),
        column((d) => d.state),
        column((d) => (d.cooldownUntil === null ? null : new Date(d.cooldownUntil).toISOString())),
        column((d) => d.inFlight),
        column((d) => d.requests),
        column((d) => d.errors),
        column((d) => d.p50Ms),
      ]);
    } catch (error) {
      this.warn(`Could not write the deployments' health: ${String(error)}`);
    }
  }

  private warn(message: string): void {
    if (Date.now() - this.lastErrorLog < ERROR_LOG_INTERVAL_MS) return;
    this.lastErrorLog = Date.now();
    this.logger.warn(message);
  }
}

/** One deployment as the replicas that reported in the last 30 s see it together. */
export interface ReportedHealth {
  /** The worst of the replicas' states: cooldown, then probation, then healthy. */
  state: DeploymentState;
  cooldownUntil: Date | null;
  inFlight: number;
  /** Attempts and failed attempts in the last minute, summed across replicas. */
  requests: number;
  errors: number;
  /** The largest of the replicas' medians (a median of medians would need their latencies). */
  p50Ms: number | null;
  replicas: number;
}

/** Reports older than this are a replica that stopped reporting: not counted. */
const FRESH_SECONDS = 30;

/** The deployments' health as the replicas reported it in the last 30 s, by deployment id (`<model>/<label>`). */
export async function reportedHealth(dataSource: DataSource): Promise<Map<string, ReportedHealth>> {
  const rows: Array<{ deployment: string; state: DeploymentState; cooldown_until: Date | null; in_flight: number; requests: number; errors: number; p50_ms: number | null; replicas: number }> =
    await dataSource.query(
      `SELECT deployment,
              (ARRAY['healthy', 'probation', 'cooldown'])[max(CASE state WHEN 'cooldown' THEN 3 WHEN 'probation' THEN 2 ELSE 1 END)] AS state,
              max(cooldown_until) AS cooldown_until,
              sum(in_flight)::int AS in_flight, sum(requests)::int AS requests, sum(errors)::int AS errors,
              max(p50_ms) AS p50_ms, count(*)::int AS replicas
       FROM deployment_health
       WHERE updated_at > now() - make_interval(secs => $1)
       GROUP BY deployment`,
      [FRESH_SECONDS],
    );
  return new Map(
    rows.map((r) => [
      r.deployment,
      { state: r.state, cooldownUntil: r.cooldown_until, inFlight: r.in_flight, requests: r.requests, errors: r.errors, p50Ms: r.p50_ms, replicas: r.replicas },
    ]),
  );
}

function replicaName(): string {
  // Field 22 of /proc/self/stat, as ProcessIdentity (billing) reads it; the start in ms where there is no /proc.
  let startTime: string;
  try {
    const stat = readFileSync('/proc/self/stat', 'utf8');
    startTime = stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19];
  } catch {
    startTime = String(Math.round(Date.now() - process.uptime() * 1000));
  }
  return `${hostname()}~${process.pid}~${startTime}`;
}
