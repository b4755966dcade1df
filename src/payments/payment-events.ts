import { Injectable } from '@nestjs/common';
import type { CheckoutCompletion, PaymentEvent, PaymentProviderName } from './payment-provider';

/** Whether the event changed anything ('ignored': not ours, or nothing to do). */
export type PaymentEventResult = 'applied' | 'ignored';

export type PaymentEventHandler = (provider: PaymentProviderName, event: PaymentEvent) => Promise<PaymentEventResult>;
export type CheckoutHandler = (provider: PaymentProviderName, completion: CheckoutCompletion) => Promise<PaymentEventResult>;

/**
 * Where a provider's webhook hands over the payments it reports. Payments know nothing of
 * what was paid for: the wallet's auto top-up registers its handler at start, so the wallet
 * depends on payments and never the reverse.
 */
@Injectable()
export class PaymentEvents {
  private handler: PaymentEventHandler | null = null;
  private checkoutHandler: CheckoutHandler | null = null;

  handleWith(handler: PaymentEventHandler): void {
    if (this.handler) throw new Error('Payment events already have a handler');
    this.handler = handler;
  }

  /**
   * Resolves once the event is applied. Without a handler it throws: the webhook then fails
   * and the provider delivers the event again later, rather than a payment being dropped.
   */
  deliver(provider: PaymentProviderName, event: PaymentEvent): Promise<PaymentEventResult> {
    if (!this.handler) throw new Error('No handler for payment events is registered');
    return this.handler(provider, event);
  }

  /** Completed checkouts (manual top-ups, saved cards) go to the wallet's top-up checkout. */
  handleCheckoutsWith(handler: CheckoutHandler): void {
    if (this.checkoutHandler) throw new Error('Checkout completions already have a handler');
    this.checkoutHandler = handler;
  }

  /** As deliver(): without a handler it throws, so the provider delivers the event again. */
  deliverCheckout(provider: PaymentProviderName, completion: CheckoutCompletion): Promise<PaymentEventResult> {
    if (!this.checkoutHandler) throw new Error('No handler for checkout completions is registered');
    return this.checkoutHandler(provider, completion);
  }
}
