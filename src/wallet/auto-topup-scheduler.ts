import { Inject, Injectable, Logger, OnModuleDestroy, OnModuleInit, Optional } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import type { Subscription } from 'rxjs';
import { Repository } from 'typeorm';
import { PaymentEventResult, PaymentEvents } from '../payments/payment-events';
import { PAYMENT_PROVIDER, PaymentEvent, PaymentProvider, PaymentProviderName } from '../payments/payment-provider';
import { AttemptRow, AutoTopupAttempts } from './auto-topup-attempts';
import { AutoTopupAttempt } from './entities/auto-topup-attempt.entity';
import { WalletService } from './wallet.service';

/**
 * When auto top-ups run. After every charge the wallet commits (WalletService.charges),
 * `afterCharge` checks in the background whether the balance fell below the wallet's
 * threshold, and AutoTopupAttempts claims and pays the top-up; the retry job runs the due
 * retries; the payment providers' webhooks settle payments that were pending. Background
 * work is tracked, so that shutdown and tests can wait for it (`idle`).
 */
@Injectable()
export class AutoTopupScheduler implements OnModuleInit, OnModuleDestroy {
  private readonly logger = new Logger('AutoTopup');
  private readonly background = new Set<Promise<void>>();
  /** Workspaces whose check runs now, and whether another charge came meanwhile. */
  private readonly checking = new Map<string, { chargedAgain: boolean }>();
  private charges?: Subscription;

  constructor(
    private readonly attempts: AutoTopupAttempts,
    /** Read to find the attempt a webhook's payment event is about. */
    @InjectRepository(AutoTopupAttempt) private readonly attemptRows: Repository<AutoTopupAttempt>,
    private readonly wallet: WalletService,
    private readonly paymentEvents: PaymentEvents,
    @Optional() @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider | null,
  ) {}

  /** Listens to the wallet's committed charges and to the payment providers' webhooks. */
  onModuleInit(): void {
    this.charges = this.wallet.charges.subscribe((workspaceId) => this.afterCharge(workspaceId));
    this.paymentEvents.handleWith((provider, event) => this.applyPaymentEvent(provider, event));
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
        const claimed = await this.attempts.topUpIfNeeded(workspaceId);
        if (claimed || !check.chargedAgain) return;
      }
    } finally {
      this.checking.delete(workspaceId);
    }
  }

  /**
   * The scheduled job (every minute; tests call it with a later `asOf`): retries failed
   * payments whose time has come, cancels those no longer needed, and resumes payments
   * whose process died. Returns how many attempts it worked on.
   */
  runDueRetries(asOf?: Date): Promise<number> {
    return this.track(this.attempts.retryDue(asOf ?? null));
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
      await this.attempts.credit(attempt, providerName, outcome);
      return 'applied';
    }
    const chargeSeq = event.chargeSeq ?? (attempt.paymentId === event.paymentId ? attempt.chargeSeq : undefined);
    if (chargeSeq === undefined) return 'ignored';
    await this.attempts.recordFailure(attempt, chargeSeq, outcome);
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

  /** The attempt a payment event is about: named in the payment's metadata, or by payment id. */
  private async attemptOf(providerName: PaymentProviderName, event: PaymentEvent): Promise<AttemptRow | null> {
    let attempt: AutoTopupAttempt | null = null;
    if (event.attemptId && isUuidLike(event.attemptId)) {
      attempt = await this.attemptRows.findOneBy({ id: event.attemptId });
      if (attempt && event.workspaceId && attempt.workspaceId !== event.workspaceId) attempt = null;
    }
    attempt ??= await this.attemptRows.findOneBy({ paymentId: event.paymentId });
    return attempt && attempt.provider === providerName ? attempt : null;
  }
}

function isUuidLike(value: string): boolean {
  return /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(value);
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
