import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import type {
  CheckoutProvider,
  CheckoutRequest,
  CheckoutStart,
  PaymentMethodRef,
  PaymentOutcome,
  PaymentProvider,
  PaymentRequest,
} from './payment-provider';
import { checkStripeIds } from './stripe-payment.provider';

/**
 * Stands in for a card processor when Stripe is not configured (never in production):
 * every payment succeeds at once, and no money moves. Stripe's test payment method names
 * decline here as they do there (`pm_card_chargeDeclined...`), so failures can be tried.
 */
export class SimulatedPaymentProvider implements PaymentProvider, CheckoutProvider {
  readonly name = 'simulated' as const;
  /** One cent. */
  readonly minimumChargeMillicents = 1_000;
  readonly needsPaymentMethod = false;
  private readonly logger = new Logger('SimulatedPayments');

  /** Optional here; when given, Stripe's (test) ids, as a workspace would later save for Stripe. */
  checkPaymentMethod(ref: PaymentMethodRef): void {
    checkStripeIds(ref);
  }

  describe(): string {
    return 'Automatic top-up (simulated payment)';
  }

  async charge(request: PaymentRequest): Promise<PaymentOutcome> {
    const paymentId = `simpay_${request.attemptId.replace(/-/g, '')}_${request.chargeSeq}`;
    const decline = DECLINING_TEST_METHODS[request.paymentMethodRef ?? ''];
    if (decline) {
      this.logger.warn(`SIMULATED payment ${paymentId} declined (${decline.code}); no card was involved`);
      return { status: 'failed', paymentId, ...decline, resend: false };
    }
    this.logger.warn(
      `SIMULATED payment ${paymentId}: $${(request.amountCents / 100).toFixed(2)} for workspace ${request.workspaceId}; ` +
        'no card was charged (set STRIPE_SECRET_KEY for real payments)',
    );
    return { status: 'succeeded', paymentId, amountCents: request.amountCents };
  }

  /**
   * No page to visit: the checkout is complete at once, and its completion is applied the
   * way Stripe's webhook is. A saved card is Stripe's test card `pm_card_visa` on a made-up
   * customer, so the settings look as they would with Stripe's test mode.
   */
  async startCheckout(request: CheckoutRequest): Promise<CheckoutStart> {
    const sessionId = `simcs_${randomBytes(12).toString('hex')}`;
    if (request.mode === 'payment') {
      if (!request.amountCents || !Number.isSafeInteger(request.amountCents) || request.amountCents <= 0) {
        throw new Error('A checkout payment needs a positive whole number of cents');
      }
      this.logger.warn(
        `SIMULATED checkout ${sessionId}: $${(request.amountCents / 100).toFixed(2)} for workspace ${request.workspaceId}; ` +
          'no card was charged (set STRIPE_SECRET_KEY for real payments)',
      );
      return {
        kind: 'completed',
        completion: { sessionId, workspaceId: request.workspaceId, mode: 'payment', paymentId: sessionId, amountCents: request.amountCents },
      };
    }
    const customerRef = request.customerRef ?? `cus_sim${randomBytes(8).toString('hex')}`;
    this.logger.warn(`SIMULATED card saved for workspace ${request.workspaceId} (pm_card_visa); no card is involved`);
    return {
      kind: 'completed',
      completion: { sessionId, workspaceId: request.workspaceId, mode: 'setup', customerRef, paymentMethodRef: 'pm_card_visa' },
    };
  }
}

/** Stripe's test payment methods that decline, with Stripe's codes and messages. */
const DECLINING_TEST_METHODS: Record<string, { code: string; reason: string }> = {
  pm_card_chargeDeclined: { code: 'card_declined', reason: 'Your card was declined. (simulated)' },
  pm_card_chargeDeclinedInsufficientFunds: { code: 'card_declined', reason: 'Your card has insufficient funds. (simulated)' },
  pm_card_chargeDeclinedExpiredCard: { code: 'expired_card', reason: 'Your card has expired. (simulated)' },
};
