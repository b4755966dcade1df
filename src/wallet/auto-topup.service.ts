import { Inject, Injectable, Logger, OnModuleDestroy, OnModuleInit, Optional } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import type { Subscription } from 'rxjs';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { assertUuid } from '../common/validation/uuid';
import { PaymentEventResult, PaymentEvents } from '../payments/payment-events';
import {
  PAYMENT_PROVIDER,
  PaymentEvent,
  PaymentMethodRef,
  PaymentOutcome,
  PaymentProvider,
  PaymentProviderName,
  PAYMENTS_SETUP_HINT,
} from '../payments/payment-provider';
import { AutoTopupAttempt, AutoTopupStatus } from './entities/auto-topup-attempt.entity';
import { AutoTopupSettings } from './entities/auto-topup-settings.entity';
import { Wallet } from './entities/wallet.entity';
import { WalletService } from './wallet.service';
import { MetricsService } from '../metrics/metrics.service';

/** Payment requests per attempt, the first included. */
export const AUTO_TOPUP_MAX_TRIES = 4;
/** Retries wait 15 minutes, then 1 hour, then 4 hours. */
const RETRY_BASE_SECONDS = 15 * 60;
const RETRY_FACTOR = 4;
/** A payment still `processing` this long after its last step lost its process: it is resumed. */
const STUCK_AFTER_SECONDS = 10 * 60;
const RETRY_BATCH = 20;

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

/** How a top-up attempt ended (or where it stands), for logs, the CLI and tests. */
export type AttemptRow = Pick<
  AutoTopupAttempt,
  'id' | 'workspaceId' | 'status' | 'provider' | 'amountMillicents' | 'tries' | 'chargeSeq' | 'paymentId'
>;

interface RawAttempt {
  id: string;
  workspace_id: string;
  status: AutoTopupStatus;
  provider: PaymentProviderName;
  amount_millicents: string;
  tries: number;
  charge_seq: number;
  payment_id: string | null;
}

/**
 * Automatic top-ups. After every charge the wallet commits (WalletService.charges),
 * `afterCharge` checks in the background whether the balance fell below the wallet's
 * threshold; if so, one conditional INSERT claims the top-up (at most one open attempt per
 * workspace, within the monthly cap), and the payment provider is charged. A successful
 * payment is credited as an `auto_topup` ledger row keyed by the payment id, so the
 * synchronous answer and the provider's webhook credit it once between them. A failed
 * payment credits nothing and is retried with backoff.
 */
@Injectable()
export class AutoTopupService implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('AutoTopup');
  private readonly background = new Set<Promise<void>>();
  /** Workspaces whose check runs now, and whether another charge came meanwhile. */
  private readonly checking = new Map<string, { chargedAgain: boolean }>();
  private charges?: Subscription;

  constructor(
    @InjectRepository(AutoTopupSettings) private readonly settings: Repository<AutoTopupSettings>,
    @InjectRepository(AutoTopupAttempt) private readonly attempts: Repository<AutoTopupAttempt>,
    @InjectRepository(Wallet) private readonly wallets: Repository<Wallet>,
    private readonly wallet: WalletService,
    private readonly paymentEvents: PaymentEvents,
    @Optional() @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider | null,
    @InjectConfig() private readonly config: AppConfig,
    /** Counts the outcomes (acs_auto_topups_total); optional for unit tests. */
    @Optional() private readonly metrics?: MetricsService,
  ) {}

  /** Listens to the wallet's committed charges and to the payment providers' webhooks. */
  onModuleInit(): void {
    this.charges = this.wallet.charges.subscribe((workspaceId) => this.afterCharge(workspaceId));
    this.paymentEvents.handleWith((provider, event) => this.applyPaymentEvent(provider, event));
  }

  /** Auto top-up's statements run outside any caller's transaction. */
  private get manager(): EntityManager {
    return this.attempts.manager;
  }

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
      this.manager,
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
      this.manager,
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
    await this.manager.query(
      `INSERT INTO auto_topup_settings (workspace_id, enabled, payment_customer_ref, payment_method_ref)
       VALUES ($1, false, $2, $3)
       ON CONFLICT (workspace_id) DO UPDATE SET
         payment_customer_ref = EXCLUDED.payment_customer_ref, payment_method_ref = EXCLUDED.payment_method_ref, updated_at = now()`,
      [workspaceId, ref.customerRef, ref.paymentMethodRef],
    );
  }

  /**
   * Called after a charge has committed (the wallet does, for each settlement). Returns at
   * once: the check and any payment run in the background, so no response waits for them;
   * failures are logged. One check per workspace at a time: charges that commit while it
   * runs are covered by the top-up it claims, or else checked once more when it ends, so
   * a charge reported twice never buys a second top-up. Across processes the claim itself
   * allows one open attempt per workspace.
   */
  afterCharge(workspaceId: string): void {
    if (!this.provider) return;
    const running = this.checking.get(workspaceId);
    if (running) {
      running.chargedAgain = true;
      return;
    }
    const check = { chargedAgain: false };
    this.checking.set(workspaceId, check);
    this.track(this.checkAfterCharges(workspaceId, check)).catch((error: unknown) =>
      this.logger.error(`Auto top-up of workspace ${workspaceId} failed: ${describe(error)}`),
    );
  }

  private async checkAfterCharges(workspaceId: string, check: { chargedAgain: boolean }): Promise<void> {
    try {
      for (;;) {
        check.chargedAgain = false;
        const claimed = await this.topUpIfNeeded(workspaceId);
        if (claimed || !check.chargedAgain) return;
      }
    } finally {
      this.checking.delete(workspaceId);
    }
  }

  /**
   * Claims a top-up if the balance is below the threshold and none is open, and pays it.
   * Returns the attempt as it stands after the payment, or null when none was due.
   */
  async topUpIfNeeded(workspaceId: string): Promise<AttemptRow | null> {
    if (!this.provider) return null;
    const attempt = await this.claim(workspaceId, this.provider);
    if (!attempt) return null;
    this.logger.log(
      `Workspace ${workspaceId} is below its threshold: auto top-up ${attempt.id} of ${attempt.amountMillicents} millicents (${attempt.provider})`,
    );
    return this.pay(attempt);
  }

  /**
   * The scheduled job (every minute; tests call it with a later `asOf`): retries failed
   * payments whose time has come, cancels those no longer needed, and resumes payments
   * whose process died. Returns how many attempts it worked on.
   */
  runDueRetries(asOf?: Date): Promise<number> {
    return this.track(this.retry(asOf ?? null));
  }

  private async retry(at: Date | null): Promise<number> {
    const provider = this.provider;
    if (!provider) return 0;
    // Not charged: a retry that is no longer wanted (disabled, or the balance is back above
    // the threshold), and an attempt of a provider no longer configured, once it is idle.
    const canceled = await queryRows<{ id: string }>(
      this.manager,
      `UPDATE auto_topup_attempts a
          SET status = 'canceled', next_retry_at = NULL, completed_at = now(), updated_at = now()
         FROM auto_topup_settings s, wallets w
        WHERE s.workspace_id = a.workspace_id AND w.workspace_id = a.workspace_id
          AND ((a.status = 'retry_scheduled' AND a.next_retry_at <= coalesce($1::timestamptz, now())
                AND (NOT s.enabled OR w.balance_millicents >= s.threshold_millicents))
               OR (a.status IN ('processing', 'retry_scheduled') AND a.provider <> $2
                   AND a.updated_at <= coalesce($1::timestamptz, now()) - make_interval(secs => $3::double precision)))
        RETURNING a.id`,
      [at, provider.name, STUCK_AFTER_SECONDS],
    );
    for (const { id } of canceled) this.logger.log(`Auto top-up ${id} canceled: no longer needed, or its payment provider is gone`);

    const due = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts SET status = 'processing', tries = tries + 1, next_retry_at = NULL, updated_at = now()
        WHERE id IN (SELECT id FROM auto_topup_attempts
                      WHERE status = 'retry_scheduled' AND next_retry_at <= coalesce($1::timestamptz, now())
                        AND provider = $3
                      ORDER BY next_retry_at LIMIT $2 FOR UPDATE SKIP LOCKED)
        RETURNING *`,
      [at, RETRY_BATCH, provider.name],
    );
    // Resumed with the same charge_seq, hence the same idempotency key: a payment that did
    // reach the provider is answered again, not made twice.
    const stuck = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts SET updated_at = now()
        WHERE id IN (SELECT id FROM auto_topup_attempts
                      WHERE status = 'processing' AND provider = $4
                        AND updated_at <= coalesce($1::timestamptz, now()) - make_interval(secs => $2::double precision)
                      LIMIT $3 FOR UPDATE SKIP LOCKED)
        RETURNING *`,
      [at, STUCK_AFTER_SECONDS, RETRY_BATCH, provider.name],
    );
    for (const raw of due) {
      const attempt = toAttempt(raw);
      this.logger.log(`Retrying auto top-up ${attempt.id} (try ${attempt.tries} of ${AUTO_TOPUP_MAX_TRIES})`);
      await this.pay(attempt).catch((error: unknown) => this.logger.error(`Retry of ${attempt.id} failed: ${describe(error)}`));
    }
    for (const raw of stuck) {
      const attempt = toAttempt(raw);
      await this.resume(attempt).catch((error: unknown) => this.logger.error(`Resuming ${attempt.id} failed: ${describe(error)}`));
    }
    return canceled.length + due.length + stuck.length;
  }

  /**
   * A payment event from the provider's webhook (already authenticated). Credits a
   * successful payment once, keyed by its payment id; records a failure of the attempt's
   * current payment. Events about payments that are not auto top-ups are ignored.
   */
  async applyPaymentEvent(providerName: PaymentProviderName, event: PaymentEvent): Promise<PaymentEventResult> {
    const attempt = await this.attemptOf(providerName, event);
    if (!attempt) {
      this.logger.warn(`Payment ${event.paymentId} is not an auto top-up of this service; ignored`);
      return 'ignored';
    }
    const { outcome } = event;
    if (outcome.status === 'pending') return 'ignored';
    if (outcome.status === 'succeeded') {
      await this.credit(attempt, providerName, outcome);
      return 'applied';
    }
    const chargeSeq = event.chargeSeq ?? (attempt.paymentId === event.paymentId ? attempt.chargeSeq : undefined);
    if (chargeSeq === undefined) return 'ignored';
    await this.recordFailure(attempt, chargeSeq, outcome);
    return 'applied';
  }

  /** Settles once every top-up and retry run started so far has finished (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.background.size > 0) await Promise.all([...this.background]);
  }

  private track<T>(work: Promise<T>): Promise<T> {
    const settled = work.then(
      () => undefined,
      () => undefined,
    );
    this.background.add(settled);
    void settled.finally(() => this.background.delete(settled));
    return work;
  }

  /** Lets payments under way finish before the database closes. */
  async onModuleDestroy(): Promise<void> {
    this.charges?.unsubscribe();
    await this.idle();
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

  /**
   * The claim: one statement that inserts the attempt only if auto top-up is enabled, the
   * balance is below the threshold, the month's top-ups stay within the cap, fewer than
   * AUTO_TOPUP_MAX_PER_HOUR attempts were started or ended (a retry that paid late) in the
   * last hour, and no other attempt is
   * open (the partial unique index; a concurrent claim does nothing). Stored settings above
   * the operator's bounds are clamped here: the amount to the largest top-up, the threshold
   * below the amount, no cap or a larger one to the default or the largest.
   *
   * Locking the wallet row re-checks the balance against a top-up that committed meanwhile.
   * That is also why the counts cannot be outrun: this statement's snapshot may miss an
   * attempt whose claim committed while it waited for the lock, but such an attempt is
   * still open (the unique index refuses this one) until its credit, which needs this same
   * lock and leaves the balance above the threshold, below the amount.
   */
  private async claim(workspaceId: string, provider: PaymentProvider): Promise<AttemptRow | null> {
    const { amountMaxMillicents, defaultMonthlyCapMillicents, monthlyCapMaxMillicents, maxPerHour } = this.bounds;
    const rows = await queryRows<RawAttempt>(
      this.manager,
      `INSERT INTO auto_topup_attempts (workspace_id, status, provider, amount_millicents)
       SELECT s.workspace_id, 'processing', $2, b.amount
         FROM auto_topup_settings s
         JOIN wallets w ON w.workspace_id = s.workspace_id
        CROSS JOIN LATERAL (SELECT least(round(s.amount_millicents / 1000.0)::bigint * 1000, $4::bigint) AS amount) b
        WHERE s.workspace_id = $1
          AND s.enabled
          AND w.balance_millicents < least(s.threshold_millicents, b.amount - 1)
          AND (NOT $3 OR (s.payment_customer_ref IS NOT NULL AND s.payment_method_ref IS NOT NULL))
          AND b.amount + (
                SELECT coalesce(sum(a.amount_millicents), 0) FROM auto_topup_attempts a
                 WHERE a.workspace_id = s.workspace_id
                   AND a.status IN ('processing', 'retry_scheduled', 'succeeded')
                   AND a.created_at >= date_trunc('month', now(), 'UTC')
              ) <= least(coalesce(s.monthly_cap_millicents, $5::bigint), $6::bigint)
          AND (SELECT count(*) FROM auto_topup_attempts a
                WHERE a.workspace_id = s.workspace_id
                  -- Retries end within hours of their attempt: a day bounds the scan.
                  AND a.created_at > now() - interval '1 day'
                  AND (a.created_at > now() - interval '1 hour' OR a.completed_at > now() - interval '1 hour')) < $7
          FOR UPDATE OF w
       ON CONFLICT (workspace_id) WHERE status IN ('processing', 'retry_scheduled') DO NOTHING
       RETURNING *`,
      [workspaceId, provider.name, provider.needsPaymentMethod, amountMaxMillicents, defaultMonthlyCapMillicents, monthlyCapMaxMillicents, maxPerHour],
    );
    return rows.length > 0 ? toAttempt(rows[0]) : null;
  }

  /** Sends the attempt's current payment request and records its outcome. */
  private async pay(attempt: AttemptRow): Promise<AttemptRow> {
    const provider = this.providerFor(attempt);
    const settings = await this.settings.findOneBy({ workspaceId: attempt.workspaceId });
    const outcome = await provider
      .charge({
        workspaceId: attempt.workspaceId,
        attemptId: attempt.id,
        chargeSeq: attempt.chargeSeq,
        // An attempt claimed before the bound was lowered is paid within it.
        amountCents: Math.min(attempt.amountMillicents, this.bounds.amountMaxMillicents) / 1000,
        idempotencyKey: `auto_topup_${attempt.id}_${attempt.chargeSeq}`,
        customerRef: settings?.customerRef ?? null,
        paymentMethodRef: settings?.paymentMethodRef ?? null,
        description: 'Automatic top-up of the Assistant Chat Service wallet',
      })
      .catch((error: unknown): PaymentOutcome => ({
        status: 'failed',
        paymentId: null,
        code: 'internal_error',
        reason: describe(error),
        resend: false,
      }));
    return this.record(attempt, outcome);
  }

  /** A payment that lost its process: ask the provider where it stands, or send it again. */
  private async resume(attempt: AttemptRow): Promise<AttemptRow> {
    const provider = this.providerFor(attempt);
    if (attempt.paymentId && provider.retrieve) {
      const outcome = await provider.retrieve(attempt.paymentId);
      return outcome ? this.record(attempt, outcome) : attempt;
    }
    this.logger.warn(`Resuming auto top-up ${attempt.id}, left in processing`);
    return this.pay(attempt);
  }

  private async record(attempt: AttemptRow, outcome: PaymentOutcome): Promise<AttemptRow> {
    switch (outcome.status) {
      case 'succeeded':
        return this.credit(attempt, attempt.provider, outcome);
      case 'pending': {
        const rows = await queryRows<RawAttempt>(
          this.manager,
          `UPDATE auto_topup_attempts SET payment_id = $3, updated_at = now()
            WHERE id = $1 AND status = 'processing' AND charge_seq = $2 RETURNING *`,
          [attempt.id, attempt.chargeSeq, outcome.paymentId],
        );
        this.logger.log(`Auto top-up ${attempt.id}: payment ${outcome.paymentId} is pending; its webhook will settle it`);
        this.metrics?.autoTopups.inc({ outcome: 'pending' });
        return rows[0] ? toAttempt(rows[0]) : attempt;
      }
      case 'failed':
        return this.recordFailure(attempt, attempt.chargeSeq, outcome);
    }
  }

  /**
   * Credits a payment that succeeded: the ledger row is keyed by the payment id, so a
   * second report of the same payment (webhook, replay, retry) changes nothing.
   */
  private async credit(
    attempt: AttemptRow,
    providerName: PaymentProviderName,
    outcome: Extract<PaymentOutcome, { status: 'succeeded' }>,
  ): Promise<AttemptRow> {
    const amountMillicents = outcome.amountCents * 1000;
    if (amountMillicents !== attempt.amountMillicents) {
      this.logger.warn(
        `Payment ${outcome.paymentId} was for ${amountMillicents} millicents, auto top-up ${attempt.id} for ${attempt.amountMillicents}: crediting what was paid`,
      );
    }
    const transaction = await this.wallet.credit({
      workspaceId: attempt.workspaceId,
      amountMillicents,
      type: 'auto_topup',
      description: this.describePayment(providerName, outcome.paymentId),
      idempotencyKey: `${providerName}:${outcome.paymentId}`,
    });
    const rows = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts
          SET status = 'succeeded', payment_id = $2, transaction_id = $3, next_retry_at = NULL,
              completed_at = now(), updated_at = now()
        WHERE id = $1 AND status <> 'succeeded'
        RETURNING *`,
      [attempt.id, outcome.paymentId, transaction.id],
    );
    if (rows[0]) {
      this.metrics?.autoTopups.inc({ outcome: 'succeeded' });
      this.logger.log(
        `Auto top-up ${attempt.id} credited ${amountMillicents} millicents to workspace ${attempt.workspaceId} (payment ${outcome.paymentId})`,
      );
      return toAttempt(rows[0]);
    }
    return (await this.attemptById(attempt.id)) ?? attempt;
  }

  /**
   * Records a failed payment of the attempt's request `chargeSeq` (a report about an older
   * request changes nothing): the retry is scheduled with exponential backoff, or the
   * attempt fails for good after the last try. The next try is a new payment request
   * (a new idempotency key), unless the provider asks to resend this one.
   */
  private async recordFailure(
    attempt: AttemptRow,
    chargeSeq: number,
    outcome: Extract<PaymentOutcome, { status: 'failed' }>,
  ): Promise<AttemptRow> {
    const rows = await queryRows<RawAttempt & { next_retry_at: Date | null }>(
      this.manager,
      `UPDATE auto_topup_attempts SET
         status = CASE WHEN tries >= $3 THEN 'failed' ELSE 'retry_scheduled' END,
         next_retry_at = CASE WHEN tries >= $3 THEN NULL
                              ELSE now() + make_interval(secs => $4::double precision * power($5::double precision, tries - 1)) END,
         completed_at = CASE WHEN tries >= $3 THEN now() ELSE NULL END,
         charge_seq = charge_seq + CASE WHEN $6 THEN 0 ELSE 1 END,
         payment_id = coalesce($7, payment_id),
         last_failure_code = $8, last_failure_reason = $9, updated_at = now()
       WHERE id = $1 AND charge_seq = $2 AND status IN ('processing', 'retry_scheduled')
       RETURNING *`,
      [
        attempt.id,
        chargeSeq,
        AUTO_TOPUP_MAX_TRIES,
        RETRY_BASE_SECONDS,
        RETRY_FACTOR,
        outcome.resend,
        outcome.paymentId,
        outcome.code,
        outcome.reason.slice(0, 1000),
      ],
    );
    const updated = rows[0];
    if (!updated) return (await this.attemptById(attempt.id)) ?? attempt;
    this.metrics?.autoTopups.inc({ outcome: updated.status === 'failed' ? 'failed' : 'retry_scheduled' });
    this.logger.warn(
      `Auto top-up ${attempt.id} of workspace ${attempt.workspaceId}: payment failed (${outcome.code}: ${outcome.reason}); ` +
        (updated.status === 'failed'
          ? `giving up after ${updated.tries} tries`
          : `retry at ${new Date(updated.next_retry_at!).toISOString()}`),
    );
    return toAttempt(updated);
  }

  /** The attempt a payment event is about: named in the payment's metadata, or by payment id. */
  private async attemptOf(providerName: PaymentProviderName, event: PaymentEvent): Promise<AttemptRow | null> {
    let attempt: AutoTopupAttempt | null = null;
    if (event.attemptId && isUuidLike(event.attemptId)) {
      attempt = await this.attempts.findOneBy({ id: event.attemptId });
      if (attempt && event.workspaceId && attempt.workspaceId !== event.workspaceId) attempt = null;
    }
    attempt ??= await this.attempts.findOneBy({ paymentId: event.paymentId });
    return attempt && attempt.provider === providerName ? attempt : null;
  }

  private async attemptById(id: string): Promise<AttemptRow | null> {
    return this.attempts.findOneBy({ id });
  }

  private providerFor(attempt: AttemptRow): PaymentProvider {
    if (!this.provider || this.provider.name !== attempt.provider) {
      throw new Error(`Auto top-up ${attempt.id} was made through ${attempt.provider}, which is not configured now`);
    }
    return this.provider;
  }

  private describePayment(providerName: PaymentProviderName, paymentId: string): string {
    return this.provider?.name === providerName ? this.provider.describe(paymentId) : `Automatic top-up (${providerName} payment ${paymentId})`;
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

function toAttempt(raw: RawAttempt): AttemptRow {
  return {
    id: raw.id,
    workspaceId: raw.workspace_id,
    status: raw.status,
    provider: raw.provider,
    amountMillicents: Number(raw.amount_millicents),
    tries: raw.tries,
    chargeSeq: raw.charge_seq,
    paymentId: raw.payment_id,
  };
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

function isUuidLike(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
