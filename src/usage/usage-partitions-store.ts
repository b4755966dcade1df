import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { QueryResult, QueryRunner, Repository } from 'typeorm';
import { UsageRecord } from './entities/usage-record.entity';

/** A partition of usage_records, as the CLI lists it. */
export interface UsagePartition {
  name: string;
  /** The range it holds: from (included; null for the converted table, which holds everything before) to (excluded). */
  from: string | null;
  to: string;
  /** PostgreSQL's estimate (from its last ANALYZE; -1 before any). */
  rows_estimate: number;
  /** On disk, indexes and TOAST included. */
  bytes: number;
  /** Being detached by retention (a detach a stop interrupted; the next run finishes it). */
  detaching: boolean;
}

/**
 * The statements on usage_records' daily partitions and on the expired rows: listing and
 * creating them (ensure_usage_record_partitions()), and the retention's session (`session`),
 * which holds its advisory lock, detaches and drops, and deletes in batches.
 */
@Injectable()
export class UsagePartitionsStore {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** Every partition, oldest first. */
  async list(): Promise<UsagePartition[]> {
    const rows = (await this.records.manager.query(
      `SELECT c.relname AS name, bound.lower, bound.upper, c.reltuples::bigint AS rows_estimate, pg_total_relation_size(c.oid) AS bytes,
              i.inhdetachpending AS detaching
         FROM pg_inherits i
         JOIN pg_class c ON c.oid = i.inhrelid
         CROSS JOIN LATERAL (
           SELECT substring(pg_get_expr(c.relpartbound, c.oid) FROM 'FROM \\(''([^'']+)''\\)')::timestamptz AS lower,
                  substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \\(''([^'']+)''\\)')::timestamptz AS upper) bound
        WHERE i.inhparent = 'usage_records'::regclass
        ORDER BY bound.upper`,
    )) as { name: string; lower: Date | null; upper: Date; rows_estimate: string; bytes: string; detaching: boolean }[];
    return rows.map((row) => ({
      name: row.name,
      from: row.lower ? row.lower.toISOString() : null,
      to: row.upper.toISOString(),
      rows_estimate: Number(row.rows_estimate),
      bytes: Number(row.bytes),
      detaching: row.detaching,
    }));
  }

  /** The partitions of the UTC days `fromDay` to `toDay` (`YYYY-MM-DD`, both included); returns how many were created. */
  async ensure(fromDay: string, toDay: string): Promise<number> {
    const [row] = (await this.records.manager.query('SELECT ensure_usage_record_partitions($1::date, $2::date) AS created', [fromDay, toDay])) as {
      created: number;
    }[];
    return row.created;
  }

  /** One connection of the pool, until `release`: an advisory lock belongs to the session. */
  async session(): Promise<RetentionSession> {
    const runner = this.records.manager.connection.createQueryRunner();
    await runner.connect();
    return new RetentionSession(runner);
  }
}

/** The retention's statements, on the one connection that holds its advisory lock (autocommit). */
export class RetentionSession {
  constructor(private readonly runner: QueryRunner) {}

  /** Whether this session got the lock (another session holding it: false, at once). */
  async tryLock(key: number): Promise<boolean> {
    const [{ locked }] = (await this.runner.query('SELECT pg_try_advisory_lock($1) AS locked', [key])) as { locked: boolean }[];
    return locked;
  }

  async unlock(key: number): Promise<void> {
    await this.runner.query('SELECT pg_advisory_unlock($1)', [key]);
  }

  /** Runs `work` with statement and lock timeouts of `timeout` (a PostgreSQL interval), reset after. */
  async withTimeouts<T>(timeout: string, work: () => Promise<T>): Promise<T> {
    await this.runner.query(`SET statement_timeout = '${timeout}'`);
    await this.runner.query(`SET lock_timeout = '${timeout}'`);
    try {
      return await work();
    } finally {
      await this.runner.query('RESET statement_timeout');
      await this.runner.query('RESET lock_timeout');
    }
  }

  /**
   * Detaches the partition and drops it. A detach that a stop interrupted is finished
   * (FINALIZE); CONCURRENTLY cannot run in a transaction (this session is autocommit).
   */
  async detachAndDrop(partition: Pick<UsagePartition, 'name' | 'detaching'>): Promise<void> {
    const name = `"${partition.name.replace(/"/g, '""')}"`;
    await this.runner.query(`ALTER TABLE usage_records DETACH PARTITION ${name} ${partition.detaching ? 'FINALIZE' : 'CONCURRENTLY'}`);
    await this.runner.query(`DROP TABLE ${name}`);
  }

  /** Deletes at most `limit` records created before `cutoff`; returns how many. */
  deleteRecordsBefore(cutoff: Date, limit: number): Promise<number> {
    return this.affected(`DELETE FROM usage_records WHERE (id, created_at) IN (SELECT id, created_at FROM usage_records WHERE created_at < $1 LIMIT $2)`, [
      cutoff,
      limit,
    ]);
  }

  /** Deletes at most `limit` daily totals of the days before `day` (`YYYY-MM-DD`); returns how many. */
  deleteTotalsBefore(day: string, limit: number): Promise<number> {
    return this.affected(`DELETE FROM usage_daily_totals WHERE ctid IN (SELECT ctid FROM usage_daily_totals WHERE day < $1::date LIMIT $2)`, [day, limit]);
  }

  release(): Promise<void> {
    return this.runner.release();
  }

  private async affected(sql: string, parameters: unknown[]): Promise<number> {
    const result = (await this.runner.query(sql, parameters, true)) as QueryResult;
    return result.affected ?? 0;
  }
}
