import { Column, CreateDateColumn, Entity, Index, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';

export const TRANSACTION_TYPES = ['topup', 'auto_topup', 'usage', 'refund', 'adjustment'] as const;
export type TransactionType = (typeof TRANSACTION_TYPES)[number];

/** An append-only ledger row. Rows are never updated or deleted: they are money. */
@Entity({ name: 'wallet_transactions' })
@Index('wallet_transactions_workspace_created_idx', ['workspaceId', 'createdAt', 'id'])
export class WalletTransaction {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ type: 'text' })
  type: TransactionType;

  /** Signed: usage charges are negative. */
  @Column({ name: 'amount_millicents', type: 'bigint', transformer: bigintToNumber })
  amountMillicents: number;

  @Column({ name: 'balance_after_millicents', type: 'bigint', transformer: bigintToNumber })
  balanceAfterMillicents: number;

  @Column({ type: 'text', default: '' })
  description: string;

  /** Request id, payment id or webhook event id: a replay hits this unique key and is a no-op. */
  @Column({ name: 'idempotency_key', type: 'text', unique: true })
  idempotencyKey: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
