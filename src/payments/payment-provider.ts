import type { PaymentProviderName } from '../wallet/entities/auto-topup-attempt.entity';

/** Injection token of the active `PaymentProvider` (null when payments are not configured). */
export const PAYMENT_PROVIDER = Symbol('PAYMENT_PROVIDER');

/** One off-session payment for an auto top-up. */
export interface PaymentRequest {
  workspaceId: string;
  attemptId: string;
  /** Which payment request of the attempt this is (see `AutoTopupAttempt.chargeSeq`). */
  chargeSeq: number;
  /** Whole cents, US dollars. */
  amountCents: number;
  /** The same key means the same payment: a repeated request is answered, not charged again. */
  idempotencyKey: string;
  customerId: string | null;
  paymentMethodId: string | null;
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

/** Takes money for auto top-ups. Stripe in production; a simulated one in development. */
export interface PaymentProvider {
  readonly name: PaymentProviderName;
  /** True when a saved customer and payment method are required to charge. */
  readonly needsPaymentMethod: boolean;
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
