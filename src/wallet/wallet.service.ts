import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Observable, Subject } from 'rxjs';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import { queryRows } from '../common/database/query-rows';
import { Page, toPage } from '../common/pagination';
import { MicroMillicents, toDecimalString } from './cost';
import { WalletHold } from './entities/wallet-hold.entity';
import { TransactionType, WalletTransaction } from './entities/wallet-transaction.entity';
import { Wallet } from './entities/wallet.entity';

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

export interface Hold {
  id: string;
  workspaceId: string;
  amountMillicents: number;
}

export interface Charge {
  workspaceId: string;
  /** The exact cost; the wallet is charged whole millicents and carries the fraction. */
  costMicros: MicroMillicents;
  description: string;
}

export interface Settlement {
  /** Whole millicents taken from the balance (0 when the cost stayed within the carried fraction). */
  chargedMillicents: number;
  /** Whole millicents of the cost the wallet could not cover (see `settle`); usually 0. */
  writtenOffMillicents: number;
  balanceAfterMillicents: number;
  /** False when this hold had already been settled: nothing was charged again. */
  applied: boolean;
}

export interface TransactionQuery {
  limit: number;
  startingAfter?: string;
  type?: TransactionType;
}

const UNIQUE_VIOLATION = '23505';

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
      if ((error as { code?: string }).code === UNIQUE_VIOLATION) {
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
   * Charges the actual cost and releases the hold in one transaction, together with
   * whatever else must stand or fall with the charge (`alsoInTransaction`: the usage
   * record, conversation messages). The ledger row is keyed by the hold, so settling the
   * same hold twice charges once. Once committed, the charge is announced on `charges`.
   */
  async settle(
    hold: Hold,
    charge: Charge,
    alsoInTransaction: (manager: EntityManager, settlement: Settlement) => Promise<void> = async () => undefined,
    options: { refund?: boolean } = {},
  ): Promise<Settlement> {
    const idempotencyKey = `usage:${hold.id}`;
    let committed: Settlement;
    try {
      committed = await this.manager.transaction(async (manager) => {
        const [row] = await queryRows<{ balance_millicents: string; charged: string; written_off: string; carry_before: string }>(
          manager,
          // The charge is the cost in whole millicents (the fraction is carried), but never more
          // than the wallet can cover: this request's own hold plus what no other request holds.
          // A cost past that (a provider counting more prompt tokens than the estimate, on a
          // nearly empty wallet) is written off, so the balance never goes below zero and never
          // below what other requests in flight hold, however many overshoot at once.
          `WITH released AS (DELETE FROM wallet_holds WHERE id = $2 RETURNING amount_millicents),
                held AS (SELECT coalesce(sum(amount_millicents), 0) AS amount FROM released),
                current AS (SELECT balance_millicents, reserved_millicents, carry_millicents FROM wallets WHERE workspace_id = $1 FOR UPDATE),
                due AS (
                  SELECT c.carry_millicents AS carry_before,
                         floor(c.carry_millicents + $3::numeric) AS whole,
                         (c.carry_millicents + $3::numeric) - floor(c.carry_millicents + $3::numeric) AS fraction,
                         greatest(c.balance_millicents - (c.reserved_millicents - held.amount), 0) AS coverable,
                         held.amount AS held
                    FROM current c CROSS JOIN held)
           UPDATE wallets w SET
             balance_millicents = w.balance_millicents - least(d.whole, d.coverable),
             carry_millicents = CASE WHEN d.whole <= d.coverable THEN d.fraction ELSE 0 END,
             reserved_millicents = w.reserved_millicents - d.held,
             updated_at = now()
           FROM due d
           WHERE w.workspace_id = $1
           RETURNING w.balance_millicents, least(d.whole, d.coverable)::bigint AS charged,
                     (d.whole - least(d.whole, d.coverable))::bigint AS written_off, d.carry_before`,
          [charge.workspaceId, hold.id, toDecimalString(charge.costMicros)],
        );
        if (!row) throw new Error(`No wallet for workspace ${charge.workspaceId}`);
        const settlement: Settlement = {
          chargedMillicents: Number(row.charged),
          writtenOffMillicents: Number(row.written_off),
          balanceAfterMillicents: Number(row.balance_millicents),
          applied: true,
        };
        if (settlement.chargedMillicents > 0) {
          await manager.insert(WalletTransaction, {
            workspaceId: charge.workspaceId,
            type: 'usage',
            amountMillicents: -settlement.chargedMillicents,
            balanceAfterMillicents: settlement.balanceAfterMillicents,
            description: charge.description,
            idempotencyKey,
          });
        }
        if (options.refund) {
          settlement.balanceAfterMillicents = await this.refund(manager, hold, charge, settlement.chargedMillicents, row.carry_before);
        }
        await alsoInTransaction(manager, settlement);
        return settlement;
      });
    } catch (error) {
      if ((error as { code?: string }).code === UNIQUE_VIOLATION) {
        const existing = await this.findByIdempotencyKey(idempotencyKey);
        if (existing) {
          return { chargedMillicents: 0, writtenOffMillicents: 0, balanceAfterMillicents: existing.balanceAfterMillicents, applied: false };
        }
      }
      throw error;
    }
    this.committedCharges.next(charge.workspaceId);
    return committed;
  }

  /**
   * Raises a hold by `extraMillicents` with the same conditional statement as `hold()`, for
   * a request that needs more (the next iteration of a tool loop). False when the wallet
   * cannot cover it; the hold is unchanged then.
   */
  async extendHold(hold: Hold, extraMillicents: number, ttlMs: number): Promise<boolean> {
    if (extraMillicents <= 0) return true;
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
    await this.manager.query(
      `UPDATE wallet_holds SET expires_at = now() + make_interval(secs => $2::double precision / 1000) WHERE id = $1`,
      [hold.id, ttlMs],
    );
  }

  /**
   * Gives back what a failed request was charged, and puts the carry back where it was
   * before the charge, so the wallet ends exactly where it was. Runs in the settlement's
   * transaction, which still holds the wallet's row lock.
   */
  private async refund(manager: EntityManager, hold: Hold, charge: Charge, chargedMillicents: number, carryBefore: string): Promise<number> {
    const [row] = await queryRows<{ balance_millicents: string }>(
      manager,
      `UPDATE wallets SET balance_millicents = balance_millicents + $2, carry_millicents = $3::numeric, updated_at = now()
       WHERE workspace_id = $1
       RETURNING balance_millicents`,
      [charge.workspaceId, chargedMillicents, carryBefore],
    );
    const balanceAfter = Number(row.balance_millicents);
    // Below a whole millicent nothing was taken: only the carry had to be wound back.
    if (chargedMillicents === 0) return balanceAfter;
    await manager.insert(WalletTransaction, {
      workspaceId: charge.workspaceId,
      type: 'refund',
      amountMillicents: chargedMillicents,
      balanceAfterMillicents: balanceAfter,
      description: `Refund: ${charge.description}`,
      idempotencyKey: `refund:${hold.id}`,
    });
    return balanceAfter;
  }

  /** Gives a hold back without charging (a request that failed before costing anything). */
  async release(hold: Hold): Promise<void> {
    await this.manager.query(
      `WITH released AS (DELETE FROM wallet_holds WHERE id = $1 RETURNING workspace_id, amount_millicents)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - r.amount_millicents, updated_at = now()
       FROM released r WHERE w.workspace_id = r.workspace_id`,
      [hold.id],
    );
  }

  /**
   * Whether the workspace's request `requestId` still holds money (its hold is neither
   * settled, released nor swept). For the idempotency claim, which tells a request still
   * under way from one that died; in the caller's transaction when given one.
   */
  async hasHoldFor(workspaceId: string, requestId: string, manager: EntityManager = this.manager): Promise<boolean> {
    return manager.exists(WalletHold, { where: { workspaceId, requestId } });
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
