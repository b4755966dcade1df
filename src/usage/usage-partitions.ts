import { Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { UsageRecord } from './entities/usage-record.entity';

const DAY_MS = 86_400_000;
/** Days of partitions kept ready ahead of today: a week of failed maintenance before a record has nowhere to go. */
export const PARTITION_DAYS_AHEAD = 7;

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

/** A UTC day as PostgreSQL's `date` takes it. */
export function utcDay(at: Date | number): string {
  return new Date(at).toISOString().slice(0, 10);
}

/**
 * The daily partitions of usage_records (migration PartitionedUsageRecords): every replica
 * creates the days from yesterday to a week ahead when it starts and then every hour;
 * ensure_usage_record_partitions() lets one create while the others wait and find them there.
 * Retention (UsageRetention) drops them.
 */
@Injectable()
export class UsagePartitions implements OnApplicationBootstrap {
  private readonly logger = new Logger('UsagePartitions');

  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.scheduledEnsure();
  }

  @Cron('0 7 * * * *', { name: 'usage-partitions' })
  async scheduledEnsure(): Promise<void> {
    try {
      const created = await this.ensureAround(new Date());
      if (created > 0) this.logger.log(`Created ${created} daily partition(s) of usage_records`);
    } catch (error) {
      this.logger.error(`Creating the next days' partitions of usage_records failed (tried again within the hour): ${String(error)}`);
    }
  }

  /** The days from yesterday to PARTITION_DAYS_AHEAD after `now`; returns how many were created. */
  ensureAround(now: Date): Promise<number> {
    return this.ensure(new Date(now.getTime() - DAY_MS), new Date(now.getTime() + PARTITION_DAYS_AHEAD * DAY_MS));
  }

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

  /** The UTC days from `from` to `to` (both included); returns how many were created. */
  async ensure(from: Date, to: Date): Promise<number> {
    const [row] = (await this.records.manager.query('SELECT ensure_usage_record_partitions($1::date, $2::date) AS created', [
      utcDay(from),
      utcDay(to),
    ])) as { created: number }[];
    return row.created;
  }
}
