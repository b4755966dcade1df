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
import { MicroMillicents, toDecimalString } from './cost';
import { TransactionType, WalletTransaction } from './entities/wallet-transaction.entity';
import { Wallet } from './entities/wallet.entity';
import { carryToMicros, ChargeOutcome, LockedWallet, planSettlements } from './settlement-plan';
import { Lease, WalletLeases } from './wallet-leases';
import { isUniqueViolation } from '../common/database/unique-violation';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';

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

export type Settlement = Omit<ChargeOutcome, 'releasedFromLeaseMillicents'>;

/** One request's settlement in a batch (see `settleMany`). */
export interface SettlementOrder {
  hold: Hold;
  charge: Charge;
  /** A failed request: what it used is charged and refunded in the same transaction. */
  refund?: boolean;
  /** An earlier attempt may have committed: its ledger rows are looked up first. */
  retry?: boolean;
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
  ) {}

  /** The wallet's statements that run in no caller's transaction. */
  private get manager(): EntityManager {
    return this.wallets.manager;
  }

  /** Opens the wallet of a new workspace, inside the transaction that creates it. */
  async open(manager: EntityManager, workspaceId: string): Promise<void> {
    await manager.insert(Wallet, { workspaceId, balanceMillicents: 0, reservedMillicents: 0 });
  }

  async balance(workspaceId: string): Promise<WalletBalance> {
    const wallet = await this.wallets.findOneBy({ workspaceId });
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    return {
      balanceMillicents: wallet.balanceMillicents,
      reservedMillicents: wallet.reservedMillicents,
      availableMillicents: wallet.balanceMillicents - wallet.reservedMillicents,
    };
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
   * by one conditional statement of its own after the lease's spare went back. Null when
   * the wallet cannot cover it.
   */
  async reserve(workspaceId: string, requestId: string, amountMillicents: number, ttlMs: number): Promise<Hold | null> {
    const lease = await this.leases.admit(workspaceId, amountMillicents);
    if (lease) return { id: randomUUID(), workspaceId, amountMillicents, lease };
    await this.leases.returnSpare(workspaceId);
    return this.hold(workspaceId, requestId, amountMillicents, ttlMs);
  }

  /**
   * Charges the actual cost and releases the hold in one transaction, together with
   * whatever else must stand or fall with the charge (`alsoInTransaction`). The ledger row
   * is keyed by the hold, so settling the same hold twice charges once.
   */
  async settle(
    hold: Hold,
    charge: Charge,
    alsoInTransaction: (manager: EntityManager, settlement: Settlement) => Promise<void> = async () => undefined,
    options: { refund?: boolean } = {},
  ): Promise<Settlement> {
    const [settlement] = await this.settleMany([{ hold, charge, refund: options.refund }], (manager, [outcome]) =>
      outcome.applied ? alsoInTransaction(manager, outcome) : Promise.resolve(),
    );
    return settlement;
  }

  /**
   * Settles a batch of requests in one transaction (group commit): the holds and leases and
   * then the wallets are locked (the sweeper's order), every charge is worked out in order
   * (planSettlements), and what it changes (each wallet once, the holds, the ledger rows) is
   * written in one statement, with `alsoInTransaction` (the usage records, conversation
   * turns) in the same transaction: four round trips and the commit, however many requests. Once it commits, the leases learn what left them, and a wallet that went
   * below its auto top-up threshold is announced on `charges`.
   */
  async settleMany(
    orders: SettlementOrder[],
    alsoInTransaction: (manager: EntityManager, settlements: Settlement[]) => Promise<void> = async () => undefined,
  ): Promise<Settlement[]> {
    const { outcomes, belowThreshold } = await this.manager.transaction(async (manager) => {
      const holdRowIds = [...new Set(orders.map(({ hold }) => hold.lease?.id ?? hold.id))];
      const workspaceIds = [...new Set(orders.map(({ charge }) => charge.workspaceId))];
      // One round trip locks the holds and leases, then (the wallets' scan waits for the holds'
      // lock, which it reads) the wallets: the sweeper's order, so no deadlock with it. It also
      // sets the transaction's synchronous_commit (SETTLEMENT_SYNCHRONOUS_COMMIT), which
      // would otherwise cost a round trip of its own.
      const locked = await preparedRows<{
        hold_id: string | null;
        hold_amount: string | null;
        workspace_id: string | null;
        balance_millicents: string | null;
        reserved_millicents: string | null;
        carry: string | null;
        threshold: string | null;
      }>(
        manager,
        'settlement-lock',
        `WITH commit_mode AS MATERIALIZED (SELECT set_config('synchronous_commit', $3::text, true) AS mode),
              holds AS (SELECT id, amount_millicents FROM wallet_holds WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE),
              wallets AS (
                SELECT w.workspace_id, w.balance_millicents, w.reserved_millicents, w.carry_millicents::text AS carry,
                       CASE WHEN s.enabled THEN s.threshold_millicents END AS threshold
                  FROM wallets w LEFT JOIN auto_topup_settings s ON s.workspace_id = w.workspace_id
                 WHERE w.workspace_id = ANY($2::uuid[]) AND (SELECT count(*) FROM holds) >= 0 AND (SELECT count(*) FROM commit_mode) = 1
                 ORDER BY w.workspace_id FOR UPDATE OF w)
         SELECT id AS hold_id, amount_millicents AS hold_amount, NULL::uuid AS workspace_id, NULL::bigint AS balance_millicents,
                NULL::bigint AS reserved_millicents, NULL::text AS carry, NULL::bigint AS threshold FROM holds
         UNION ALL
         SELECT NULL, NULL, workspace_id, balance_millicents, reserved_millicents, carry, threshold FROM wallets`,
        [holdRowIds, workspaceIds, this.config.settlementSynchronousCommit],
      );
      const walletRows = locked.filter((row) => row.workspace_id !== null);
      const holdRows = locked.filter((row) => row.hold_id !== null);
      const applied = orders.some((order) => order.retry) ? await this.appliedKeys(manager, orders) : new Set<string>();
      const plan = planSettlements(
        new Map(
          walletRows.map((row): [string, LockedWallet] => [
            row.workspace_id!,
            { balance: BigInt(row.balance_millicents!), reserved: BigInt(row.reserved_millicents!), carry: carryToMicros(row.carry!) },
          ]),
        ),
        new Map(holdRows.map((row) => [row.hold_id!, BigInt(row.hold_amount!)])),
        orders.map(({ hold, charge, refund }) => ({
          key: hold.id,
          workspaceId: charge.workspaceId,
          holdRowId: hold.lease?.id ?? hold.id,
          holdKind: hold.lease ? 'lease' : 'request',
          costMicros: charge.costMicros,
          refund: refund === true,
          description: charge.description,
          alreadyApplied: applied.has(`usage:${hold.id}`),
        })),
      );
      const wallets = [...plan.wallets];
      // Everything the plan changes, in one statement. The ledger rows of one batch are a
      // microsecond apart, in settlement order, so that the ledger reads in the order its
      // balances were reached.
      await preparedRows(
        manager,
        'settlement-write',
        `WITH wallet_updates AS (
           UPDATE wallets w SET balance_millicents = v.balance, reserved_millicents = v.reserved, carry_millicents = v.carry, updated_at = now()
             FROM unnest($1::uuid[], $2::bigint[], $3::bigint[], $4::numeric[]) AS v(workspace_id, balance, reserved, carry)
            WHERE w.workspace_id = v.workspace_id
           RETURNING 1),
              released AS (DELETE FROM wallet_holds WHERE id = ANY($5::uuid[]) RETURNING 1),
              leases AS (
           UPDATE wallet_holds h SET amount_millicents = v.amount
             FROM unnest($6::uuid[], $7::bigint[]) AS v(id, amount) WHERE h.id = v.id
           RETURNING 1),
              ledger AS (
           INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, description, idempotency_key, created_at)
           SELECT v.workspace_id, v.type, v.amount, v.balance_after, v.description, v.idempotency_key, now() + (v.n - 1) * interval '1 microsecond'
             FROM unnest($8::uuid[], $9::text[], $10::bigint[], $11::bigint[], $12::text[], $13::text[])
                  WITH ORDINALITY AS v(workspace_id, type, amount, balance_after, description, idempotency_key, n)
           RETURNING 1)
         SELECT (SELECT count(*) FROM wallet_updates), (SELECT count(*) FROM released), (SELECT count(*) FROM leases), (SELECT count(*) FROM ledger)`,
        [
          wallets.map(([id]) => id),
          wallets.map(([, w]) => w.balance.toString()),
          wallets.map(([, w]) => w.reserved.toString()),
          wallets.map(([, w]) => toDecimalString(w.carry)),
          plan.releasedHolds,
          [...plan.leases.keys()],
          [...plan.leases.values()].map(String),
          plan.ledger.map((row) => row.workspaceId),
          plan.ledger.map((row) => row.type),
          plan.ledger.map((row) => row.amountMillicents.toString()),
          plan.ledger.map((row) => row.balanceAfterMillicents.toString()),
          plan.ledger.map((row) => row.description),
          plan.ledger.map((row) => row.idempotencyKey),
        ],
      );
      await alsoInTransaction(manager, plan.outcomes);
      const thresholds = new Map(walletRows.map((row) => [row.workspace_id!, row.threshold]));
      const belowThreshold = wallets
        .filter(([id, wallet]) => thresholds.get(id) != null && wallet.balance < BigInt(thresholds.get(id)!))
        .map(([id]) => id);
      return { outcomes: plan.outcomes, belowThreshold };
    });
    await Promise.all(
      orders.map(({ hold }, index) => {
        const outcome = outcomes[index];
        if (!hold.lease) return undefined;
        return outcome.applied
          ? this.leases.settled(hold.lease, hold.amountMillicents, outcome.releasedFromLeaseMillicents, outcome.chargedMillicents)
          : this.leases.release(hold.lease, hold.amountMillicents);
      }),
    );
    for (const workspaceId of belowThreshold) this.committedCharges.next(workspaceId);
    return outcomes.map(({ releasedFromLeaseMillicents: _released, ...settlement }) => settlement);
  }

  /** The usage ledger keys, among these orders', that an earlier attempt did write. */
  private async appliedKeys(manager: EntityManager, orders: SettlementOrder[]): Promise<Set<string>> {
    const rows = await queryRows<{ idempotency_key: string }>(
      manager,
      `SELECT idempotency_key FROM wallet_transactions WHERE idempotency_key = ANY($1::text[])`,
      [orders.map(({ hold }) => `usage:${hold.id}`)],
    );
    return new Set(rows.map((row) => row.idempotency_key));
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
