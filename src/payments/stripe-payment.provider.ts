import type Stripe from 'stripe';
import { ApiError } from '../common/errors/api-error';
import type { PaymentEvent, PaymentMethodRef, PaymentOutcome, PaymentProvider, PaymentRequest } from './payment-provider';

/**
 * Auto top-ups through Stripe: a PaymentIntent confirmed off-session on the workspace's
 * saved customer and payment method, in US dollars.
 */
export class StripePaymentProvider implements PaymentProvider {
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
