import { Injectable, Logger } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { InjectRepository } from '@nestjs/typeorm';
import { QueryResult, Repository } from 'typeorm';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { UsageRecord } from './entities/usage-record.entity';

/** Any number, the same in every replica: only one replica purges at a time. */
const RETENTION_LOCK_KEY = 4_242_101;
const DAY_MS = 86_400_000;

export interface PurgeResult {
  /** Records removed by this run. */
  deleted: number;
  /** Records created before this instant were removed. */
  cutoff: Date;
  /** False when another process was purging already (nothing was done). */
  ran: boolean;
}

/**
 * Deletes usage records older than USAGE_RETENTION_DAYS, once an hour (minute 17, off the
 * top-of-hour peaks). Only usage_records: the ledger (wallet_transactions) is kept for good.
 *
 * Deletes in batches of `batchSize` rows per statement, each its own short transaction, so
 * the first run on a large backlog never holds locks or bloats WAL in one huge statement,
 * and chat requests writing new records are never blocked behind it.
 */
@Injectable()
export class UsageRetention {
  private readonly logger = new Logger('UsageRetention');

  constructor(
    @InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  @Cron('0 17 * * * *', { name: 'usage-retention' })
  async scheduledPurge(): Promise<void> {
    try {
      await this.purgeExpired();
    } catch (error) {
      this.logger.error(`Purging expired usage records failed: ${String(error)}`);
    }
  }

  /**
   * Removes the records created before `now - retentionDays`. Safe to call at any time and
   * from several replicas: a session advisory lock lets one run while the others skip.
   */
  async purgeExpired(options: { now?: Date; batchSize?: number } = {}): Promise<PurgeResult> {
    const batchSize = options.batchSize ?? 10_000;
    const cutoff = new Date((options.now ?? new Date()).getTime() - this.config.usageRetentionDays * DAY_MS);
    // One connection of the pool for the whole run: the advisory lock belongs to the session.
    const runner = this.records.manager.connection.createQueryRunner();
    await runner.connect();
    try {
      const [{ locked }] = (await runner.query('SELECT pg_try_advisory_lock($1) AS locked', [RETENTION_LOCK_KEY])) as {
        locked: boolean;
      }[];
      if (!locked) return { deleted: 0, cutoff, ran: false };
      try {
        let deleted = 0;
        for (;;) {
          // usage_records_created_idx finds the oldest rows without scanning the table.
          const result = (await runner.query(
            `DELETE FROM usage_records
              WHERE id IN (SELECT id FROM usage_records WHERE created_at < $1 LIMIT $2)`,
            [cutoff, batchSize],
            true,
          )) as QueryResult;
          const count = result.affected ?? 0;
          deleted += count;
          if (count < batchSize) break;
        }
        if (deleted > 0) {
          this.logger.log(
            `Deleted ${deleted} usage record(s) created before ${cutoff.toISOString()} (USAGE_RETENTION_DAYS=${this.config.usageRetentionDays})`,
          );
        }
        return { deleted, cutoff, ran: true };
      } finally {
        await runner.query('SELECT pg_advisory_unlock($1)', [RETENTION_LOCK_KEY]);
      }
    } finally {
      await runner.release();
    }
  }
}
