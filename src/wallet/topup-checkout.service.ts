import { Inject, Injectable, Logger, OnModuleInit, Optional } from '@nestjs/common';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { assertUuid } from '../common/validation/uuid';
import { PaymentEventResult, PaymentEvents } from '../payments/payment-events';
import {
  canCheckout,
  CheckoutCompletion,
  CheckoutProvider,
  PAYMENT_PROVIDER,
  PaymentProvider,
  PaymentProviderName,
  PAYMENTS_SETUP_HINT,
} from '../payments/payment-provider';
import { AutoTopupSettingsService } from './auto-topup-settings.service';
import type { WalletTransaction } from './entities/wallet-transaction.entity';
import { LedgerQueryService } from './ledger-query.service';
import { WalletService } from './wallet.service';

/** The smallest manual top-up: one dollar (and never below what the provider takes). */
export const MIN_MANUAL_TOPUP_MILLICENTS = 100_000;

/** Where the provider sends the person back; `{CHECKOUT_SESSION_ID}` is replaced by the session id. */
export interface ReturnUrls {
  successUrl: string;
  cancelUrl: string;
}

export type TopupStart =
  | { kind: 'redirect'; url: string; sessionId: string }
  /** The simulated provider: credited already, through the webhook's path. */
  | { kind: 'done'; sessionId: string };

/**
 * Manual top-ups and saved cards through the payment provider's hosted checkout (Stripe
 * Checkout; the simulated provider outside production completes at once). Only the
 * provider's webhook (or the simulated completion, through the same handler) credits: a
 * `topup` ledger row keyed by the checkout session, so a session is credited exactly once
 * however often its completion is reported.
 */
@Injectable()
export class TopupCheckoutService implements OnModuleInit {
  private readonly logger = new Logger('TopupCheckout');

  constructor(
    private readonly wallet: WalletService,
    private readonly autoTopup: AutoTopupSettingsService,
    private readonly ledger: LedgerQueryService,
    private readonly paymentEvents: PaymentEvents,
    @Optional() @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider | null,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  onModuleInit(): void {
    this.paymentEvents.handleCheckoutsWith((provider, completion) => this.apply(provider, completion));
  }

  /** The provider checkouts go through; null when payments are not configured (see choosePaymentProvider). */
  get providerName(): PaymentProviderName | null {
    return canCheckout(this.provider) ? this.provider.name : null;
  }

  /** Bounds of a manual top-up, in millicents: at most TOPUP_MAX_MILLICENTS ($10,000 by default, so that a typo cannot buy a fortune). */
  get limits(): { minimumMillicents: number; maximumMillicents: number } {
    return {
      minimumMillicents: Math.max(MIN_MANUAL_TOPUP_MILLICENTS, this.provider?.minimumChargeMillicents ?? 0),
      maximumMillicents: this.config.payments.topupMaxMillicents,
    };
  }

  /** Starts a manual top-up of `amountMillicents` (whole cents, within `limits`). */
  async startTopup(workspaceId: string, amountMillicents: number, urls: ReturnUrls): Promise<TopupStart> {
    assertUuid(workspaceId, 'workspace');
    // Refused before anything else: without payments no amount is right.
    const provider = this.checkoutProvider();
    const { minimumMillicents, maximumMillicents } = this.limits;
    if (!Number.isSafeInteger(amountMillicents) || amountMillicents % 1000 !== 0) {
      throw ApiError.badRequest('The amount must be in whole cents.', 'amount');
    }
    if (amountMillicents < minimumMillicents || amountMillicents > maximumMillicents) {
      throw ApiError.badRequest(
        `The amount must be between ${dollars(minimumMillicents)} and ${dollars(maximumMillicents)}.`,
        'amount',
        'amount_out_of_range',
      );
    }
    const saved = await this.autoTopup.paymentMethodOf(workspaceId);
    const start = await provider.startCheckout({
      workspaceId,
      mode: 'payment',
      amountCents: amountMillicents / 1000,
      customerRef: saved?.customerRef ?? null,
      successUrl: urls.successUrl,
      cancelUrl: urls.cancelUrl,
      description: 'Assistant Chat Service credit',
    });
    return this.finish(provider, start);
  }

  /** Starts saving a card for auto top-up (a checkout in setup mode on the workspace's customer). */
  async startCardSetup(workspaceId: string, urls: ReturnUrls): Promise<TopupStart> {
    assertUuid(workspaceId, 'workspace');
    const provider = this.checkoutProvider();
    const saved = await this.autoTopup.paymentMethodOf(workspaceId);
    const start = await provider.startCheckout({
      workspaceId,
      mode: 'setup',
      customerRef: saved?.customerRef ?? null,
      successUrl: urls.successUrl,
      cancelUrl: urls.cancelUrl,
      description: 'Card for automatic top-ups of the Assistant Chat Service wallet',
    });
    return this.finish(provider, start);
  }

  /** The `topup` row a checkout session was credited with, or null while its payment is pending. */
  creditOf(workspaceId: string, sessionId: string): Promise<WalletTransaction | null> {
    if (!this.provider) return Promise.resolve(null);
    return this.ledger.findByKey(workspaceId, checkoutKey(this.provider.name, sessionId));
  }

  /**
   * A completed checkout, from the provider's webhook or the simulated provider: a payment
   * is credited as a `topup` keyed by its session; a setup saves the card for auto top-up.
   */
  async apply(provider: PaymentProviderName, completion: CheckoutCompletion): Promise<PaymentEventResult> {
    if (completion.mode === 'setup') {
      await this.autoTopup.savePaymentMethod(completion.workspaceId, completion);
      this.logger.log(`Checkout ${completion.sessionId} saved a card for workspace ${completion.workspaceId}`);
      return 'applied';
    }
    const transaction = await this.wallet.credit({
      workspaceId: completion.workspaceId,
      amountMillicents: completion.amountCents * 1000,
      type: 'topup',
      description: provider === 'simulated' ? 'Top-up (simulated payment)' : `Top-up (${provider} payment ${completion.paymentId})`,
      idempotencyKey: checkoutKey(provider, completion.sessionId),
    });
    this.logger.log(
      `Checkout ${completion.sessionId} credited ${transaction.amountMillicents} millicents to workspace ${completion.workspaceId}`,
    );
    return 'applied';
  }

  private checkoutProvider(): PaymentProvider & CheckoutProvider {
    if (!canCheckout(this.provider)) {
      throw ApiError.badRequest(`Payments are not configured on this service. ${PAYMENTS_SETUP_HINT}`, undefined, 'payments_not_configured');
    }
    return this.provider;
  }

  private async finish(provider: PaymentProvider, start: Awaited<ReturnType<CheckoutProvider['startCheckout']>>): Promise<TopupStart> {
    if (start.kind === 'redirect') return start;
    await this.apply(provider.name, start.completion);
    return { kind: 'done', sessionId: start.completion.sessionId };
  }
}

/** The ledger's idempotency key of a checkout session's credit. */
function checkoutKey(provider: PaymentProviderName, sessionId: string): string {
  return `${provider}:checkout:${sessionId}`;
}

function dollars(millicents: number): string {
  return `$${(millicents / 100_000).toFixed(2)}`;
}
