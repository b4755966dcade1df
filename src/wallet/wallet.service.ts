import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource, EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import { Page, toPage } from '../common/pagination';
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

export interface TransactionQuery {
  limit: number;
  startingAfter?: string;
  type?: TransactionType;
}

const UNIQUE_VIOLATION = '23505';

/** The wallet: balance, reservations and the append-only ledger. */
@Injectable()
export class WalletService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** Opens the wallet of a new workspace, inside the transaction that creates it. */
  async open(manager: EntityManager, workspaceId: string): Promise<void> {
    await manager.insert(Wallet, { workspaceId, balanceMillicents: 0, reservedMillicents: 0 });
  }

  async balance(workspaceId: string): Promise<WalletBalance> {
    const wallet = await this.dataSource.getRepository(Wallet).findOneBy({ workspaceId });
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    return {
      balanceMillicents: wallet.balanceMillicents,
      reservedMillicents: wallet.reservedMillicents,
      availableMillicents: wallet.balanceMillicents - wallet.reservedMillicents,
    };
  }

  /**
   * Moves money in (or out, for a negative adjustment) with its ledger row, in one
   * transaction. A repeated idempotency key returns the row already written and changes
   * nothing. An adjustment may not take the balance below what is reserved.
   */
  async credit(command: CreditCommand): Promise<WalletTransaction> {
    const { workspaceId, amountMillicents, type, idempotencyKey } = command;
    assertUuid(workspaceId, 'workspace');
    if (!Number.isSafeInteger(amountMillicents) || amountMillicents === 0) {
      throw ApiError.badRequest('amount must be a non-zero whole number of millicents.', 'amount');
    }
    if (type !== 'adjustment' && amountMillicents < 0) {
      throw ApiError.badRequest(`A ${type} must be positive; use an adjustment to take money out.`, 'amount');
    }

    const existing = await this.findByIdempotencyKey(idempotencyKey);
    if (existing) return existing;
    try {
      return await this.dataSource.transaction(async (manager) => {
        const updated = await manager
          .createQueryBuilder()
          .update(Wallet)
          .set({ balanceMillicents: () => 'balance_millicents + :amount', updatedAt: () => 'now()' })
          .where('workspace_id = :workspaceId AND balance_millicents + :amount >= reserved_millicents')
          .setParameters({ workspaceId, amount: amountMillicents })
          .returning('balance_millicents')
          .execute();
        const rows = updated.raw as Array<{ balance_millicents: string }>;
        if (rows.length === 0) await this.explainRefusedCredit(manager, workspaceId);
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
      });
    } catch (error) {
      if ((error as { code?: string }).code === UNIQUE_VIOLATION) {
        // A concurrent replay won the race: the transaction rolled back, the winner's row stands.
        const winner = await this.findByIdempotencyKey(idempotencyKey);
        if (winner) return winner;
      }
      throw error;
    }
  }

  /** Newest first, with `limit` and an OpenAI-style `starting_after` cursor. */
  async transactions(workspaceId: string, query: TransactionQuery): Promise<Page<WalletTransaction>> {
    const builder = this.dataSource
      .getRepository(WalletTransaction)
      .createQueryBuilder('t')
      .where('t.workspace_id = :workspaceId', { workspaceId })
      .orderBy('t.created_at', 'DESC')
      .addOrderBy('t.id', 'DESC')
      .limit(query.limit + 1);
    if (query.type) builder.andWhere('t.type = :type', { type: query.type });
    if (query.startingAfter) {
      const cursor = await this.dataSource
        .getRepository(WalletTransaction)
        .findOneBy({ id: query.startingAfter, workspaceId });
      if (!cursor) {
        throw ApiError.badRequest('starting_after does not name a transaction of this wallet.', 'starting_after');
      }
      builder.andWhere('(t.created_at, t.id) < (:createdAt, :id)', { createdAt: cursor.createdAt, id: cursor.id });
    }
    return toPage(await builder.getMany(), query.limit);
  }

  private async findByIdempotencyKey(idempotencyKey: string): Promise<WalletTransaction | null> {
    return this.dataSource.getRepository(WalletTransaction).findOneBy({ idempotencyKey });
  }

  private async explainRefusedCredit(manager: EntityManager, workspaceId: string): Promise<never> {
    const wallet = await manager.getRepository(Wallet).findOneBy({ workspaceId });
    if (!wallet) throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    throw ApiError.badRequest(
      `The adjustment would take the balance (${wallet.balanceMillicents}) below the amount reserved ` +
        `for requests in flight (${wallet.reservedMillicents}).`,
      'amount',
      'insufficient_balance',
    );
  }
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
