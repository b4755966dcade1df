import { Inject, Injectable, Optional } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { PAYMENT_PROVIDER, PaymentMethodRef, PaymentProvider, PaymentProviderName, PAYMENTS_SETUP_HINT } from '../payments/payment-provider';
import { AutoTopupSettings } from './entities/auto-topup-settings.entity';
import { Wallet } from './entities/wallet.entity';

export interface ConfigureAutoTopup {
  workspaceId: string;
  enabled: boolean;
  /** Omitted fields keep their stored value. */
  thresholdMillicents?: number;
  amountMillicents?: number;
  /** null: the operator's default cap (AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS). */
  monthlyCapMillicents?: number | null;
  /** The payment provider's references (Stripe: `cus_...`, `pm_...`); see PaymentMethodRef. */
  customerRef?: string;
  paymentMethodRef?: string;
}

/** The settings of a wallet as shown to its workspace (camelCase, beside the wallet balance). */
export interface AutoTopupSummary {
  enabled: boolean;
  thresholdMillicents: number;
  amountMillicents: number;
  /** The cap in force: the workspace's own, or the operator's default when it set none. */
  monthlyCapMillicents: number;
  /** True when the cap in force is the operator's default. */
  monthlyCapIsDefault: boolean;
  /** Auto top-ups claimed this calendar month (UTC), counted against the cap. */
  monthToDateMillicents: number;
  /** Whether a card is on file (its ids are never shown). */
  paymentMethodSaved: boolean;
}

/** The operator's bounds on auto top-up, in millicents (AppConfig.payments). */
export interface AutoTopupBounds {
  /** The largest amount of one top-up (TOPUP_MAX_MILLICENTS, as manual top-ups). */
  amountMaxMillicents: number;
  /** The cap of a workspace that set none. */
  defaultMonthlyCapMillicents: number;
  /** The largest cap a workspace may set. */
  monthlyCapMaxMillicents: number;
  /** Automatic charges per workspace per hour, whatever the settings. */
  maxPerHour: number;
}

/** The code of a 400 for settings above one of the operator's bounds. */
const OUT_OF_BOUNDS = 'auto_topup_out_of_bounds';

/**
 * A wallet's auto top-up settings (threshold, amount, monthly cap, saved card) and the
 * operator's bounds on them: what the API, the dashboard and the CLI set and show. The
 * attempts themselves are AutoTopupAttempts'.
 */
@Injectable()
export class AutoTopupSettingsService {
  constructor(
    @InjectRepository(AutoTopupSettings) private readonly settings: Repository<AutoTopupSettings>,
    @InjectRepository(Wallet) private readonly wallets: Repository<Wallet>,
    @Optional() @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider | null,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  /** The provider payments go through: `stripe`, `simulated`, or null when none is configured. */
  get providerName(): PaymentProviderName | null {
    return this.provider?.name ?? null;
  }

  /** Creates or changes a wallet's settings; fields left out keep their value. */
  async configure(command: ConfigureAutoTopup): Promise<AutoTopupSettings> {
    const { workspaceId } = command;
    assertUuid(workspaceId, 'workspace');
    for (const field of ['thresholdMillicents', 'amountMillicents', 'monthlyCapMillicents'] as const) {
      const value = command[field];
      if (value !== undefined && value !== null && (!Number.isSafeInteger(value) || value < 0)) {
        throw ApiError.badRequest(`${snake(field)} must be a whole, non-negative number of millicents.`, snake(field));
      }
    }
    if (!(await this.wallets.existsBy({ workspaceId }))) {
      throw ApiError.notFound(`No wallet for workspace ${workspaceId}.`, 'wallet_not_found');
    }
    const stored = await this.settings.findOneBy({ workspaceId });
    const next = {
      workspaceId,
      enabled: command.enabled,
      thresholdMillicents: command.thresholdMillicents ?? stored?.thresholdMillicents ?? 0,
      amountMillicents: command.amountMillicents ?? stored?.amountMillicents ?? 0,
      monthlyCapMillicents:
        command.monthlyCapMillicents !== undefined ? command.monthlyCapMillicents : (stored?.monthlyCapMillicents ?? null),
      customerRef: command.customerRef ?? stored?.customerRef ?? null,
      paymentMethodRef: command.paymentMethodRef ?? stored?.paymentMethodRef ?? null,
    };
    this.provider?.checkPaymentMethod(next, { complete: false });
    if (next.enabled) this.assertCanRun(next);
    this.assertWithinBounds(command, next);

    const [row] = await queryRows<Record<string, unknown>>(
      this.settings.manager,
      `INSERT INTO auto_topup_settings (workspace_id, enabled, threshold_millicents, amount_millicents,
              monthly_cap_millicents, payment_customer_ref, payment_method_ref)
       VALUES ($1, $2, $3, $4, $5, $6, $7)
       ON CONFLICT (workspace_id) DO UPDATE SET
         enabled = EXCLUDED.enabled, threshold_millicents = EXCLUDED.threshold_millicents,
         amount_millicents = EXCLUDED.amount_millicents, monthly_cap_millicents = EXCLUDED.monthly_cap_millicents,
         payment_customer_ref = EXCLUDED.payment_customer_ref, payment_method_ref = EXCLUDED.payment_method_ref,
         updated_at = now()
       RETURNING workspace_id`,
      [
        workspaceId,
        next.enabled,
        next.thresholdMillicents,
        next.amountMillicents,
        next.monthlyCapMillicents,
        next.customerRef,
        next.paymentMethodRef,
      ],
    );
    return (await this.settings.findOneBy({ workspaceId: row.workspace_id as string }))!;
  }

  /** The wallet's settings, or null when auto top-up was never configured. */
  async summary(workspaceId: string): Promise<AutoTopupSummary | null> {
    const settings = await this.settings.findOneBy({ workspaceId });
    if (!settings) return null;
    const [{ total }] = await queryRows<{ total: string }>(
      this.settings.manager,
      `SELECT coalesce(sum(amount_millicents), 0) AS total FROM auto_topup_attempts
        WHERE workspace_id = $1 AND status IN ('processing', 'retry_scheduled', 'succeeded')
          AND created_at >= date_trunc('month', now(), 'UTC')`,
      [workspaceId],
    );
    return {
      enabled: settings.enabled,
      thresholdMillicents: settings.thresholdMillicents,
      amountMillicents: settings.amountMillicents,
      monthlyCapMillicents: this.capInForce(settings.monthlyCapMillicents),
      monthlyCapIsDefault: settings.monthlyCapMillicents === null,
      monthToDateMillicents: Number(total),
      paymentMethodSaved: settings.paymentMethodRef !== null,
    };
  }

  /** The operator's bounds on auto top-up (TOPUP_MAX_MILLICENTS, AUTO_TOPUP_*), for the forms that set it. */
  get bounds(): AutoTopupBounds {
    const { topupMaxMillicents, autoTopupDefaultMonthlyCapMillicents, autoTopupMaxMonthlyCapMillicents, autoTopupMaxPerHour } =
      this.config.payments;
    return {
      amountMaxMillicents: topupMaxMillicents,
      defaultMonthlyCapMillicents: autoTopupDefaultMonthlyCapMillicents,
      monthlyCapMaxMillicents: autoTopupMaxMonthlyCapMillicents,
      maxPerHour: autoTopupMaxPerHour,
    };
  }

  /** The saved payment references, for a checkout that reuses the workspace's customer; never shown to people. */
  async paymentMethodOf(workspaceId: string): Promise<PaymentMethodRef | null> {
    const settings = await this.settings.findOneBy({ workspaceId });
    return settings ? { customerRef: settings.customerRef, paymentMethodRef: settings.paymentMethodRef } : null;
  }

  /**
   * Saves the card a checkout in setup mode produced, keeping the other settings (a workspace
   * without settings gets them, disabled). Saving the same card twice changes nothing.
   */
  async savePaymentMethod(workspaceId: string, ref: { customerRef: string; paymentMethodRef: string }): Promise<void> {
    assertUuid(workspaceId, 'workspace');
    this.provider?.checkPaymentMethod(ref, { complete: true });
    await this.settings.manager.query(
      `INSERT INTO auto_topup_settings (workspace_id, enabled, payment_customer_ref, payment_method_ref)
       VALUES ($1, false, $2, $3)
       ON CONFLICT (workspace_id) DO UPDATE SET
         payment_customer_ref = EXCLUDED.payment_customer_ref, payment_method_ref = EXCLUDED.payment_method_ref, updated_at = now()`,
      [workspaceId, ref.customerRef, ref.paymentMethodRef],
    );
  }

  private assertCanRun(
    next: PaymentMethodRef & { thresholdMillicents: number; amountMillicents: number; monthlyCapMillicents: number | null },
  ): void {
    if (!this.provider) {
      throw ApiError.badRequest(`Auto top-up needs payments, which are not configured. ${PAYMENTS_SETUP_HINT}`, 'enabled', 'payments_not_configured');
    }
    if (next.thresholdMillicents <= 0) {
      throw ApiError.badRequest('threshold is required and must be positive to enable auto top-up.', 'threshold');
    }
    const charged = wholeCents(next.amountMillicents);
    const minimum = this.provider.minimumChargeMillicents;
    if (charged < minimum) {
      throw ApiError.badRequest(`amount is required and must be at least ${minimum} millicents to enable auto top-up.`, 'amount');
    }
    if (next.monthlyCapMillicents !== null && next.monthlyCapMillicents < charged) {
      throw ApiError.badRequest(
        `monthly_cap (${next.monthlyCapMillicents}) is below one top-up (${charged} millicents): no top-up could ever run.`,
        'monthly_cap',
      );
    }
    this.provider.checkPaymentMethod(next, { complete: true });
  }

  /**
   * Refuses settings above the operator's bounds, each at its field: an amount above the
   * largest top-up, a monthly cap above the largest cap, a threshold not below the amount
   * (each top-up would leave the balance below it, and the next charge would buy another).
   * Stored values are checked when they are changed or auto top-up is turned on, so that
   * older settings above the bounds can still be turned off; the claim clamps them anyway.
   */
  private assertWithinBounds(
    command: ConfigureAutoTopup,
    next: { enabled: boolean; thresholdMillicents: number; amountMillicents: number; monthlyCapMillicents: number | null },
  ): void {
    const bounds = this.bounds;
    const amount = wholeCents(next.amountMillicents);
    if ((next.enabled || command.amountMillicents !== undefined) && amount > bounds.amountMaxMillicents) {
      throw ApiError.badRequest(
        `The amount (${dollars(amount)}) is above the largest top-up, ${dollars(bounds.amountMaxMillicents)}.`,
        'amount',
        OUT_OF_BOUNDS,
      );
    }
    const cap = next.monthlyCapMillicents;
    if ((next.enabled || command.monthlyCapMillicents !== undefined) && cap !== null && cap > bounds.monthlyCapMaxMillicents) {
      throw ApiError.badRequest(
        `The monthly cap (${dollars(cap)}) is above the largest monthly cap, ${dollars(bounds.monthlyCapMaxMillicents)}.`,
        'monthly_cap',
        OUT_OF_BOUNDS,
      );
    }
    const changed = next.enabled || command.thresholdMillicents !== undefined || command.amountMillicents !== undefined;
    if (changed && next.thresholdMillicents > 0 && next.thresholdMillicents >= amount) {
      throw ApiError.badRequest(
        `The threshold (${dollars(next.thresholdMillicents)}) must be below the amount (${dollars(amount)}): ` +
          'otherwise a top-up leaves the balance below the threshold and the next request buys another.',
        'threshold',
        OUT_OF_BOUNDS,
      );
    }
    if (next.enabled && cap === null && bounds.defaultMonthlyCapMillicents < amount) {
      throw ApiError.badRequest(
        `The amount (${dollars(amount)}) is above the default monthly cap (${dollars(bounds.defaultMonthlyCapMillicents)}): ` +
          `set a monthly cap of at least the amount (at most ${dollars(bounds.monthlyCapMaxMillicents)}).`,
        'monthly_cap',
        OUT_OF_BOUNDS,
      );
    }
  }

  /** The monthly cap a workspace's stored cap stands for: its own (within the largest), or the default. */
  private capInForce(stored: number | null): number {
    return Math.min(stored ?? this.bounds.defaultMonthlyCapMillicents, this.bounds.monthlyCapMaxMillicents);
  }
}

/**
 * The settings as the operator CLI prints them (snake_case, as its other commands). The
 * references keep the Stripe names of the CLI's output, a contract older than the neutral columns.
 */
export function autoTopupSettingsJson(settings: AutoTopupSettings, provider: PaymentProviderName | null) {
  return {
    workspace_id: settings.workspaceId,
    enabled: settings.enabled,
    threshold_millicents: settings.thresholdMillicents,
    amount_millicents: settings.amountMillicents,
    monthly_cap_millicents: settings.monthlyCapMillicents,
    stripe_customer_id: settings.customerRef,
    stripe_payment_method_id: settings.paymentMethodRef,
    payment_provider: provider,
  };
}

function dollars(millicents: number): string {
  return `$${(millicents / 100_000).toLocaleString('en-US', { minimumFractionDigits: 2, maximumFractionDigits: 2 })}`;
}

/** Charged in whole cents: the nearest multiple of 1000 millicents. */
function wholeCents(millicents: number): number {
  return Math.round(millicents / 1000) * 1000;
}

function snake(field: string): string {
  return field.replace(/Millicents$/, '').replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
}
