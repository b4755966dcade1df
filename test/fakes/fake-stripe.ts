import { randomBytes } from 'node:crypto';
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import Stripe from 'stripe';

/** What the fake answers to the next `POST /v1/payment_intents`. */
export type StripeScenario =
  | { kind: 'succeed' }
  /** Accepted, not final (`status: processing`): the outcome comes by webhook. */
  | { kind: 'processing' }
  /** A card error, 402, with Stripe's error body (`card_declined` by default). */
  | { kind: 'decline'; code?: string; declineCode?: string; message?: string }
  /** Any other HTTP error, with a Stripe error body; `Stripe-Should-Retry: false` keeps the SDK from retrying. */
  | { kind: 'http_error'; status: number; type: string; code?: string; message?: string }
  /** The connection is cut before any answer (the SDK retries it itself, with the same key). */
  | { kind: 'disconnect' };

export interface RecordedStripeRequest {
  method: string;
  path: string;
  headers: IncomingMessage['headers'];
  idempotencyKey: string | undefined;
  /** The form-encoded body, flattened as sent (`metadata[attempt_id]`). */
  params: Record<string, string>;
  /** True when answered from the idempotency cache, as Stripe does for a repeated key. */
  replayed: boolean;
}

export type FakePaymentIntent = Stripe.PaymentIntent;

export interface FakeStripe {
  /** For STRIPE_API_BASE: scheme, host and port; the SDK adds `/v1/...`. */
  url: string;
  requests: RecordedStripeRequest[];
  /** The payment intents created, by id; tests may change their status (for webhooks). */
  paymentIntents: Map<string, FakePaymentIntent>;
  /** Queues answers for the next payment intents; when the queue is empty, the default answers. */
  script(...scenarios: StripeScenario[]): void;
  setDefault(scenario: StripeScenario): void;
  /** Delay before each answer, to widen race windows. */
  setDelay(ms: number): void;
  /** Holds every answer until the returned function is called. */
  pause(): () => void;
  /** Only the requests that created payment intents (replays excluded). */
  created(): RecordedStripeRequest[];
  /** Checkout sessions created, by id (their `url` is this fake's hosted page). */
  checkoutSessions: Map<string, FakeCheckoutSession>;
  /**
   * Where the hosted checkout page sends its signed `checkout.session.completed` event once
   * the person pays, as Stripe does (the app's `/v1/payments/stripe/webhook`).
   */
  deliverWebhooksTo(url: string, secret: string): void;
  /** Keeps completed checkouts' events until `releaseWebhooks()` (a webhook that is late). */
  holdWebhooks(): void;
  /** Sends the held events (and stops holding); resolves with the app's answers' statuses. */
  releaseWebhooks(): Promise<number[]>;
  /** Sends an event already delivered once more (Stripe retries and replays). */
  redeliver(sessionId: string): Promise<number>;
  close(): Promise<void>;
}

/** A Checkout session as the fake keeps it: Stripe's fields, and the parameters it was made with. */
export type FakeCheckoutSession = Stripe.Checkout.Session & { params: Record<string, string> };

/**
 * A local server speaking Stripe's wire format for payment intents (form-encoded requests,
 * JSON answers, Stripe's error bodies, idempotency keys replayed for 24 hours as Stripe
 * does), so the service's real Stripe provider and the official SDK run unmodified. It also
 * makes Checkout sessions (payment and setup mode) with a hosted page at `/checkout/<id>`
 * that, when "paid", sends the signed `checkout.session.completed` webhook and redirects to
 * the session's success URL, the way Stripe Checkout does.
 */
export async function startFakeStripe(): Promise<FakeStripe> {
  const queue: StripeScenario[] = [];
  let fallback: StripeScenario = { kind: 'succeed' };
  let delayMs = 0;
  let paused: Promise<void> | null = null;
  const requests: RecordedStripeRequest[] = [];
  const paymentIntents = new Map<string, FakePaymentIntent>();
  const idempotent = new Map<string, { status: number; body: unknown }>();
  const checkoutSessions = new Map<string, FakeCheckoutSession>();
  const setupIntents = new Map<string, Stripe.SetupIntent>();
  const deliveredEvents = new Map<string, { payload: string }>();
  let webhook: { url: string; secret: string } | null = null;
  let holding = false;
  const held: string[] = [];
  let baseUrl = '';

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const params = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
      const idempotencyKey = header(req, 'idempotency-key');
      const recorded: RecordedStripeRequest = {
        method: req.method ?? '',
        path: req.url ?? '',
        headers: req.headers,
        idempotencyKey,
        params,
        replayed: false,
      };
      requests.push(recorded);
      const answer = () => setTimeout(() => route(req, res, recorded), delayMs);
      if (paused) void paused.then(answer);
      else answer();
    });
  });

  function route(req: IncomingMessage, res: ServerResponse, recorded: RecordedStripeRequest): void {
    const hosted = /^\/checkout\/(cs_test_\w+)(\/pay)?$/.exec(recorded.path);
    if (hosted) return void hostedCheckout(req, res, hosted[1], Boolean(hosted[2])).catch((error: unknown) => sendHtml(res, 500, String(error)));
    if (!/^Bearer sk_/.test(header(req, 'authorization') ?? '')) {
      return send(res, 401, stripeError('invalid_request_error', undefined, 'Invalid API Key provided.'));
    }
    const retrieve = /^\/v1\/payment_intents\/([\w]+)$/.exec(recorded.path);
    if (req.method === 'GET' && retrieve) {
      const intent = paymentIntents.get(retrieve[1]);
      return intent
        ? send(res, 200, intent)
        : send(res, 404, stripeError('invalid_request_error', 'resource_missing', `No such payment_intent: '${retrieve[1]}'`));
    }
    if (req.method === 'POST' && recorded.path === '/v1/customers') {
      return send(res, 200, { id: `cus_${randomBytes(8).toString('hex')}`, object: 'customer', metadata: metadataOf(recorded.params) });
    }
    if (req.method === 'POST' && recorded.path === '/v1/checkout/sessions') return createCheckoutSession(res, recorded.params);
    const setupIntent = /^\/v1\/setup_intents\/(\w+)$/.exec(recorded.path);
    if (req.method === 'GET' && setupIntent) {
      const intent = setupIntents.get(setupIntent[1]);
      return intent
        ? send(res, 200, intent)
        : send(res, 404, stripeError('invalid_request_error', 'resource_missing', `No such setupintent: '${setupIntent[1]}'`));
    }
    if (req.method !== 'POST' || recorded.path !== '/v1/payment_intents') {
      return send(res, 404, stripeError('invalid_request_error', undefined, `Unrecognized request URL (${req.method}: ${recorded.path}).`));
    }
    const key = recorded.idempotencyKey;
    const cached = key ? idempotent.get(key) : undefined;
    if (cached) {
      recorded.replayed = true;
      return send(res, cached.status, cached.body, { 'Idempotent-Replayed': 'true' });
    }
    const scenario = queue.shift() ?? fallback;
    if (scenario.kind === 'disconnect') {
      req.socket.destroy();
      return;
    }
    const { status, body } = createPaymentIntent(recorded.params, scenario);
    // Stripe saves every answer of a request that began to run, 500s included.
    if (key && status !== 429) idempotent.set(key, { status, body });
    send(res, status, body, status >= 500 ? { 'Stripe-Should-Retry': 'false' } : {});
  }

  function createPaymentIntent(
    params: Record<string, string>,
    scenario: Exclude<StripeScenario, { kind: 'disconnect' }>,
  ): { status: number; body: unknown } {
    if (scenario.kind === 'http_error') {
      return { status: scenario.status, body: stripeError(scenario.type, scenario.code, scenario.message ?? 'Something went wrong.') };
    }
    if (!params.amount || !params.currency || params.confirm !== 'true') {
      return { status: 400, body: stripeError('invalid_request_error', 'parameter_missing', 'Missing required param: amount.') };
    }
    const amount = Number(params.amount);
    const metadata = Object.fromEntries(
      Object.entries(params)
        .filter(([name]) => name.startsWith('metadata['))
        .map(([name, value]) => [name.slice('metadata['.length, -1), value]),
    );
    const intent = {
      id: `pi_${randomBytes(12).toString('hex')}`,
      object: 'payment_intent',
      amount,
      amount_received: scenario.kind === 'succeed' ? amount : 0,
      currency: params.currency,
      customer: params.customer ?? null,
      payment_method: params.payment_method ?? null,
      description: params.description ?? null,
      metadata,
      status: scenario.kind === 'succeed' ? 'succeeded' : scenario.kind === 'processing' ? 'processing' : 'requires_payment_method',
      confirmation_method: 'automatic',
      capture_method: 'automatic',
      created: Math.floor(Date.now() / 1000),
      livemode: false,
      last_payment_error: null,
    } as unknown as FakePaymentIntent;
    paymentIntents.set(intent.id, intent);
    if (scenario.kind !== 'decline') return { status: 200, body: intent };

    const code = scenario.code ?? 'card_declined';
    const declineCode = scenario.declineCode ?? 'generic_decline';
    const message = scenario.message ?? 'Your card was declined.';
    const lastError = { type: 'card_error', code, decline_code: declineCode, message };
    Object.assign(intent, { last_payment_error: lastError });
    return {
      status: 402,
      body: {
        error: {
          ...lastError,
          charge: `ch_${randomBytes(12).toString('hex')}`,
          doc_url: `https://stripe.com/docs/error-codes/${code.replace(/_/g, '-')}`,
          payment_intent: intent,
          request_log_url: 'https://dashboard.stripe.com/test/logs/req_fake',
        },
      },
    };
  }


  /** Stripe checks these as it creates a session; a mistake in our parameters is a 400, as there. */
  function createCheckoutSession(res: ServerResponse, params: Record<string, string>): void {
    const mode = params.mode;
    const missing = ['success_url', 'mode'].find((name) => !params[name]);
    if (missing) return send(res, 400, stripeError('invalid_request_error', 'parameter_missing', `Missing required param: ${missing}.`));
    if (mode === 'payment' && !(Number(params['line_items[0][price_data][unit_amount]']) > 0)) {
      return send(res, 400, stripeError('invalid_request_error', 'parameter_missing', 'Missing required param: line_items[0][price_data][unit_amount].'));
    }
    if (mode === 'setup' && (!params.currency || !params.customer)) {
      return send(res, 400, stripeError('invalid_request_error', 'parameter_missing', 'Missing required param: currency (and a customer).'));
    }
    const id = `cs_test_${randomBytes(12).toString('hex')}`;
    const quantity = Number(params['line_items[0][quantity]'] ?? 1);
    const session = {
      id,
      object: 'checkout.session',
      mode,
      status: 'open',
      payment_status: mode === 'setup' ? 'no_payment_required' : 'unpaid',
      amount_total: mode === 'payment' ? Number(params['line_items[0][price_data][unit_amount]']) * quantity : null,
      currency: params.currency ?? params['line_items[0][price_data][currency]'] ?? null,
      customer: params.customer ?? null,
      client_reference_id: params.client_reference_id ?? null,
      metadata: metadataOf(params),
      payment_intent: null,
      setup_intent: null,
      success_url: params.success_url,
      cancel_url: params.cancel_url ?? null,
      url: `${baseUrl}/checkout/${id}`,
      livemode: false,
      created: Math.floor(Date.now() / 1000),
      params,
    } as unknown as FakeCheckoutSession;
    checkoutSessions.set(id, session);
    send(res, 200, { ...session, params: undefined });
  }

  /**
   * Stripe's hosted page, reduced to what a person does there: GET shows the amount and a
   * Pay (or Save card) button; POST completes the session, sends the signed webhook (unless
   * held) and redirects to the success URL with `{CHECKOUT_SESSION_ID}` filled in.
   */
  async function hostedCheckout(req: IncomingMessage, res: ServerResponse, id: string, pay: boolean): Promise<void> {
    const session = checkoutSessions.get(id);
    if (!session) return sendHtml(res, 404, '<h1>This checkout session does not exist</h1>');
    if (!pay) {
      const what = session.mode === 'payment' ? `Pay $${((session.amount_total ?? 0) / 100).toFixed(2)}` : 'Save card';
      return sendHtml(
        res,
        200,
        `<!doctype html><html lang="en"><head><title>Fake Stripe Checkout</title></head><body><main><h1>Fake Stripe Checkout</h1>` +
          `<p>Card: 4242 4242 4242 4242 (test)</p><form method="post" action="/checkout/${id}/pay"><button type="submit">${what}</button></form>` +
          `<p><a href="${escapeHtml(session.cancel_url ?? '/')}">Cancel</a></p></main></body></html>`,
      );
    }
    if (req.method !== 'POST') return sendHtml(res, 405, 'POST only');
    if (session.status !== 'complete') {
      if (session.mode === 'payment') {
        const intent = {
          id: `pi_${randomBytes(12).toString('hex')}`,
          object: 'payment_intent',
          amount: session.amount_total,
          amount_received: session.amount_total,
          currency: 'usd',
          status: 'succeeded',
          metadata: session.metadata,
          customer: session.customer,
          last_payment_error: null,
        } as unknown as FakePaymentIntent;
        paymentIntents.set(intent.id, intent);
        Object.assign(session, { status: 'complete', payment_status: 'paid', payment_intent: intent.id });
      } else {
        const intent = {
          id: `seti_${randomBytes(12).toString('hex')}`,
          object: 'setup_intent',
          status: 'succeeded',
          customer: session.customer,
          payment_method: 'pm_card_visa',
          metadata: session.metadata,
        } as unknown as Stripe.SetupIntent;
        setupIntents.set(intent.id, intent);
        Object.assign(session, { status: 'complete', setup_intent: intent.id });
      }
      const payload = eventPayload('checkout.session.completed', { ...session, params: undefined });
      deliveredEvents.set(id, { payload });
      if (holding) held.push(payload);
      else await deliver(payload);
    }
    res.writeHead(303, { Location: (session.success_url ?? '/').replace('{CHECKOUT_SESSION_ID}', id) });
    res.end();
  }

  async function deliver(payload: string): Promise<number> {
    if (!webhook) throw new Error('deliverWebhooksTo() was not called: the fake has nowhere to send the event');
    const signature = new Stripe('sk_test_signing').webhooks.generateTestHeaderString({ payload, secret: webhook.secret });
    const response = await fetch(webhook.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'stripe-signature': signature },
      body: payload,
    });
    await response.text();
    return response.status;
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  baseUrl = `http://127.0.0.1:${port}`;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    paymentIntents,
    script: (...scenarios) => queue.push(...scenarios),
    setDefault: (scenario) => {
      fallback = scenario;
    },
    setDelay: (ms) => {
      delayMs = ms;
    },
    pause: () => {
      let resume!: () => void;
      paused = new Promise<void>((resolve) => (resume = resolve));
      return () => {
        paused = null;
        resume();
      };
    },
    created: () => requests.filter((r) => r.method === 'POST' && r.path === '/v1/payment_intents' && !r.replayed),
    checkoutSessions,
    deliverWebhooksTo: (url, secret) => {
      webhook = { url, secret };
    },
    holdWebhooks: () => {
      holding = true;
    },
    releaseWebhooks: async () => {
      holding = false;
      const statuses: number[] = [];
      for (const payload of held.splice(0)) statuses.push(await deliver(payload));
      return statuses;
    },
    redeliver: (sessionId) => {
      const event = deliveredEvents.get(sessionId);
      if (!event) throw new Error(`No event was sent for checkout session ${sessionId}`);
      return deliver(event.payload);
    },
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/**
 * A webhook delivery as Stripe makes it: the event JSON and its `Stripe-Signature`,
 * signed with the SDK's own test helper.
 */
export function signedStripeEvent(
  type: 'payment_intent.succeeded' | 'payment_intent.payment_failed',
  intent: FakePaymentIntent,
  secret: string,
  eventId = `evt_${randomBytes(12).toString('hex')}`,
): { payload: string; signature: string } {
  const payload = eventPayload(type, intent, eventId);
  const signature = new Stripe('sk_test_signing').webhooks.generateTestHeaderString({ payload, secret });
  return { payload, signature };
}

/** A Stripe event's JSON, as webhooks carry it. */
function eventPayload(type: string, object: unknown, eventId = `evt_${randomBytes(12).toString('hex')}`): string {
  return JSON.stringify({
    id: eventId,
    object: 'event',
    api_version: '2025-01-01',
    created: Math.floor(Date.now() / 1000),
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    type,
    data: { object },
  });
}

/** `metadata[key]=value` form fields as an object. */
function metadataOf(params: Record<string, string>): Record<string, string> {
  return Object.fromEntries(
    Object.entries(params)
      .filter(([name]) => name.startsWith('metadata['))
      .map(([name, value]) => [name.slice('metadata['.length, -1), value]),
  );
}

function escapeHtml(text: string): string {
  return text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');
}

function sendHtml(res: ServerResponse, status: number, html: string): void {
  res.writeHead(status, { 'Content-Type': 'text/html; charset=utf-8' });
  res.end(html);
}

function stripeError(type: string, code: string | undefined, message: string) {
  return { error: { type, ...(code ? { code } : {}), message } };
}

function header(req: IncomingMessage, name: string): string | undefined {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
}

function send(res: ServerResponse, status: number, body: unknown, headers: Record<string, string> = {}): void {
  res.writeHead(status, {
    'Content-Type': 'application/json',
    'Request-Id': `req_${randomBytes(7).toString('hex')}`,
    ...headers,
  });
  res.end(JSON.stringify(body));
}
