import Stripe from 'stripe';
import type { AppConfig } from '../config/app-config';

/** Injection token of the Stripe SDK client (null when neither Stripe key is set). */
export const STRIPE_CLIENT = Symbol('STRIPE_CLIENT');

/**
 * The official SDK, pointed at `STRIPE_API_BASE` when set (a local fake in tests, a proxy):
 * the SDK takes a host, port and protocol, and adds the `/v1/...` paths itself.
 */
export function createStripeClient(stripe: AppConfig['stripe']): Stripe | null {
  if (!stripe.secretKey && !stripe.webhookSecret) return null;
  // Verifying webhooks needs no secret key; the client is then never used to call Stripe.
  return new Stripe(stripe.secretKey ?? 'sk_not_configured', {
    maxNetworkRetries: 2,
    timeout: 30_000,
    telemetry: false,
    appInfo: { name: 'assistant-chat-service' },
    ...(stripe.apiBase ? stripeHostOptions(stripe.apiBase) : {}),
  });
}

export function stripeHostOptions(apiBase: string): Pick<Stripe.StripeConfig, 'host' | 'port' | 'protocol'> {
  const url = new URL(apiBase);
  if (url.pathname !== '/' || url.search || url.username) {
    throw new Error(`STRIPE_API_BASE must be a scheme, host and port only, such as http://127.0.0.1:12111 (got "${apiBase}")`);
  }
  const protocol = url.protocol === 'http:' ? 'http' : 'https';
  return {
    host: url.hostname.replace(/^\[(.*)\]$/, '$1'),
    port: url.port ? Number(url.port) : protocol === 'http' ? 80 : 443,
    protocol,
  };
}
