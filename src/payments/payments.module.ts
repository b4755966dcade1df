import { Logger, Module } from '@nestjs/common';
import type Stripe from 'stripe';
import type { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.module';
import { PaymentEvents } from './payment-events';
import { PAYMENT_PROVIDER, PaymentProvider } from './payment-provider';
import { SimulatedPaymentProvider } from './simulated-payment.provider';
import { createStripeClient, STRIPE_CLIENT } from './stripe-client';
import { StripePaymentProvider } from './stripe-payment.provider';
import { StripeWebhookController } from './stripe-webhook.controller';
import { StripeWebhookService } from './stripe-webhook.service';

/**
 * Stripe with STRIPE_SECRET_KEY; without it, simulated payments outside production (said
 * loudly at start) and no auto top-up at all in production.
 */
export function choosePaymentProvider(config: AppConfig, stripe: Stripe | null): PaymentProvider | null {
  const logger = new Logger('Payments');
  if (config.stripe.secretKey && stripe) {
    logger.log(`Auto top-up payments go through Stripe${config.stripe.apiBase ? ` at ${config.stripe.apiBase}` : ''}`);
    if (!config.stripe.webhookSecret) {
      logger.warn('STRIPE_WEBHOOK_SECRET is not set: payments that Stripe confirms later (webhooks) are never credited');
    }
    return new StripePaymentProvider(stripe);
  }
  if (config.production) {
    logger.warn('STRIPE_SECRET_KEY is not set: auto top-up is off');
    return null;
  }
  logger.warn('STRIPE_SECRET_KEY is not set: auto top-up payments are SIMULATED (no card is charged; not in production)');
  return new SimulatedPaymentProvider();
}

/**
 * Payment providers behind one seam (`PAYMENT_PROVIDER`), and their webhooks, whose events
 * go out through `PaymentEvents`. What payments are for is the wallet's business: the wallet
 * module imports this one, never the reverse.
 */
@Module({
  controllers: [StripeWebhookController],
  providers: [
    { provide: STRIPE_CLIENT, inject: [APP_CONFIG], useFactory: (config: AppConfig) => createStripeClient(config.stripe) },
    { provide: PAYMENT_PROVIDER, inject: [APP_CONFIG, STRIPE_CLIENT], useFactory: choosePaymentProvider },
    PaymentEvents,
    StripeWebhookService,
  ],
  exports: [PAYMENT_PROVIDER, PaymentEvents],
})
export class PaymentsModule {}
