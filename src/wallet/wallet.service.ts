import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { Observable, Subject } from 'rxjs';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import { preparedRows } from '../common/database/prepared-rows';
import { queryRows } from '../common/database/query-rows';
import { Page, toPage } from '../common/pagination';
import { MicroMillicents } from './cost';
import { TransactionType, WalletTransaction } from './entities/wallet-transaction.entity';
import { Wallet } from './entities/wallet.entity';
import { Lease, WalletLeases } from './wallet-leases';
import { isUniqueViolation } from '../common/database/unique-violation';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { PendingSettlements } from '../common/settlements/pending-settlements';

export interface WalletBalance {
  balanceMillicents: number;
  reservedMillicents: number;
  availableMillicents: number;
}

export interface CreditCommand {
  workspaceId: string;
  /** Signed whole millicents. */
  amountMillicents: number;
  type: Extract<TransactionType, 'topup' | 'auto_topup' | 'adjustment' | 'refund'>;
  description?: string;
  /** Unique per movement of money (payment id, webhook event id, ...): a replay is a no-op. */
  idempotencyKey: string;
}

/** Money set aside for one request: a row of its own in wallet_holds, or an admission from this process's lease. */
export interface Hold {
  /** The hold's row; for a leased request, an id of its own that keys its settlement. */
  id: string;
  workspaceId: string;
  amountMillicents: number;
  /** Set when the request was admitted from a budget lease (see WalletLeases). */
  lease?: Lease;
}

export interface Charge {
  workspaceId: string;
  /** The exact cost; the wallet is charged whole millicents and carries the fraction. */
  costMicros: MicroMillicents;
  description: string;
}

/** What a settlement did to the wallet. */
export interface Settlement {
  /** Whole millicents taken from the balance (0 when the cost stayed within the carried fraction). */
  chargedMillicents: number;
  /** What stays charged: `chargedMillicents`, or 0 for a refunded request (what its usage record shows). */
  keptMillicents: number;
  /** Whole millicents of the cost the wallet could not cover; usually 0. */
  writtenOffMillicents: number;
  balanceAfterMillicents: number;
  /** False when this charge had already been settled: nothing was charged again. */
  applied: boolean;
  /**
   * Set when the settlement's usage record was optional (`settleMany`'s `recordsOptional`)
   * and the database refused it: why. The charge committed without it.
   */
  usageRecordRefused?: string;
}

interface ChargeOutcome {
  settlement: Settlement;
  /** What the charge took out of its lease (and so out of `reserved`): 0 for a request's own hold. */
  releasedFromLeaseMillicents: number;
  /** Its wallet ended below its auto top-up threshold. */
  belowThreshold: boolean;
}

/** One request's settlement in a batch (see `settleMany`). */
export interface SettlementOrder {
  hold: Hold;
  charge: Charge;
  /** A failed request: what it used is charged and refunded in the same transaction. */
  refund?: boolean;
  /** An earlier attempt may have committed: its ledger rows are looked up first. */
  retry?: boolean;
  /**
   * The row its money was set aside in, when that is not this process's hold or lease: a
   * settlement of a process that died (see SettlementJournal). This process's lease
   * accounting is then left alone.
   */
  heldIn?: { rowId: string; lease: boolean };
  /**
   * Its usage_records row, keyed by column (UsageService.row), inserted in the statement that
   * charges it, so that a charge never stands without its record; its charged_millicents is
   * set there to the settlement's `keptMillicents`.
   */
  usageRow?: Record<string, unknown>;
}

export interface TransactionQuery {
  limit: number;
  startingAfter?: string;
  type?: TransactionType;
}


/**
 * The most a wallet may hold: balances travel as JSON numbers, which are exact only up to
 * 2^53 - 1 (a balance past it would break GET /v1/wallet and the ledger for good).
 */
export const MAX_BALANCE_MILLICENTS = Number.MAX_SAFE_INTEGER;

/** The wallet: balance, reservations and the append-only ledger. */
@Injectable()
export class WalletService {
  private readonly committedCharges = new Subject<string>();
  /**
   * The workspace of each settlement, once it has committed (in the order they commit). The
   * wallet's auto top-up listens, so no caller has to remember to start it.
   */
  readonly charges: Observable<string> = this.committedCharges.asObservable();

  constructor(
    @InjectRepository(Wallet) private readonly wallets: Repository<Wallet>,
    @InjectRepository(WalletTransaction) private readonly ledger: Repository<WalletTransaction>,
    private readonly leases: WalletLeases,
    @InjectConfig() private readonly config: Pick<AppConfig, 'settlementSynchronousCommit'>,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** The wallet's statements that run in no caller's transaction. */
  private get manager(): EntityManager {
    return this.wallets.manager;
  }

  /** Opens the wallet of a new workspace, inside the transaction that creates it. */
  async open(manager: EntityManager, workspaceId: string): Promise<void> {
    await manager.insert(Wallet, { workspaceId, balanceMillicents: 0, reservedMillicents: 0 });
  }

  /**
   * `reservedMillicents` is what requests in flight hold: their own holds, and what the budget
   * leases admitted them with (this process's exactly; another process's as it last reported,
   * at most a second ago), not the unused spare of a lease, which any request may still use.
   *
   * `afterPendingSettlements` (the default): once the settlements this process answered for
   * have committed (see PendingSettlements). A request's own admission needs not wait: what
   * they will charge is still set aside, so what is available does not change when they commit.
   */
  async balance(workspaceId: string, { afterPendingSettlements = true } = {}): Promise<WalletBalance> {
    if (afterPendingSettlements) await this.pending.written(workspaceId);
    const own = this.leases.heldBy(workspaceId);
    const [wallet] = await queryRows<{ balance: string; held: string }>(
      this.manager,
      `SELECT w.balance_millicents AS balance,
              (SELECT coalesce(sum(CASE WHEN h.kind = 'request' THEN h.amount_millicents
                                        WHEN h.id = ANY($2::uuid[]) THEN 0
                                        ELSE least(h.held_millicents, h.amount_millicents) END), 0)
                 FROM wallet_holds h WHERE h.workspace_id = w.workspace_id) AS held
         FROM wallets w WHERE w.workspace_id = $1`,
      [workspaceId, own.leaseIds],
    );
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    const balanceMillicents = Number(wallet.balance);
    const reservedMillicents = Number(wallet.held) + own.admitted;
    return { balanceMillicents, reservedMillicents, availableMillicents: balanceMillicents - reservedMillicents };
  }

  /**
   * What a hold can take now: the balance less everything set aside, leases' spare included
   * (after `reserve` recalled the other processes' idle spare). What an output cap is sized by.
   */
  async spendable(workspaceId: string): Promise<number> {
    const [wallet] = await queryRows<{ spendable: string }>(
      this.manager,
      `SELECT balance_millicents - reserved_millicents AS spendable FROM wallets WHERE workspace_id = $1`,
      [workspaceId],
    );
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    return Number(wallet.spendable);
  }

  /**
   * Moves money in (or out, for a negative adjustment) with its ledger row, in one
   * transaction (the caller's, when given: a new workspace's opening credit commits with the
   * workspace). A repeated idempotency key returns the row already written and changes
   * nothing. An adjustment may not take the balance below what is reserved, and no credit
   * may take it above MAX_BALANCE_MILLICENTS.
   */
  async credit(command: CreditCommand, manager?: EntityManager): Promise<WalletTransaction> {
    const { workspaceId, amountMillicents, type, idempotencyKey } = command;
    assertUuid(workspaceId, 'workspace');
    if (!Number.isSafeInteger(amountMillicents) || amountMillicents === 0) {
      throw ApiError.badRequest('amount must be a non-zero whole number of millicents.', 'amount');
    }
    if (type !== 'adjustment' && amountMillicents < 0) {
      throw ApiError.badRequest(`A ${type} must be positive; use an adjustment to take money out.`, 'amount');
    }

    const existing = await (manager ?? this.manager).getRepository(WalletTransaction).findOneBy({ idempotencyKey });
    if (existing) return sameMovementOrConflict(existing, command);
    if (manager) return this.creditIn(manager, command);
    try {
      return await this.manager.transaction((transaction) => this.creditIn(transaction, command));
    } catch (error) {
      if (isUniqueViolation(error)) {
        // A concurrent replay won the race: the transaction rolled back, the winner's row stands.
        const winner = await this.findByIdempotencyKey(idempotencyKey);
        if (winner) return sameMovementOrConflict(winner, command);
      }
      throw error;
    }
  }

  /** The credit itself: both bounds are in the statement that moves the money, so concurrent credits cannot pass them. */
  private async creditIn(manager: EntityManager, command: CreditCommand): Promise<WalletTransaction> {
    const { workspaceId, amountMillicents, type, idempotencyKey } = command;
    const updated = await manager
      .createQueryBuilder()
      .update(Wallet)
      .set({ balanceMillicents: () => 'balance_millicents + :amount', updatedAt: () => 'now()' })
      .where('workspace_id = :workspaceId AND balance_millicents + :amount >= reserved_millicents')
      .andWhere('balance_millicents + :amount <= :maxBalance')
      .setParameters({ workspaceId, amount: amountMillicents, maxBalance: MAX_BALANCE_MILLICENTS })
      .returning('balance_millicents')
      .execute();
    const rows = updated.raw as Array<{ balance_millicents: string }>;
    if (rows.length === 0) await this.explainRefusedCredit(manager, workspaceId, amountMillicents);
    const ledger = manager.getRepository(WalletTransaction);
    return ledger.save(
      ledger.create({
        workspaceId,
        type,
        amountMillicents,
        balanceAfterMillicents: Number(rows[0].balance_millicents),
        description: command.description ?? defaultDescription(type),
        idempotencyKey,
      }),
    );
  }

  /**
   * Sets money aside for a request: one conditional statement that raises `reserved` only
   * if `balance - reserved` covers the amount, and records the hold. Null when it does not.
   */
  async hold(workspaceId: string, requestId: string, amountMillicents: number, ttlMs: number): Promise<Hold | null> {
    if (!Number.isSafeInteger(amountMillicents) || amountMillicents <= 0) {
      throw new Error(`A hold must be a positive whole number of millicents (got ${amountMillicents})`);
    }
    const rows = await queryRows<{ id: string }>(
      this.manager,
      `WITH reserved AS (
         UPDATE wallets SET reserved_millicents = reserved_millicents + $2, updated_at = now()
          WHERE workspace_id = $1 AND balance_millicents - reserved_millicents >= $2
          RETURNING workspace_id)
       INSERT INTO wallet_holds (workspace_id, request_id, amount_millicents, expires_at)
       SELECT workspace_id, $3, $2, now() + make_interval(secs => $4::double precision / 1000) FROM reserved
       RETURNING id`,
      [workspaceId, amountMillicents, requestId, ttlMs],
    );
    return rows.length > 0 ? { id: rows[0].id, workspaceId, amountMillicents } : null;
  }

  /**
   * Sets money aside for a request: admitted from this process's lease on the workspace's
   * wallet (no write to the wallet's row), or, when the lease cannot be grown that far, held
   * by one conditional statement of its own after the lease's spare went back, and once
   * more after the other processes gave back theirs. Null when the wallet cannot cover it.
   */
  async reserve(workspaceId: string, requestId: string, amountMillicents: number, ttlMs: number): Promise<Hold | null> {
    const lease = await this.leases.admit(workspaceId, amountMillicents);
    if (lease) return { id: randomUUID(), workspaceId, amountMillicents, lease };
    return this.holdRecallingLeases(workspaceId, requestId, amountMillicents, ttlMs);
  }

  /**
   * A hold in a row of its own (never admitted from a lease), after this process's lease gave
   * back its spare, and once more after the other processes gave back theirs: for work whose
   * settlement is keyed by something else than its hold (the batches of document embeddings),
   * on a wallet whose money leases may be holding. Null when the wallet cannot cover it.
   */
  async holdRecallingLeases(workspaceId: string, requestId: string, amountMillicents: number, ttlMs: number): Promise<Hold | null> {
    await this.leases.returnSpare(workspaceId);
    const held = await this.hold(workspaceId, requestId, amountMillicents, ttlMs);
    if (held || !(await this.leases.recallOthers(workspaceId))) return held;
    return this.hold(workspaceId, requestId, amountMillicents, ttlMs);
  }

  /**
   * Charges the actual cost and releases the hold, together with whatever else must stand
   * or fall with the charge (`alsoInTransaction`: then in one transaction). The ledger row
   * is keyed by the hold, so settling the same hold twice charges once.
   */
  async settle(
    hold: Hold,
    charge: Charge,
    alsoInTransaction?: (manager: EntityManager, settlement: Settlement) => Promise<void>,
    options: { refund?: boolean } = {},
  ): Promise<Settlement> {
    const orders = [{ hold, charge, refund: options.refund }];
    const [settlement] = await this.settleMany(orders, {
      alsoInTransaction:
        alsoInTransaction && ((manager, [outcome]) => (outcome.applied ? alsoInTransaction(manager, outcome) : Promise.resolve())),
    });
    return settlement;
  }

  /**
   * Settles a batch of requests (group commit) with the database's `settle_charges()` (see
   * its migration): the holds, leases and wallets locked, every charge worked out in order,
   * each wallet written once, the ledger rows and the orders' usage records inserted, all in
   * one statement. Without `alsoInTransaction` that statement is autocommitted: one round
   * trip however many requests. With it (conversation turns), the statement and then
   * `alsoInTransaction` share a transaction. With `recordsOptional`, a usage record that the
   * database refuses as data is left out and the charge still commits (`usageRecordRefused`).
   * Once it commits, the leases learn what left them (also what an earlier attempt that
   * committed unseen took), and a wallet that went below its auto top-up threshold is
   * announced on `charges`.
   */
  async settleMany(
    orders: SettlementOrder[],
    options: {
      alsoInTransaction?: (manager: EntityManager, settlements: Settlement[]) => Promise<void>;
      recordsOptional?: boolean;
    } = {},
  ): Promise<Settlement[]> {
    const { alsoInTransaction, recordsOptional = false } = options;
    const outcomes = alsoInTransaction
      ? await this.manager.transaction(async (manager) => {
          const settled = await this.settleCharges(manager, orders, recordsOptional);
          await alsoInTransaction(manager, settled.map(({ settlement }) => settlement));
          return settled;
        })
      : await this.settleCharges(this.manager, orders, recordsOptional);
    await Promise.all(
      orders.map(({ hold }, index) => {
        const { settlement, releasedFromLeaseMillicents } = outcomes[index];
        if (!hold.lease) return undefined;
        return this.leases.settled(hold.lease, hold.amountMillicents, releasedFromLeaseMillicents, settlement.chargedMillicents);
      }),
    );
    const belowThreshold = new Set(orders.filter((_, index) => outcomes[index].belowThreshold).map(({ charge }) => charge.workspaceId));
    for (const workspaceId of belowThreshold) this.committedCharges.next(workspaceId);
    return outcomes.map(({ settlement }) => settlement);
  }

  /** One call of settle_charges() on the manager's connection (a pooled one, autocommitted, outside a transaction). */
  private async settleCharges(manager: EntityManager, orders: SettlementOrder[], recordsOptional: boolean): Promise<ChargeOutcome[]> {
    const usageRows = orders.some(({ usageRow }) => usageRow) ? JSON.stringify(orders.map(({ usageRow }) => usageRow ?? null)) : null;
    const rows = await preparedRows<{
      charged_millicents: string;
      kept_millicents: string;
      written_off_millicents: string;
      balance_after_millicents: string;
      applied: boolean;
      released_from_lease_millicents: string;
      below_threshold: boolean;
      record_error: string | null;
    }>(manager, 'settle-charges', 'SELECT * FROM settle_charges($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)', [
      orders.map(({ hold }) => hold.id),
      orders.map(({ charge }) => charge.workspaceId),
      orders.map(({ hold, heldIn }) => heldIn?.rowId ?? hold.lease?.id ?? hold.id),
      orders.map(({ hold, heldIn }) => heldIn?.lease ?? hold.lease !== undefined),
      orders.map(({ charge }) => charge.costMicros.toString()),
      orders.map(({ refund }) => refund === true),
      orders.map(({ charge }) => charge.description),
      orders.some(({ retry }) => retry === true),
      this.config.settlementSynchronousCommit,
      usageRows,
      recordsOptional,
    ]);
    return rows.map((row) => ({
      settlement: {
        chargedMillicents: Number(row.charged_millicents),
        keptMillicents: Number(row.kept_millicents),
        writtenOffMillicents: Number(row.written_off_millicents),
        balanceAfterMillicents: Number(row.balance_after_millicents),
        applied: row.applied,
        ...(row.record_error !== null && { usageRecordRefused: row.record_error }),
      },
      releasedFromLeaseMillicents: Number(row.released_from_lease_millicents),
      belowThreshold: row.below_threshold,
    }));
  }

  /**
   * Raises a hold by `extraMillicents` with the same conditional statement as `hold()`, for
   * a request that needs more (the next iteration of a tool loop). False when the wallet
   * cannot cover it; the hold is unchanged then.
   */
  async extendHold(hold: Hold, extraMillicents: number, ttlMs: number): Promise<boolean> {
    if (extraMillicents <= 0) return true;
    if (hold.lease) {
      const admitted = await this.leases.admitMore(hold.lease, extraMillicents);
      if (admitted) hold.amountMillicents += extraMillicents;
      return admitted;
    }
    // The hold is locked first (the sweeper's order: hold, then wallet), so a hold swept
    // meanwhile is seen as gone and the wallet is left untouched.
    const rows = await queryRows<{ amount_millicents: string }>(
      this.manager,
      `WITH live AS (SELECT id, workspace_id FROM wallet_holds WHERE id = $2 FOR UPDATE),
            reserved AS (
              UPDATE wallets w SET reserved_millicents = w.reserved_millicents + $1, updated_at = now()
                FROM live
               WHERE w.workspace_id = live.workspace_id AND w.balance_millicents - w.reserved_millicents >= $1
               RETURNING w.workspace_id)
       UPDATE wallet_holds h
          SET amount_millicents = h.amount_millicents + $1,
              expires_at = now() + make_interval(secs => $3::double precision / 1000)
         FROM reserved WHERE h.id = $2
       RETURNING h.amount_millicents`,
      [extraMillicents, hold.id, ttlMs],
    );
    if (rows.length === 0) return false;
    hold.amountMillicents = Number(rows[0].amount_millicents);
    return true;
  }

  /**
   * Pushes a hold's expiry out while its request still runs, so that a long answer is not
   * swept (and its money held again by another request) before it settles.
   */
  async keepHoldAlive(hold: Hold, ttlMs: number): Promise<void> {
    // A leased request lives as long as its process: the lease's own heartbeat keeps it.
    if (hold.lease) return;
    await this.manager.query(
      `UPDATE wallet_holds SET expires_at = now() + make_interval(secs => $2::double precision / 1000) WHERE id = $1`,
      [hold.id, ttlMs],
    );
  }

  /** Gives a hold back without charging (a request that failed before costing anything). */
  async release(hold: Hold): Promise<void> {
    if (hold.lease) return this.leases.release(hold.lease, hold.amountMillicents);
    await this.manager.query(
      `WITH released AS (DELETE FROM wallet_holds WHERE id = $1 RETURNING workspace_id, amount_millicents)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - r.amount_millicents, updated_at = now()
       FROM released r WHERE w.workspace_id = r.workspace_id`,
      [hold.id],
    );
  }

  /**
   * Releases holds past their expiry: a process that died mid-request must never freeze
   * money. Returns how many holds were released.
   */
  async releaseExpiredHolds(): Promise<number> {
    const rows = await queryRows<{ released: string }>(
      this.manager,
      `WITH expired AS (DELETE FROM wallet_holds WHERE expires_at < now() RETURNING workspace_id, amount_millicents),
            totals AS (SELECT workspace_id, sum(amount_millicents) AS amount, count(*) AS holds FROM expired GROUP BY workspace_id)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - t.amount, updated_at = now()
       FROM totals t WHERE w.workspace_id = t.workspace_id
       RETURNING t.holds AS released`,
      [],
    );
    return rows.reduce((sum, row) => sum + Number(row.released), 0);
  }

  /** Newest first, with `limit` and an OpenAI-style `starting_after` cursor. */
  async transactions(workspaceId: string, query: TransactionQuery): Promise<Page<WalletTransaction>> {
    await this.pending.written(workspaceId);
    const builder = this.ledger
      .createQueryBuilder('t')
      .where('t.workspace_id = :workspaceId', { workspaceId })
      .orderBy('t.created_at', 'DESC')
      .addOrderBy('t.id', 'DESC')
      .limit(query.limit + 1);
    if (query.type) builder.andWhere('t.type = :type', { type: query.type });
    if (query.startingAfter) {
      const cursor = await this.ledger.existsBy({ id: query.startingAfter, workspaceId });
      if (!cursor) {
        throw ApiError.badRequest('starting_after does not name a transaction of this wallet.', 'starting_after');
      }
      // Compared in SQL: created_at has microseconds, a JS Date only milliseconds.
      builder.andWhere('(t.created_at, t.id) < (SELECT c.created_at, c.id FROM wallet_transactions c WHERE c.id = :cursor)', {
        cursor: query.startingAfter,
      });
    }
    return toPage(await builder.getMany(), query.limit);
  }

  private async findByIdempotencyKey(idempotencyKey: string): Promise<WalletTransaction | null> {
    return this.ledger.findOneBy({ idempotencyKey });
  }

  private async explainRefusedCredit(manager: EntityManager, workspaceId: string, amountMillicents: number): Promise<never> {
    const wallet = await manager.getRepository(Wallet).findOneBy({ workspaceId });
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    if (BigInt(wallet.balanceMillicents) + BigInt(amountMillicents) > BigInt(MAX_BALANCE_MILLICENTS)) {
      throw ApiError.badRequest(
        `The credit would take the balance (${wallet.balanceMillicents}) above ${MAX_BALANCE_MILLICENTS} millicents, ` +
          'the most a wallet can hold.',
        'amount',
        'balance_limit_exceeded',
      );
    }
    throw ApiError.badRequest(
      `The adjustment would take the balance (${wallet.balanceMillicents}) below the amount reserved ` +
        `for requests in flight (${wallet.reservedMillicents}).`,
      'amount',
      'insufficient_balance',
    );
  }
}

/** A replayed key must be the same movement of money; anything else is a mistake, not a replay. */
function sameMovementOrConflict(row: WalletTransaction, command: CreditCommand): WalletTransaction {
  if (row.workspaceId !== command.workspaceId || row.type !== command.type || row.amountMillicents !== command.amountMillicents) {
    throw ApiError.conflict(
      'This idempotency key was already used for a different movement of money.',
      'idempotency_key_reused',
    );
  }
  return row;
}

function defaultDescription(type: TransactionType): string {
  switch (type) {
    case 'topup':
      return 'Manual top-up';
    case 'auto_topup':
      return 'Automatic top-up';
    case 'refund':
      return 'Refund for a failed request';
    case 'adjustment':
      return 'Manual adjustment';
    case 'usage':
      return 'API usage';
  }
}
