import { ConsoleLogger, Logger } from '@nestjs/common';
import type Stripe from 'stripe';
import { ConfigError, loadConfig } from '../config/app-config';
import { PaymentEvents } from './payment-events';
import { PaymentMethodRef, PaymentProvider } from './payment-provider';
import { choosePaymentProvider } from './payments.module';
import { SimulatedPaymentProvider } from './simulated-payment.provider';
import { checkoutCompletionOf, StripePaymentProvider } from './stripe-payment.provider';

const refused = (provider: PaymentProvider, ref: Partial<PaymentMethodRef>, complete: boolean) => {
  try {
    provider.checkPaymentMethod({ customerRef: null, paymentMethodRef: null, ...ref }, { complete });
    return null;
  } catch (error) {
    return (error as { param?: string }).param;
  }
};

describe('payment providers behind one seam', () => {
  const stripe = new StripePaymentProvider({} as Stripe);
  const simulated = new SimulatedPaymentProvider();

  it('each says its own minimum charge', () => {
    expect(stripe.minimumChargeMillicents).toBe(50_000);
    expect(simulated.minimumChargeMillicents).toBe(1_000);
  });

  it("Stripe takes Stripe ids only, and needs both to run", () => {
    const complete = { customerRef: 'cus_1', paymentMethodRef: 'pm_card_visa' };
    expect(refused(stripe, complete, true)).toBeNull();
    expect(refused(stripe, { ...complete, customerRef: 'acct_1' }, false)).toBe('stripe_customer');
    expect(refused(stripe, { ...complete, paymentMethodRef: 'card_1' }, false)).toBe('stripe_payment_method');
    expect(refused(stripe, { customerRef: 'cus_1' }, false)).toBeNull();
    expect(refused(stripe, { customerRef: 'cus_1' }, true)).toBe('stripe_payment_method');
    expect(refused(stripe, {}, true)).toBe('stripe_customer');
  });

  it("the simulated provider needs no reference, and takes Stripe's test ids", () => {
    expect(refused(simulated, {}, true)).toBeNull();
    expect(refused(simulated, { paymentMethodRef: 'pm_card_chargeDeclined' }, true)).toBeNull();
    expect(refused(simulated, { customerRef: 'acct_1' }, false)).toBe('stripe_customer');
  });
});

describe('PaymentEvents', () => {
  const event = { paymentId: 'pi_1', outcome: { status: 'pending' as const, paymentId: 'pi_1' } };

  it('hands each event to the one handler and answers with its result', async () => {
    const events = new PaymentEvents();
    const seen: string[] = [];
    events.handleWith(async (provider, e) => {
      seen.push(`${provider}:${e.paymentId}`);
      return 'applied';
    });
    await expect(events.deliver('stripe', event)).resolves.toBe('applied');
    expect(seen).toEqual(['stripe:pi_1']);
    expect(() => events.handleWith(async () => 'ignored')).toThrow(/already/);
  });

  it('fails without a handler, so that the provider delivers the event again', () => {
    expect(() => new PaymentEvents().deliver('stripe', event)).toThrow(/No handler/);
  });
});

describe('checkouts', () => {
  const paymentSession = {
    id: 'cs_test_1',
    mode: 'payment',
    payment_status: 'paid',
    amount_total: 2500,
    payment_intent: 'pi_1',
    customer: null,
    client_reference_id: 'ws-1',
    metadata: { workspace_id: 'ws-1', purpose: 'topup' },
  };
  const event = (type: string, object: unknown) => ({ id: 'evt_1', type, data: { object } }) as unknown as Stripe.Event;
  const stripeWith = (setupIntent: unknown) =>
    ({ setupIntents: { retrieve: async (id: string) => ({ id, ...(setupIntent as object) }) } }) as unknown as Stripe;

  it('reads a paid Checkout session as a payment of its total, for the workspace in its metadata', async () => {
    await expect(checkoutCompletionOf(stripeWith({}), event('checkout.session.completed', paymentSession))).resolves.toEqual({
      sessionId: 'cs_test_1',
      workspaceId: 'ws-1',
      mode: 'payment',
      paymentId: 'pi_1',
      amountCents: 2500,
    });
  });

  it('ignores sessions not paid yet, other events, and sessions of no workspace', async () => {
    const stripe = stripeWith({});
    await expect(checkoutCompletionOf(stripe, event('checkout.session.completed', { ...paymentSession, payment_status: 'unpaid' }))).resolves.toBeNull();
    await expect(checkoutCompletionOf(stripe, event('checkout.session.expired', paymentSession))).resolves.toBeNull();
    await expect(
      checkoutCompletionOf(stripe, event('checkout.session.completed', { ...paymentSession, metadata: {}, client_reference_id: 'ws-1' })),
    ).resolves.toBeNull();
    // Another app's session on the same Stripe account.
    await expect(
      checkoutCompletionOf(stripe, event('checkout.session.completed', { ...paymentSession, metadata: { workspace_id: 'ws-1', purpose: 'shop' } })),
    ).resolves.toBeNull();
  });

  it("reads a setup session's card from its SetupIntent, once that succeeded", async () => {
    const setup = { ...paymentSession, metadata: { workspace_id: 'ws-1', purpose: 'card_setup' }, mode: 'setup', payment_status: 'no_payment_required', amount_total: null, setup_intent: 'seti_1', customer: 'cus_1' };
    await expect(
      checkoutCompletionOf(stripeWith({ status: 'succeeded', payment_method: 'pm_1' }), event('checkout.session.completed', setup)),
    ).resolves.toEqual({ sessionId: 'cs_test_1', workspaceId: 'ws-1', mode: 'setup', customerRef: 'cus_1', paymentMethodRef: 'pm_1' });
    await expect(
      checkoutCompletionOf(stripeWith({ status: 'requires_payment_method', payment_method: null }), event('checkout.session.completed', setup)),
    ).resolves.toBeNull();
  });

  it('the simulated provider completes at once: a payment of the amount, or a saved test card', async () => {
    const simulated = new SimulatedPaymentProvider();
    const urls = { successUrl: 'http://x/{CHECKOUT_SESSION_ID}', cancelUrl: 'http://x', description: 'credit', customerRef: null };
    const payment = await simulated.startCheckout({ workspaceId: 'ws-1', mode: 'payment', amountCents: 1234, ...urls });
    expect(payment).toMatchObject({ kind: 'completed', completion: { mode: 'payment', workspaceId: 'ws-1', amountCents: 1234 } });
    const setup = await simulated.startCheckout({ workspaceId: 'ws-1', mode: 'setup', ...urls });
    expect(setup).toMatchObject({ kind: 'completed', completion: { mode: 'setup', paymentMethodRef: 'pm_card_visa' } });
    expect(setup.kind === 'completed' && setup.completion.mode === 'setup' && setup.completion.customerRef).toMatch(/^cus_sim[0-9a-f]{16}$/);
    await expect(simulated.startCheckout({ workspaceId: 'ws-1', mode: 'payment', amountCents: 0, ...urls })).rejects.toThrow(/positive/);
  });
});

describe('choosing the payment provider', () => {
  beforeAll(() => Logger.overrideLogger(false));
  afterAll(() => Logger.overrideLogger(new ConsoleLogger()));
  const base = loadConfig({ LOG_LEVEL: 'error' });
  const set = (provider: 'stripe' | 'simulated' | 'none', config = base) => ({ ...config, payments: { ...config.payments, provider } });
  const withStripe = { ...base, stripe: { secretKey: 'sk_test_x' } };
  const stripe = {} as Stripe;

  it('uses Stripe when its key is set, whatever the models', () => {
    expect(choosePaymentProvider(withStripe, stripe, true)?.name).toBe('stripe');
    expect(choosePaymentProvider(withStripe, stripe, false)?.name).toBe('stripe');
  });

  it('simulates by default only when every model is simulated, outside production', () => {
    expect(choosePaymentProvider(base, null, true)?.name).toBe('simulated');
    // A real provider key: no free credit unless asked for.
    expect(choosePaymentProvider(base, null, false)).toBeNull();
    expect(choosePaymentProvider({ ...base, production: true }, null, true)).toBeNull();
  });

  it('follows PAYMENT_PROVIDER when set, and never simulates in production', () => {
    expect(choosePaymentProvider(set('simulated'), null, false)?.name).toBe('simulated');
    expect(choosePaymentProvider(set('none'), null, true)).toBeNull();
    expect(choosePaymentProvider(set('none', withStripe), stripe, true)).toBeNull();
    expect(choosePaymentProvider(set('simulated', { ...base, production: true }), null, true)).toBeNull();
  });

  it('refuses contradictory payment settings at start, each named', () => {
    const problems = (env: Record<string, string>) => {
      try {
        loadConfig({ LOG_LEVEL: 'error', ...env });
        return '';
      } catch (error) {
        return error instanceof ConfigError ? error.message : String(error);
      }
    };
    expect(problems({ PAYMENT_PROVIDER: 'stripe' })).toMatch(/PAYMENT_PROVIDER=stripe needs STRIPE_SECRET_KEY/);
    expect(problems({ PAYMENT_PROVIDER: 'simulated', NODE_ENV: 'production', DATABASE_URL: 'postgres://x@db/acs' })).toMatch(
      /PAYMENT_PROVIDER=simulated is refused when NODE_ENV=production/,
    );
    expect(problems({ PAYMENT_PROVIDER: 'free' })).toMatch(/PAYMENT_PROVIDER must be one of stripe, simulated, none/);
    expect(problems({ TOPUP_MAX_MILLICENTS: '100500' })).toMatch(/TOPUP_MAX_MILLICENTS must be whole cents/);
    expect(problems({ AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS: '2000000', AUTO_TOPUP_MAX_MONTHLY_CAP_MILLICENTS: '1000000' })).toMatch(
      /AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS \(2000000\) must not exceed/,
    );
    expect(problems({ AUTO_TOPUP_MAX_PER_HOUR: '0' })).toMatch(/AUTO_TOPUP_MAX_PER_HOUR must be an integer from 1/);
    expect(problems({ PAYMENT_PROVIDER: 'simulated' })).toBe('');
  });

  it('has the documented defaults: $10,000 top-ups, a $500 default monthly cap, $50,000 at most, 3 charges an hour', () => {
    expect(base.payments).toEqual({
      provider: undefined,
      topupMaxMillicents: 1_000_000_000,
      autoTopupDefaultMonthlyCapMillicents: 50_000_000,
      autoTopupMaxMonthlyCapMillicents: 5_000_000_000,
      autoTopupMaxPerHour: 3,
    });
  });
});
