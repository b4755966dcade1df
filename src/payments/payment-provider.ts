/** Injection token of the active `PaymentProvider` (null when payments are not configured). */
export const PAYMENT_PROVIDER = Symbol('PAYMENT_PROVIDER');

/** How an operator turns payments on: said wherever payments are refused. */
export const PAYMENTS_SETUP_HINT =
  'The operator sets STRIPE_SECRET_KEY (and STRIPE_WEBHOOK_SECRET) for Stripe, or PAYMENT_PROVIDER=simulated on a private instance outside production.';

/**
 * Every payment provider, by the name recorded with each payment (`auto_topup_attempts.provider`).
 * The database does not list them: a new provider is a class and a name here.
 */
export const PAYMENT_PROVIDER_NAMES = ['stripe', 'simulated'] as const;
export type PaymentProviderName = (typeof PAYMENT_PROVIDER_NAMES)[number];

export function isPaymentProviderName(value: unknown): value is PaymentProviderName {
  return typeof value === 'string' && (PAYMENT_PROVIDER_NAMES as readonly string[]).includes(value);
}

/**
 * How a workspace pays, as saved with its auto top-up settings: references that only the
 * provider understands (Stripe: a `cus_...` customer and a `pm_...` payment method).
 */
export interface PaymentMethodRef {
  customerRef: string | null;
  paymentMethodRef: string | null;
}

/** One off-session payment for an auto top-up. */
export interface PaymentRequest extends PaymentMethodRef {
  workspaceId: string;
  attemptId: string;
  /** Which payment request of the attempt this is (see `AutoTopupAttempt.chargeSeq`). */
  chargeSeq: number;
  /** Whole cents, US dollars. */
  amountCents: number;
  /** The same key means the same payment: a repeated request is answered, not charged again. */
  idempotencyKey: string;
  description: string;
}

export type PaymentOutcome =
  | { status: 'succeeded'; paymentId: string; amountCents: number }
  /** Accepted but not final: the provider's webhook will tell. */
  | { status: 'pending'; paymentId: string }
  /**
   * `resend`: the request may never have reached the provider (a network failure), so the
   * next try sends it again with the same idempotency key, and a payment that was made
   * after all is answered rather than made twice. Otherwise (a declined card, a refused or
   * failed request) the next try is a new payment request.
   */
  | { status: 'failed'; paymentId: string | null; code: string; reason: string; resend: boolean };

/**
 * Takes money for auto top-ups. Stripe in production; a simulated one in development.
 * Everything that differs between providers is here, so the auto top-up names none.
 */
export interface PaymentProvider {
  readonly name: PaymentProviderName;
  /** The smallest payment the provider takes, in millicents (Stripe: $0.50). */
  readonly minimumChargeMillicents: number;
  /** True when a saved customer and payment method are required to charge. */
  readonly needsPaymentMethod: boolean;
  /**
   * Throws a 400 naming the field when a saved reference is not one of this provider's, or,
   * with `complete` (auto top-up being enabled), when one it needs is missing.
   */
  checkPaymentMethod(ref: PaymentMethodRef, options: { complete: boolean }): void;
  /** The ledger description of a payment credited through this provider. */
  describe(paymentId: string): string;
  /** Charges off-session. Never throws for a payment that failed: the outcome says so. */
  charge(request: PaymentRequest): Promise<PaymentOutcome>;
  /** The current state of a payment left pending, where the provider can tell; null when it cannot. */
  retrieve?(paymentId: string): Promise<PaymentOutcome | null>;
}

/** What the webhook of a provider reports about a payment, provider-neutral. */
export interface PaymentEvent {
  paymentId: string;
  /** From the payment's metadata: the attempt it was made for, as we sent it. */
  workspaceId?: string;
  attemptId?: string;
  chargeSeq?: number;
  outcome: PaymentOutcome;
}

/**
 * A hosted checkout the person is sent to: `payment` buys credit now (a manual top-up),
 * `setup` saves a card for later off-session payments (auto top-up).
 */
export type CheckoutMode = 'payment' | 'setup';

export interface CheckoutRequest {
  workspaceId: string;
  mode: CheckoutMode;
  /** Whole cents, US dollars (`payment` only). */
  amountCents?: number;
  /** The workspace's customer at the provider, when one was saved (`setup` reuses it). */
  customerRef: string | null;
  /** Where the provider sends the person back; `{CHECKOUT_SESSION_ID}` is replaced by the session's id. */
  successUrl: string;
  cancelUrl: string;
  description: string;
}

export type CheckoutStart =
  /** Send the person to `url`; the provider's webhook reports the outcome later. */
  | { kind: 'redirect'; sessionId: string; url: string }
  /** Done already (the simulated provider): the completion goes the webhook's way at once. */
  | { kind: 'completed'; completion: CheckoutCompletion };

/** A checkout that ended well, as its webhook reports it, provider-neutral. */
export type CheckoutCompletion = {
  sessionId: string;
  /** From the session's metadata, as we sent it. */
  workspaceId: string;
} & (
  | { mode: 'payment'; paymentId: string; amountCents: number }
  | { mode: 'setup'; customerRef: string; paymentMethodRef: string }
);

/** Providers that can run a hosted checkout (both of ours). */
export interface CheckoutProvider {
  startCheckout(request: CheckoutRequest): Promise<CheckoutStart>;
}

export function canCheckout(provider: PaymentProvider | null): provider is PaymentProvider & CheckoutProvider {
  return typeof (provider as Partial<CheckoutProvider> | null)?.startCheckout === 'function';
}
