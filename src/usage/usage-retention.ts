import { Injectable, Logger } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { UsagePartitions, utcDay } from './usage-partitions';
import { RetentionSession, UsagePartitionsStore } from './usage-partitions-store';

/** Any number, the same in every replica: only one replica purges at a time. */
const RETENTION_LOCK_KEY = 4_242_101;
const DAY_MS = 86_400_000;
/** Detaching waits for the transactions that may still read the partition: longer than a request's statements may. */
const DETACH_TIMEOUT = '5min';

export interface PurgeResult {
  /** Records deleted one by one (from a partition that spans the cutoff: a converted table). */
  deleted: number;
  /** The daily partitions dropped whole. */
  droppedPartitions: string[];
  /** Records created before this instant (the start of the window's first UTC day) are gone. */
  cutoff: Date;
  /** False when another process was purging already (nothing was done). */
  ran: boolean;
}

/**
 * Keeps the usage records of the last USAGE_RETENTION_DAYS UTC days, today included (the
 * window the usage endpoints answer for), once an hour at minute 17, off the top-of-hour peaks.
 *
 * usage_records is partitioned by UTC day: a day out of the window is dropped whole, a
 * metadata operation whatever its size (detached CONCURRENTLY, which blocks no reader or
 * writer, then dropped). Its daily totals go with it, so that every row of usage_daily_totals
 * is the exact sum of records that exist; the totals of the days kept are never touched. A
 * partition that spans the cutoff (the table converted by the migration, until all of it is
 * out of the window) has its expired rows deleted in batches, each a short transaction.
 * The ledger (wallet_transactions) and the keys' spend (api_key_spend) are kept for good.
 */
@Injectable()
export class UsageRetention {
  private readonly logger = new Logger('UsageRetention');

  constructor(
    private readonly store: UsagePartitionsStore,
    @InjectConfig() private readonly config: AppConfig,
    private readonly partitions: UsagePartitions,
  ) {}

  @Cron('0 17 * * * *', { name: 'usage-retention' })
  async scheduledPurge(): Promise<void> {
    try {
      await this.purgeExpired();
    } catch (error) {
      this.logger.error(`Purging expired usage records failed: ${String(error)}`);
    }
  }

  /** The first instant kept: the start of the window's first UTC day (today - (retentionDays - 1)). */
  cutoff(now: Date): Date {
    return new Date(Date.parse(utcDay(now)) - (this.config.usageRetentionDays - 1) * DAY_MS);
  }

  /**
   * Removes the records created before the window. Safe to call at any time and from
   * several replicas: a session advisory lock lets one run while the others skip.
   */
  async purgeExpired(options: { now?: Date; batchSize?: number } = {}): Promise<PurgeResult> {
    const batchSize = options.batchSize ?? 10_000;
    const cutoff = this.cutoff(options.now ?? new Date());
    // One connection of the pool for the whole run: the advisory lock belongs to the session.
    const session = await this.store.session();
    try {
      if (!(await session.tryLock(RETENTION_LOCK_KEY))) return { deleted: 0, droppedPartitions: [], cutoff, ran: false };
      try {
        const droppedPartitions = await this.dropExpiredPartitions(session, cutoff);
        const deleted = await inBatches(batchSize, () => session.deleteRecordsBefore(cutoff, batchSize));
        await inBatches(batchSize, () => session.deleteTotalsBefore(utcDay(cutoff), batchSize));
        if (deleted > 0 || droppedPartitions.length > 0) {
          this.logger.log(
            `Removed the usage records created before ${cutoff.toISOString()} (USAGE_RETENTION_DAYS=${this.config.usageRetentionDays}): ` +
              `${droppedPartitions.length} day(s) dropped whole${droppedPartitions.length ? ` (${droppedPartitions.join(', ')})` : ''}, ${deleted} record(s) deleted`,
          );
        }
        return { deleted, droppedPartitions, cutoff, ran: true };
      } finally {
        await session.unlock(RETENTION_LOCK_KEY);
      }
    } finally {
      await session.release();
    }
  }

  /** Detaches and drops the partitions whose whole range is before the cutoff; returns their names. */
  private async dropExpiredPartitions(session: RetentionSession, cutoff: Date): Promise<string[]> {
    const expired = (await this.partitions.list()).filter((partition) => Date.parse(partition.to) <= cutoff.getTime());
    if (expired.length === 0) return [];
    const dropped: string[] = [];
    await session.withTimeouts(DETACH_TIMEOUT, async () => {
      for (const partition of expired) {
        await session.detachAndDrop(partition);
        dropped.push(partition.name);
      }
    });
    return dropped;
  }
}

/** Runs a delete of at most `batchSize` rows until it deletes fewer; returns the rows deleted. */
async function inBatches(batchSize: number, deleteBatch: () => Promise<number>): Promise<number> {
  let deleted = 0;
  for (;;) {
    const count = await deleteBatch();
    deleted += count;
    if (count < batchSize) return deleted;
  }
}
