import { Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { UsagePartition, UsagePartitionsStore } from './usage-partitions-store';

export type { UsagePartition } from './usage-partitions-store';

const DAY_MS = 86_400_000;
/** Days of partitions kept ready ahead of today: a week of failed maintenance before a record has nowhere to go. */
export const PARTITION_DAYS_AHEAD = 7;

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

  constructor(private readonly store: UsagePartitionsStore) {}

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
  list(): Promise<UsagePartition[]> {
    return this.store.list();
  }

  /** The UTC days from `from` to `to` (both included); returns how many were created. */
  ensure(from: Date, to: Date): Promise<number> {
    return this.store.ensure(utcDay(from), utcDay(to));
  }
}
