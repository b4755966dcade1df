import { Column, CreateDateColumn, Entity, Index, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';
import type { PaymentProviderName } from '../../payments/payment-provider';

export const AUTO_TOPUP_STATUSES = ['processing', 'retry_scheduled', 'succeeded', 'failed', 'canceled'] as const;
/**
 * `processing`: a payment is under way (or awaits the provider's webhook);
 * `retry_scheduled`: the last payment failed and runs again at `nextRetryAt`;
 * `succeeded`: credited; `failed`: given up after the retry limit; `canceled`: no longer
 * needed at retry time (disabled, or the balance is back above the threshold).
 */
export type AutoTopupStatus = (typeof AUTO_TOPUP_STATUSES)[number];
/** The two open statuses: at most one open attempt per workspace (a partial unique index). */
export const OPEN_AUTO_TOPUP_STATUSES: readonly AutoTopupStatus[] = ['processing', 'retry_scheduled'];

/** One automatic top-up, from its claim to its credit or its last failure. */
@Entity({ name: 'auto_topup_attempts' })
@Index('auto_topup_attempts_one_open_idx', ['workspaceId'], {
  unique: true,
  where: `status IN ('processing', 'retry_scheduled')`,
})
export class AutoTopupAttempt {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ type: 'text' })
  status: AutoTopupStatus;

  /** Checked by the app, not by the database: see PAYMENT_PROVIDER_NAMES. */
  @Column({ type: 'text' })
  provider: PaymentProviderName;

  /** Whole cents, in millicents: exactly what is charged and credited. */
  @Column({ name: 'amount_millicents', type: 'bigint', transformer: bigintToNumber })
  amountMillicents: number;

  /** Payment requests sent so far. */
  @Column({ type: 'integer', default: 1 })
  tries: number;

  /** Names the current payment request in the provider's idempotency key. */
  @Column({ name: 'charge_seq', type: 'integer', default: 1 })
  chargeSeq: number;

  /** The provider's payment id (`pi_...` for Stripe). */
  @Column({ name: 'payment_id', type: 'text', nullable: true })
  paymentId: string | null;

  /** The `auto_topup` ledger row, once credited. */
  @Column({ name: 'transaction_id', type: 'uuid', nullable: true })
  transactionId: string | null;

  @Column({ name: 'last_failure_code', type: 'text', nullable: true })
  lastFailureCode: string | null;

  @Column({ name: 'last_failure_reason', type: 'text', nullable: true })
  lastFailureReason: string | null;

  @Column({ name: 'next_retry_at', type: 'timestamptz', nullable: true })
  nextRetryAt: Date | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;

  @Column({ name: 'completed_at', type: 'timestamptz', nullable: true })
  completedAt: Date | null;
}
