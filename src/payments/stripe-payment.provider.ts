import type Stripe from 'stripe';
import { ApiError } from '../common/errors/api-error';
import type {
  CheckoutCompletion,
  CheckoutProvider,
  CheckoutRequest,
  CheckoutStart,
  PaymentEvent,
  PaymentMethodRef,
  PaymentOutcome,
  PaymentProvider,
  PaymentRequest,
} from './payment-provider';

/**
 * Auto top-ups through Stripe: a PaymentIntent confirmed off-session on the workspace's
 * saved customer and payment method, in US dollars.
 */
export class StripePaymentProvider implements PaymentProvider, CheckoutProvider {
  readonly name = 'stripe' as const;
  /** Stripe refuses card payments under $0.50. */
  readonly minimumChargeMillicents = 50_000;
  readonly needsPaymentMethod = true;

  constructor(private readonly stripe: Stripe) {}

  checkPaymentMethod(ref: PaymentMethodRef, { complete }: { complete: boolean }): void {
    checkStripeIds(ref);
    if (complete && (!ref.customerRef || !ref.paymentMethodRef)) {
      throw ApiError.badRequest(
        'Stripe payments need the saved customer and payment method: set stripe_customer and stripe_payment_method.',
        ref.customerRef ? 'stripe_payment_method' : 'stripe_customer',
      );
    }
  }

  describe(paymentId: string): string {
    return `Automatic top-up (Stripe payment ${paymentId})`;
  }

  async charge(request: PaymentRequest): Promise<PaymentOutcome> {
    if (!request.customerRef || !request.paymentMethodRef) {
      return {
        status: 'failed',
        paymentId: null,
        code: 'payment_method_missing',
        reason: 'No Stripe customer and payment method are saved for this workspace.',
        resend: false,
      };
    }
    try {
      const intent = await this.stripe.paymentIntents.create(
        {
          amount: request.amountCents,
          currency: 'usd',
          customer: request.customerRef,
          payment_method: request.paymentMethodRef,
          off_session: true,
          confirm: true,
          description: request.description,
          metadata: {
            workspace_id: request.workspaceId,
            attempt_id: request.attemptId,
            charge_seq: String(request.chargeSeq),
          },
        },
        { idempotencyKey: request.idempotencyKey },
      );
      return outcomeOfIntent(intent);
    } catch (error) {
      return outcomeOfError(error);
    }
  }

  /**
   * Stripe Checkout, hosted by Stripe: a session in `payment` mode buys credit (one line, named
   * by the request's description, for the amount), one in `setup` mode saves a card on the workspace's
   * customer (created on first use) for auto top-up's off-session payments. The outcome comes
   * by webhook (`checkout.session.completed`), never from the person's return to our page.
   */
  async startCheckout(request: CheckoutRequest): Promise<CheckoutStart> {
    const metadata = { workspace_id: request.workspaceId, purpose: request.mode === 'payment' ? 'topup' : 'card_setup' };
    const common = {
      client_reference_id: request.workspaceId,
      success_url: request.successUrl,
      cancel_url: request.cancelUrl,
      metadata,
    };
    let session: Stripe.Checkout.Session;
    if (request.mode === 'payment') {
      if (!request.amountCents || !Number.isSafeInteger(request.amountCents) || request.amountCents <= 0) {
        throw new Error('A checkout payment needs a positive whole number of cents');
      }
      session = await this.stripe.checkout.sessions.create({
        ...common,
        mode: 'payment',
        line_items: [
          {
            quantity: 1,
            price_data: { currency: 'usd', unit_amount: request.amountCents, product_data: { name: request.description } },
          },
        ],
        payment_intent_data: { description: request.description, metadata },
        ...(request.customerRef ? { customer: request.customerRef } : {}),
      });
    } else {
      const customer =
        request.customerRef ??
        (await this.stripe.customers.create({ description: request.description, metadata: { workspace_id: request.workspaceId } })).id;
      session = await this.stripe.checkout.sessions.create({
        ...common,
        mode: 'setup',
        currency: 'usd',
        customer,
        setup_intent_data: { description: request.description, metadata },
      });
    }
    if (!session.url) throw new Error(`Stripe gave checkout session ${session.id} no URL`);
    return { kind: 'redirect', sessionId: session.id, url: session.url };
  }

  async retrieve(paymentId: string): Promise<PaymentOutcome | null> {
    try {
      return outcomeOfIntent(await this.stripe.paymentIntents.retrieve(paymentId));
    } catch {
      return null; // Unknown now; asked again later.
    }
  }
}

/**
 * Refuses references that are not Stripe ids. The fields are named as the operator sets them
 * (`--stripe-customer`, `--stripe-payment-method`).
 */
export function checkStripeIds(ref: PaymentMethodRef): void {
  if (ref.customerRef !== null && !/^cus_\w+$/.test(ref.customerRef)) {
    throw ApiError.badRequest('stripe_customer must be a Stripe customer id (cus_...).', 'stripe_customer');
  }
  if (ref.paymentMethodRef !== null && !/^pm_\w+$/.test(ref.paymentMethodRef)) {
    throw ApiError.badRequest('stripe_payment_method must be a Stripe payment method id (pm_...).', 'stripe_payment_method');
  }
}

/** A `payment_intent.*` webhook event as a provider-neutral payment event; null for other events. */
export function paymentEventOf(event: Stripe.Event): PaymentEvent | null {
  if (event.type !== 'payment_intent.succeeded' && event.type !== 'payment_intent.payment_failed') return null;
  const intent = event.data.object;
  const chargeSeq = Number(intent.metadata?.charge_seq);
  return {
    paymentId: intent.id,
    workspaceId: intent.metadata?.workspace_id,
    attemptId: intent.metadata?.attempt_id,
    chargeSeq: Number.isSafeInteger(chargeSeq) && chargeSeq > 0 ? chargeSeq : undefined,
    outcome:
      event.type === 'payment_intent.succeeded'
        ? { status: 'succeeded', paymentId: intent.id, amountCents: intent.amount_received || intent.amount }
        : failedIntent(intent),
  };
}

function outcomeOfIntent(intent: Stripe.PaymentIntent): PaymentOutcome {
  switch (intent.status) {
    case 'succeeded':
      return { status: 'succeeded', paymentId: intent.id, amountCents: intent.amount_received || intent.amount };
    case 'processing':
    case 'requires_capture':
      return { status: 'pending', paymentId: intent.id };
    default:
      return failedIntent(intent);
  }
}

function failedIntent(intent: Stripe.PaymentIntent): PaymentOutcome {
  const error = intent.last_payment_error;
  if (intent.status === 'requires_action') {
    return {
      status: 'failed',
      paymentId: intent.id,
      code: 'authentication_required',
      reason: 'The card asks for the customer to authenticate, which an off-session payment cannot do.',
      resend: false,
    };
  }
  return {
    status: 'failed',
    paymentId: intent.id,
    code: error?.code ?? (intent.status === 'canceled' ? 'canceled' : 'payment_failed'),
    reason: withDeclineCode(error?.message ?? `The payment ended as ${intent.status}.`, error?.decline_code),
    resend: false,
  };
}

/**
 * Only a request that may not have reached Stripe is resent with its idempotency key (no
 * connection, or rate limited before it ran). Stripe replays a saved answer for 24 hours,
 * 500s included, so after a Stripe-side error the next try is a new request; a payment the
 * failed request did make after all is still credited, by its webhook.
 */
function outcomeOfError(error: unknown): PaymentOutcome {
  const stripeError = error as Partial<Stripe.errors.StripeError>;
  const notReceived = ['StripeConnectionError', 'StripeRateLimitError'];
  if (typeof stripeError?.type !== 'string' || !stripeError.type.startsWith('Stripe')) {
    return { status: 'failed', paymentId: null, code: 'internal_error', reason: String(error), resend: false };
  }
  return {
    status: 'failed',
    paymentId: stripeError.payment_intent?.id ?? null,
    code: stripeError.code ?? stripeError.rawType ?? snakeCase(stripeError.type.replace(/^Stripe/, '')),
    reason: withDeclineCode(stripeError.message ?? stripeError.type, stripeError.decline_code),
    resend: notReceived.includes(stripeError.type),
  };
}

function snakeCase(name: string): string {
  return name.replace(/([a-z])([A-Z])/g, '$1_$2').toLowerCase();
}

function withDeclineCode(message: string, declineCode: string | undefined): string {
  return declineCode ? `${message} (decline code: ${declineCode})` : message;
}

/** The `purpose` this service writes in the metadata of its Checkout sessions. */
const CHECKOUT_PURPOSES = ['topup', 'card_setup'];

/**
 * A `checkout.session.completed` (or `.async_payment_succeeded`) event as a completion;
 * null for other events and for sessions not yet paid (a bank debit still under way, whose
 * `async_payment_succeeded` comes later). A setup session's card is read from its
 * SetupIntent, which the event names but does not include.
 */
export async function checkoutCompletionOf(stripe: Stripe, event: Stripe.Event): Promise<CheckoutCompletion | null> {
  if (event.type !== 'checkout.session.completed' && event.type !== 'checkout.session.async_payment_succeeded') return null;
  const session = event.data.object;
  // Only sessions this service made: other apps on the same Stripe account have their own.
  const workspaceId = session.metadata?.workspace_id;
  if (!workspaceId || !CHECKOUT_PURPOSES.includes(session.metadata?.purpose ?? '')) return null;
  if (session.mode === 'payment') {
    if (session.payment_status !== 'paid' || session.amount_total === null) return null;
    const paymentId = typeof session.payment_intent === 'string' ? session.payment_intent : (session.payment_intent?.id ?? session.id);
    return { sessionId: session.id, workspaceId, mode: 'payment', paymentId, amountCents: session.amount_total };
  }
  if (session.mode !== 'setup' || !session.setup_intent) return null;
  const setupIntent =
    typeof session.setup_intent === 'string' ? await stripe.setupIntents.retrieve(session.setup_intent) : session.setup_intent;
  const paymentMethod = typeof setupIntent.payment_method === 'string' ? setupIntent.payment_method : setupIntent.payment_method?.id;
  const customer = typeof session.customer === 'string' ? session.customer : session.customer?.id;
  if (setupIntent.status !== 'succeeded' || !paymentMethod || !customer) return null;
  return { sessionId: session.id, workspaceId, mode: 'setup', customerRef: customer, paymentMethodRef: paymentMethod };
}
