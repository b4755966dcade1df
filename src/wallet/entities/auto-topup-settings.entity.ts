import { Column, CreateDateColumn, Entity, PrimaryColumn, UpdateDateColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';

/** A wallet's auto top-up: when a charge leaves the balance below the threshold, buy `amount`. */
@Entity({ name: 'auto_topup_settings' })
export class AutoTopupSettings {
  @PrimaryColumn({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ type: 'boolean', default: false })
  enabled: boolean;

  @Column({ name: 'threshold_millicents', type: 'bigint', default: 0, transformer: bigintToNumber })
  thresholdMillicents: number;

  /** Charged in whole cents: rounded to the nearest 1000 millicents at each top-up. */
  @Column({ name: 'amount_millicents', type: 'bigint', default: 0, transformer: bigintToNumber })
  amountMillicents: number;

  /** Most that auto top-ups may add per calendar month (UTC); null: the operator's default cap (AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS). */
  @Column({ name: 'monthly_cap_millicents', type: 'bigint', nullable: true, transformer: bigintToNumber })
  monthlyCapMillicents: number | null;

  /** The customer at the payment provider (Stripe: `cus_...`); see PaymentMethodRef. */
  @Column({ name: 'payment_customer_ref', type: 'text', nullable: true })
  customerRef: string | null;

  /** The saved payment method at the payment provider (Stripe: `pm_...`). */
  @Column({ name: 'payment_method_ref', type: 'text', nullable: true })
  paymentMethodRef: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
