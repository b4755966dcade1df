import { Logger, Module } from '@nestjs/common';
import type Stripe from 'stripe';
import type { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.module';
import { ModelsModule } from '../models/models.module';
import { ModelsService } from '../models/models.service';
import { ProvidersModule } from '../providers/providers.module';
import { ProvidersService } from '../providers/providers.service';
import { PaymentEvents } from './payment-events';
import { PAYMENT_PROVIDER, PaymentProvider, PAYMENTS_SETUP_HINT } from './payment-provider';
import { SimulatedPaymentProvider } from './simulated-payment.provider';
import { createStripeClient, STRIPE_CLIENT } from './stripe-client';
import { StripePaymentProvider } from './stripe-payment.provider';
import { StripeWebhookController } from './stripe-webhook.controller';
import { StripeWebhookService } from './stripe-webhook.service';

/**
 * Which provider takes payments: PAYMENT_PROVIDER when set; else Stripe with
 * STRIPE_SECRET_KEY; else simulated payments only when every model answers from the
 * built-in simulator outside production (no answer costs anyone real money, so free credit
 * gives nothing away); else none. Simulated payments with a real provider key would let
 * anyone who signs up spend the operator's provider account: they must be asked for.
 */
export function choosePaymentProvider(config: AppConfig, stripe: Stripe | null, everyModelSimulated: boolean): PaymentProvider | null {
  const logger = new Logger('Payments');
  const setting =
    config.payments.provider ?? (config.stripe.secretKey ? 'stripe' : everyModelSimulated && !config.production ? 'simulated' : 'none');
  if (setting === 'stripe' && config.stripe.secretKey && stripe) {
    logger.log(`Payments go through Stripe${config.stripe.apiBase ? ` at ${config.stripe.apiBase}` : ''}`);
    if (!config.stripe.webhookSecret) {
      logger.warn('STRIPE_WEBHOOK_SECRET is not set: payments that Stripe confirms later (webhooks) are never credited');
    }
    return new StripePaymentProvider(stripe);
  }
  // The configuration refuses PAYMENT_PROVIDER=simulated in production; this holds for a config built otherwise.
  if (setting === 'simulated' && !config.production) {
    logger.warn(
      'Payments are SIMULATED: top-ups and auto top-ups add credit without charging any card' +
        (config.payments.provider ? ' (PAYMENT_PROVIDER=simulated)' : ' (every model is simulated; set STRIPE_SECRET_KEY for real payments)'),
    );
    return new SimulatedPaymentProvider();
  }
  logger.warn(`Payments are not configured: no top-up or auto top-up can be bought. ${PAYMENTS_SETUP_HINT}`);
  return null;
}

/** True when no model of the catalog reaches a real provider (all are served by the simulator). */
export function everyModelSimulated(models: ModelsService, providers: ProvidersService): boolean {
  return models.list().every((model) => providers.isSimulated(model));
}

/**
 * Payment providers behind one seam (`PAYMENT_PROVIDER`), and their webhooks, whose events
 * go out through `PaymentEvents`. What payments are for is the wallet's business: the wallet
 * module imports this one, never the reverse.
 */
@Module({
  imports: [ModelsModule, ProvidersModule],
  controllers: [StripeWebhookController],
  providers: [
    { provide: STRIPE_CLIENT, inject: [APP_CONFIG], useFactory: (config: AppConfig) => createStripeClient(config.stripe) },
    {
      provide: PAYMENT_PROVIDER,
      inject: [APP_CONFIG, STRIPE_CLIENT, ModelsService, ProvidersService],
      useFactory: (config: AppConfig, stripe: Stripe | null, models: ModelsService, providers: ProvidersService) =>
        choosePaymentProvider(config, stripe, everyModelSimulated(models, providers)),
    },
    PaymentEvents,
    StripeWebhookService,
  ],
  exports: [PAYMENT_PROVIDER, PaymentEvents],
})
export class PaymentsModule {}
