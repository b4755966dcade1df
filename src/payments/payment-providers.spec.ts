import type Stripe from 'stripe';
import { PaymentEvents } from './payment-events';
import { PaymentMethodRef, PaymentProvider } from './payment-provider';
import { SimulatedPaymentProvider } from './simulated-payment.provider';
import { StripePaymentProvider } from './stripe-payment.provider';

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
