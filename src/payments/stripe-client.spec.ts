import { createStripeClient, stripeHostOptions } from './stripe-client';

describe('STRIPE_API_BASE for the Stripe SDK', () => {
  it('becomes the host, port and protocol the SDK takes', () => {
    expect(stripeHostOptions('http://127.0.0.1:12111')).toEqual({ host: '127.0.0.1', port: 12111, protocol: 'http' });
    expect(stripeHostOptions('https://stripe-proxy.internal')).toEqual({ host: 'stripe-proxy.internal', port: 443, protocol: 'https' });
    expect(stripeHostOptions('http://[::1]:8080/')).toEqual({ host: '::1', port: 8080, protocol: 'http' });
  });

  it('refuses a path: the SDK adds /v1 itself', () => {
    expect(() => stripeHostOptions('http://127.0.0.1:12111/v1')).toThrow(/scheme, host and port only/);
  });

  it('makes no client when neither Stripe key is set', () => {
    expect(createStripeClient({})).toBeNull();
    expect(createStripeClient({ webhookSecret: 'whsec_x' })?.webhooks).toBeDefined();
  });
});
