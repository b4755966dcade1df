import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository, SelectQueryBuilder } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import { AutoTopupAttempt } from './entities/auto-topup-attempt.entity';
import { TransactionType, WalletTransaction } from './entities/wallet-transaction.entity';
import { PendingSettlements } from '../common/settlements/pending-settlements';

/** Which ledger rows to read: all filters optional; `from` included, `until` excluded. */
export interface LedgerFilter {
  type?: TransactionType;
  from?: Date;
  until?: Date;
}

/** Rows per statement when the whole ledger of a range is read (the CSV download). */
const EXPORT_BATCH = 1_000;

/**
 * Reads of the ledger and of auto top-up attempts for the dashboard's billing page: the
 * same rows as /v1/wallet/transactions, with a date range. Every read walks the index
 * (workspace_id, created_at DESC, id DESC) by keyset, never by OFFSET, so the last page of
 * a long ledger costs what the first does.
 */
@Injectable()
export class LedgerQueryService {
  constructor(
    @InjectRepository(WalletTransaction) private readonly ledger: Repository<WalletTransaction>,
    @InjectRepository(AutoTopupAttempt) private readonly attempts: Repository<AutoTopupAttempt>,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** Newest first, `limit` rows after the cursor `startingAfter` (a transaction id of this wallet). */
  async page(workspaceId: string, filter: LedgerFilter, query: { limit: number; startingAfter?: string }): Promise<Page<WalletTransaction>> {
    await this.pending.written(workspaceId);
    if (query.startingAfter && !(await this.ledger.existsBy({ id: query.startingAfter, workspaceId }))) {
      throw ApiError.badRequest('starting_after does not name a transaction of this wallet.', 'starting_after');
    }
    return toPage(await this.select(workspaceId, filter, query.startingAfter).limit(query.limit + 1).getMany(), query.limit);
  }

  /** Every row of the filter, newest first, read in batches: for a download of any length. */
  async *all(workspaceId: string, filter: LedgerFilter): AsyncGenerator<WalletTransaction> {
    await this.pending.written(workspaceId);
    let after: string | undefined;
    for (;;) {
      const rows = await this.select(workspaceId, filter, after).limit(EXPORT_BATCH).getMany();
      yield* rows;
      if (rows.length < EXPORT_BATCH) return;
      after = rows[rows.length - 1].id;
    }
  }

  /** The ledger row written under this idempotency key for this workspace, if any (has a payment been credited yet?). */
  findByKey(workspaceId: string, idempotencyKey: string): Promise<WalletTransaction | null> {
    return this.ledger.findOneBy({ workspaceId, idempotencyKey });
  }

  /** The workspace's latest auto top-up attempts, newest first, with their outcome. */
  recentAttempts(workspaceId: string, limit = 20): Promise<AutoTopupAttempt[]> {
    return this.attempts.find({ where: { workspaceId }, order: { createdAt: 'DESC', id: 'DESC' }, take: limit });
  }

  private select(workspaceId: string, filter: LedgerFilter, startingAfter?: string): SelectQueryBuilder<WalletTransaction> {
    const builder = this.ledger
      .createQueryBuilder('t')
      .where('t.workspace_id = :workspaceId', { workspaceId })
      .orderBy('t.created_at', 'DESC')
      .addOrderBy('t.id', 'DESC');
    if (filter.type) builder.andWhere('t.type = :type', { type: filter.type });
    if (filter.from) builder.andWhere('t.created_at >= :from', { from: filter.from });
    if (filter.until) builder.andWhere('t.created_at < :until', { until: filter.until });
    if (startingAfter) {
      // Compared in SQL: created_at has microseconds, a JS Date only milliseconds.
      builder.andWhere('(t.created_at, t.id) < (SELECT c.created_at, c.id FROM wallet_transactions c WHERE c.id = :cursor)', {
        cursor: startingAfter,
      });
    }
    return builder;
  }
}
