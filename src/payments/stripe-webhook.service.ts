import { Inject, Injectable, Logger } from '@nestjs/common';
import Stripe from 'stripe';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { PaymentEvents } from './payment-events';
import { STRIPE_CLIENT } from './stripe-client';
import { checkoutCompletionOf, paymentEventOf } from './stripe-payment.provider';

/**
 * Stripe's webhook: the event is believed only when its `Stripe-Signature` matches the
 * exact bytes received and `STRIPE_WEBHOOK_SECRET`. Payment outcomes go to the wallet's auto
 * top-up (through PaymentEvents), which credits a payment intent once however often its event
 * is delivered; completed Checkout sessions (manual top-ups, saved cards) go to the wallet's
 * top-up checkout the same way, credited once per session.
 */
@Injectable()
export class StripeWebhookService {
  private readonly logger = new Logger('StripeWebhook');

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    @Inject(STRIPE_CLIENT) private readonly stripe: Stripe | null,
    private readonly paymentEvents: PaymentEvents,
  ) {}

  async handle(rawBody: Buffer | undefined, signature: string | undefined): Promise<{ received: true }> {
    const secret = this.config.stripe.webhookSecret;
    if (!secret || !this.stripe) {
      throw ApiError.badRequest('Stripe webhooks are not configured: set STRIPE_WEBHOOK_SECRET.', undefined, 'webhook_not_configured');
    }
    if (!signature) {
      throw ApiError.badRequest('The Stripe-Signature header is missing.', 'Stripe-Signature', 'invalid_signature');
    }
    if (!rawBody) {
      throw ApiError.badRequest('A Stripe event must be sent as application/json.', undefined, 'invalid_payload');
    }
    let event: Stripe.Event;
    try {
      event = this.stripe.webhooks.constructEvent(rawBody, signature, secret);
    } catch (error) {
      this.logger.warn(`Refused a webhook with a bad signature: ${error instanceof Error ? error.message : String(error)}`);
      throw ApiError.badRequest('The Stripe-Signature does not match this payload.', 'Stripe-Signature', 'invalid_signature');
    }
    const paymentEvent = paymentEventOf(event);
    if (paymentEvent) {
      const result = await this.paymentEvents.deliver('stripe', paymentEvent);
      this.logger.log(`${event.type} ${event.id} for ${paymentEvent.paymentId}: ${result}`);
    }
    const completion = await checkoutCompletionOf(this.stripe, event);
    if (completion) {
      const result = await this.paymentEvents.deliverCheckout('stripe', completion);
      this.logger.log(`${event.type} ${event.id} for checkout ${completion.sessionId} (${completion.mode}): ${result}`);
    }
    return { received: true };
  }
}
