import { DataSource } from 'typeorm';
import { AUTO_TOPUP_MAX_TRIES } from '../src/wallet/auto-topup-attempts';
import { AutoTopupScheduler } from '../src/wallet/auto-topup-scheduler';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { microsOf } from '../src/wallet/cost';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeStripe, signedStripeEvent, startFakeStripe } from './fakes/fake-stripe';
import { runCli } from './support/processes';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * Auto top-up through the whole app: chat requests answered by the built-in simulator
 * charge the wallet, and the charge that leaves it below the threshold buys a top-up,
 * from a local fake of Stripe's API (the real SDK and provider run against it) or from the
 * simulated payment provider.
 */

jest.setTimeout(60_000);

const WEBHOOK_SECRET = 'whsec_test_auto_topup';
const THRESHOLD = 50_000;
const AMOUNT = 100_000;
const MINUTE = 60_000;

interface AttemptRecord {
  id: string;
  status: string;
  provider: string;
  amount_millicents: string;
  tries: number;
  charge_seq: number;
  payment_id: string | null;
  transaction_id: string | null;
  last_failure_code: string | null;
  last_failure_reason: string | null;
  next_retry_at: Date | null;
  created_at: Date;
}

/** The suite's view of one app: workspaces, chat charges, the ledger and the invariants. */
function helpers(get: () => TestApp) {
  const db = () => get().app.get(DataSource);
  const autoTopupSettings = () => get().app.get(AutoTopupSettingsService);
  const autoTopupScheduler = () => get().app.get(AutoTopupScheduler);
  return {
    autoTopupSettings,
    autoTopupScheduler,
    workspace: (balanceMillicents = THRESHOLD + 1) => get().createWorkspace({ tier: 'enterprise', balanceMillicents }),
    /** One chat request on gpt-4-turbo (1 millicent per input token, 3 per output token). */
    chat: (workspace: TestWorkspace) =>
      workspace.client.chat.completions.create({
        model: 'gpt-4-turbo',
        messages: [{ role: 'user', content: 'Count to three.' }],
        max_tokens: 20,
      }),
    /** Charges, then waits for the charges to commit and for the background top-up they started. */
    async chargeAndSettle(workspace: TestWorkspace, requests = 1) {
      await Promise.all(Array.from({ length: requests }, () => this.chat(workspace)));
      await get().settled(workspace.id);
      await autoTopupScheduler().idle();
    },
    topups: (workspace: TestWorkspace): Promise<Array<{ amount: number; description: string; idempotency_key: string }>> =>
      db().query(
        `SELECT amount_millicents::int AS amount, description, idempotency_key FROM wallet_transactions
          WHERE workspace_id = $1 AND type = 'auto_topup' ORDER BY created_at`,
        [workspace.id],
      ),
    attempts: (workspace: TestWorkspace): Promise<AttemptRecord[]> =>
      db().query('SELECT * FROM auto_topup_attempts WHERE workspace_id = $1 ORDER BY created_at', [workspace.id]),
    /** The architecture's invariants: balance is the ledger's sum; nothing stays reserved. */
    async expectConsistent(workspace: TestWorkspace) {
      const [{ sum }] = await db().query(
        'SELECT coalesce(sum(amount_millicents), 0)::bigint AS sum FROM wallet_transactions WHERE workspace_id = $1',
        [workspace.id],
      );
      const wallet = await get().app.get(WalletService).balance(workspace.id);
      expect(wallet.balanceMillicents).toBe(Number(sum));
      expect(wallet.reservedMillicents).toBe(0);
    },
    db,
  };
}

describe('auto top-up through Stripe (a fake Stripe API)', () => {
  let stripe: FakeStripe;
  let t: TestApp;
  const h = helpers(() => t);

  beforeAll(async () => {
    stripe = await startFakeStripe();
    t = await startTestApp({
      config: {
        llmSimulator: 'on',
        simulatorWordDelayMs: 0,
        stripe: { secretKey: 'sk_test_auto_topup', webhookSecret: WEBHOOK_SECRET, apiBase: stripe.url },
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await stripe?.close();
  });
  beforeEach(() => {
    stripe.setDefault({ kind: 'succeed' });
    stripe.setDelay(0);
  });

  const enable = (workspace: TestWorkspace, overrides: Record<string, unknown> = {}) =>
    h.autoTopupSettings().configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: THRESHOLD,
      amountMillicents: AMOUNT,
      customerRef: 'cus_TestCustomer1',
      paymentMethodRef: 'pm_card_visa',
      ...overrides,
    });
  const paymentsOf = (workspace: TestWorkspace) => stripe.created().filter((r) => r.params['metadata[workspace_id]'] === workspace.id);
  const sendWebhook = (payload: string, signature?: string) =>
    fetch(`${t.baseUrl}/v1/payments/stripe/webhook`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...(signature ? { 'Stripe-Signature': signature } : {}) },
      body: payload,
    });

  it('50 concurrent charges crossing the threshold buy exactly one top-up: an off-session PaymentIntent, credited once', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    // Stripe answers only once every request is done: all 50 charges settle below the
    // threshold while the payment is under way, and no response waited for it.
    const resume = stripe.pause();
    await Promise.all(Array.from({ length: 50 }, () => h.chat(workspace)));
    await t.settled(workspace.id);
    const [{ below }] = await h.db().query(
      `SELECT count(*)::int AS below FROM wallet_transactions
        WHERE workspace_id = $1 AND type = 'usage' AND balance_after_millicents < $2`,
      [workspace.id, THRESHOLD],
    );
    expect(below).toBe(50);
    expect(await h.topups(workspace)).toEqual([]);
    resume();
    await h.autoTopupScheduler().idle();
    const payments = paymentsOf(workspace);
    expect(payments).toHaveLength(1);
    const [attempt] = await h.attempts(workspace);
    expect(payments[0].params).toMatchObject({
      amount: '100', // cents
      currency: 'usd',
      customer: 'cus_TestCustomer1',
      payment_method: 'pm_card_visa',
      off_session: 'true',
      confirm: 'true',
      'metadata[attempt_id]': attempt.id,
      'metadata[charge_seq]': '1',
    });
    expect(payments[0].idempotencyKey).toBe(`auto_topup_${attempt.id}_1`);
    expect(payments[0].headers.authorization).toBe('Bearer sk_test_auto_topup');

    const [intentId] = [...stripe.paymentIntents.values()].filter((pi) => pi.metadata.attempt_id === attempt.id).map((pi) => pi.id);
    expect(await h.topups(workspace)).toEqual([
      { amount: AMOUNT, description: `Automatic top-up (Stripe payment ${intentId})`, idempotency_key: `stripe:${intentId}` },
    ]);
    expect(await h.attempts(workspace)).toEqual([
      expect.objectContaining({ status: 'succeeded', provider: 'stripe', payment_id: intentId, tries: 1, transaction_id: expect.any(String) }),
    ]);
    await h.expectConsistent(workspace);
  });

  it('a declined card credits nothing, records why, and is retried with backoff on the next card', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'decline', code: 'card_declined', declineCode: 'insufficient_funds', message: 'Your card has insufficient funds.' });

    await h.chargeAndSettle(workspace);
    expect(await h.topups(workspace)).toEqual([]);
    let [attempt] = await h.attempts(workspace);
    expect(attempt).toMatchObject({
      status: 'retry_scheduled',
      tries: 1,
      charge_seq: 2,
      last_failure_code: 'card_declined',
      last_failure_reason: 'Your card has insufficient funds. (decline code: insufficient_funds)',
    });
    const wait = new Date(attempt.next_retry_at!).getTime() - Date.now();
    expect(wait).toBeGreaterThan(14 * MINUTE);
    expect(wait).toBeLessThan(16 * MINUTE);

    // While the retry waits, further charges do not start another top-up, and nothing is due yet.
    await h.chargeAndSettle(workspace, 3);
    await h.autoTopupScheduler().runDueRetries();
    expect(paymentsOf(workspace)).toHaveLength(1);
    expect(await h.attempts(workspace)).toHaveLength(1);

    // The customer saved a new card meanwhile; the retry uses it, as a new payment (new idempotency key).
    await enable(workspace, { paymentMethodRef: 'pm_card_mastercard' });
    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    const payments = paymentsOf(workspace);
    expect(payments).toHaveLength(2);
    expect(payments[1].idempotencyKey).toBe(`auto_topup_${attempt.id}_2`);
    expect(payments[1].params.payment_method).toBe('pm_card_mastercard');
    [attempt] = await h.attempts(workspace);
    expect(attempt).toMatchObject({ status: 'succeeded', tries: 2 });
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([AMOUNT]);
    await h.expectConsistent(workspace);
  });

  it('gives up after the retry limit, waiting longer each time; the next charge starts a new attempt', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.setDefault({ kind: 'decline' });

    await h.chargeAndSettle(workspace);
    const waits: number[] = [];
    for (let retry = 1; retry < AUTO_TOPUP_MAX_TRIES; retry++) {
      const [attempt] = await h.attempts(workspace);
      expect(attempt.status).toBe('retry_scheduled');
      waits.push(new Date(attempt.next_retry_at!).getTime() - new Date(attempt.created_at).getTime());
      await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 2 * 24 * 60 * MINUTE));
    }
    const [failed] = await h.attempts(workspace);
    expect(failed).toMatchObject({ status: 'failed', tries: AUTO_TOPUP_MAX_TRIES, last_failure_code: 'card_declined', next_retry_at: null });
    expect(paymentsOf(workspace).map((r) => r.idempotencyKey)).toEqual(
      Array.from({ length: AUTO_TOPUP_MAX_TRIES }, (_, i) => `auto_topup_${failed.id}_${i + 1}`),
    );
    // 15 minutes, then 1 hour, then 4 hours after the failure (measured from the attempt's start).
    expect(waits[0]).toBeGreaterThanOrEqual(15 * MINUTE - 1_000);
    expect(waits[1]).toBeGreaterThanOrEqual(60 * MINUTE);
    expect(waits[2]).toBeGreaterThanOrEqual(240 * MINUTE);
    expect(await h.topups(workspace)).toEqual([]);

    stripe.setDefault({ kind: 'succeed' });
    await h.chargeAndSettle(workspace);
    const attempts = await h.attempts(workspace);
    expect(attempts.map((a) => a.status)).toEqual(['failed', 'succeeded']);
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([AMOUNT]);
    await h.expectConsistent(workspace);
  });

  it('a request cut off before Stripe answered is resent later with the same idempotency key', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.setDefault({ kind: 'disconnect' }); // the SDK's own retries are cut off too

    await h.chargeAndSettle(workspace);
    const [attempt] = await h.attempts(workspace);
    expect(attempt).toMatchObject({ status: 'retry_scheduled', charge_seq: 1, last_failure_code: 'connection_error' });
    expect(await h.topups(workspace)).toEqual([]);

    stripe.setDefault({ kind: 'succeed' });
    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    const keys = new Set(stripe.requests.filter((r) => r.params['metadata[attempt_id]'] === attempt.id).map((r) => r.idempotencyKey));
    expect([...keys]).toEqual([`auto_topup_${attempt.id}_1`]);
    expect((await h.attempts(workspace))[0]).toMatchObject({ status: 'succeeded', tries: 2 });
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('after a Stripe server error (whose answer Stripe replays for its key) the retry is a new payment request', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'http_error', status: 500, type: 'api_error', message: 'An unknown error occurred.' });

    await h.chargeAndSettle(workspace);
    const [attempt] = await h.attempts(workspace);
    expect(attempt).toMatchObject({ status: 'retry_scheduled', charge_seq: 2, last_failure_code: 'api_error' });
    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    expect(paymentsOf(workspace).map((r) => r.idempotencyKey)).toEqual([`auto_topup_${attempt.id}_1`, `auto_topup_${attempt.id}_2`]);
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('a payment Stripe confirms later is credited by its webhook once, however often the event is delivered', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'processing' });

    await h.chargeAndSettle(workspace);
    const [pending] = await h.attempts(workspace);
    expect(pending).toMatchObject({ status: 'processing', payment_id: expect.stringMatching(/^pi_/) });
    expect(await h.topups(workspace)).toEqual([]);

    const intent = stripe.paymentIntents.get(pending.payment_id!)!;
    Object.assign(intent, { status: 'succeeded', amount_received: intent.amount });
    const event = signedStripeEvent('payment_intent.succeeded', intent, WEBHOOK_SECRET);
    const answers = await Promise.all(Array.from({ length: 5 }, () => sendWebhook(event.payload, event.signature)));
    expect(answers.map((a) => a.status)).toEqual([200, 200, 200, 200, 200]);
    expect(await answers[0].json()).toEqual({ received: true });
    // Stripe may also deliver the same payment in another event: still the same payment intent.
    const again = signedStripeEvent('payment_intent.succeeded', intent, WEBHOOK_SECRET);
    expect((await sendWebhook(again.payload, again.signature)).status).toBe(200);

    expect(await h.topups(workspace)).toEqual([
      expect.objectContaining({ amount: AMOUNT, idempotency_key: `stripe:${intent.id}` }),
    ]);
    expect((await h.attempts(workspace))[0]).toMatchObject({ status: 'succeeded', payment_id: intent.id });
    await h.expectConsistent(workspace);
  });

  it('the synchronous confirmation and the webhook of the same payment credit it once', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    await h.chargeAndSettle(workspace);
    const [attempt] = await h.attempts(workspace);
    const intent = stripe.paymentIntents.get(attempt.payment_id!)!;

    const event = signedStripeEvent('payment_intent.succeeded', intent, WEBHOOK_SECRET);
    expect((await sendWebhook(event.payload, event.signature)).status).toBe(200);
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('refuses a webhook with a bad or missing signature with 400, and credits nothing', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'processing' });
    await h.chargeAndSettle(workspace);
    const [attempt] = await h.attempts(workspace);
    const intent = stripe.paymentIntents.get(attempt.payment_id!)!;
    Object.assign(intent, { status: 'succeeded', amount_received: intent.amount });

    const wrongSecret = signedStripeEvent('payment_intent.succeeded', intent, 'whsec_someone_else');
    const genuine = signedStripeEvent('payment_intent.succeeded', intent, WEBHOOK_SECRET);
    const tampered = genuine.payload.replace(`"amount_received":${intent.amount}`, `"amount_received":${intent.amount * 100}`);
    expect(tampered).not.toBe(genuine.payload);
    for (const [payload, signature] of [
      [wrongSecret.payload, wrongSecret.signature],
      [tampered, genuine.signature],
      [genuine.payload, undefined],
      [genuine.payload, 't=1,v1=deadbeef'],
    ] as Array<[string, string | undefined]>) {
      const answer = await sendWebhook(payload, signature);
      expect(answer.status).toBe(400);
      expect(await answer.json()).toMatchObject({ error: { type: 'bad_request', code: 'invalid_signature' } });
    }
    expect(await h.topups(workspace)).toEqual([]);
    expect((await h.attempts(workspace))[0].status).toBe('processing');

    // The genuine delivery still counts.
    expect((await sendWebhook(genuine.payload, genuine.signature)).status).toBe(200);
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('a payment that fails later (payment_intent.payment_failed) is recorded and retried as a new payment', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'processing' });
    await h.chargeAndSettle(workspace);
    const [attempt] = await h.attempts(workspace);
    const intent = stripe.paymentIntents.get(attempt.payment_id!)!;
    Object.assign(intent, {
      status: 'requires_payment_method',
      last_payment_error: { type: 'card_error', code: 'card_declined', decline_code: 'do_not_honor', message: 'Your card was declined.' },
    });

    const failed = signedStripeEvent('payment_intent.payment_failed', intent, WEBHOOK_SECRET);
    for (let delivery = 0; delivery < 2; delivery++) expect((await sendWebhook(failed.payload, failed.signature)).status).toBe(200);
    expect((await h.attempts(workspace))[0]).toMatchObject({
      status: 'retry_scheduled',
      charge_seq: 2,
      last_failure_code: 'card_declined',
      last_failure_reason: 'Your card was declined. (decline code: do_not_honor)',
    });
    expect(await h.topups(workspace)).toEqual([]);

    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    expect(paymentsOf(workspace).map((r) => r.idempotencyKey)).toEqual([`auto_topup_${attempt.id}_1`, `auto_topup_${attempt.id}_2`]);
    expect((await h.attempts(workspace))[0].status).toBe('succeeded');
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('resumes payments whose process died: resent with the same key, or looked up at Stripe when it was pending', async () => {
    // Claimed, then the process died before Stripe was called.
    const lost = await h.workspace();
    await enable(lost);
    const [{ id: lostId }] = await h.db().query(
      `INSERT INTO auto_topup_attempts (workspace_id, status, provider, amount_millicents, updated_at)
       VALUES ($1, 'processing', 'stripe', $2, now() - interval '20 minutes') RETURNING id`,
      [lost.id, AMOUNT],
    );
    // Pending at Stripe, and its webhook never came; Stripe has since settled it.
    const pending = await h.workspace();
    await enable(pending);
    stripe.script({ kind: 'processing' });
    await h.chargeAndSettle(pending);
    const [pendingAttempt] = await h.attempts(pending);
    Object.assign(stripe.paymentIntents.get(pendingAttempt.payment_id!)!, { status: 'succeeded', amount_received: 100 });
    await h.db().query(`UPDATE auto_topup_attempts SET updated_at = now() - interval '20 minutes' WHERE id = $1`, [pendingAttempt.id]);

    await h.autoTopupScheduler().runDueRetries();

    expect(paymentsOf(lost).map((r) => r.idempotencyKey)).toEqual([`auto_topup_${lostId}_1`]);
    expect(stripe.requests.filter((r) => r.method === 'GET').map((r) => r.path)).toContain(`/v1/payment_intents/${pendingAttempt.payment_id}`);
    expect(paymentsOf(pending)).toHaveLength(1); // looked up, not paid again
    for (const workspace of [lost, pending]) {
      expect((await h.attempts(workspace))[0].status).toBe('succeeded');
      expect(await h.topups(workspace)).toHaveLength(1);
      await h.expectConsistent(workspace);
    }
  });

  it('a retry that is no longer needed (balance back above the threshold) is canceled, not charged', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    stripe.script({ kind: 'decline' });
    await h.chargeAndSettle(workspace);
    await t.app.get(WalletService).credit({
      workspaceId: workspace.id,
      amountMillicents: 200_000,
      type: 'topup',
      idempotencyKey: `manual:${workspace.id}`,
    });
    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    expect((await h.attempts(workspace)).map((a) => a.status)).toEqual(['canceled']);
    expect(paymentsOf(workspace)).toHaveLength(1);
    expect(await h.topups(workspace)).toEqual([]);
    await h.expectConsistent(workspace);
  });

  it('the monthly cap stops top-ups; last month does not count', async () => {
    const workspace = await h.workspace();
    await enable(workspace, { monthlyCapMillicents: 150_000 });
    await h.chargeAndSettle(workspace);
    expect(await h.topups(workspace)).toHaveLength(1);

    // Spent down below the threshold again: a second top-up would pass the cap.
    const { balanceMillicents } = await t.app.get(WalletService).balance(workspace.id);
    await t.app.get(WalletService).credit({
      workspaceId: workspace.id,
      amountMillicents: -(balanceMillicents - THRESHOLD),
      type: 'adjustment',
      idempotencyKey: `drain:${workspace.id}`,
    });
    await h.chargeAndSettle(workspace, 3);
    expect(await h.topups(workspace)).toHaveLength(1);
    expect(await h.attempts(workspace)).toHaveLength(1);
    expect(paymentsOf(workspace)).toHaveLength(1);
    expect(await h.autoTopupSettings().summary(workspace.id)).toMatchObject({ monthToDateMillicents: AMOUNT, monthlyCapMillicents: 150_000 });

    // The first top-up moved into last month: this month has room again.
    await h.db().query(
      `UPDATE auto_topup_attempts SET created_at = date_trunc('month', now(), 'UTC') - interval '1 day' WHERE workspace_id = $1`,
      [workspace.id],
    );
    await h.chargeAndSettle(workspace);
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([AMOUNT, AMOUNT]);
    await h.expectConsistent(workspace);
  });

  it('does nothing above the threshold, or when disabled', async () => {
    const rich = await h.workspace(1_000_000);
    await enable(rich);
    await h.chargeAndSettle(rich, 3);
    const disabled = await h.workspace();
    await enable(disabled);
    const settings = await h.autoTopupSettings().configure({ workspaceId: disabled.id, enabled: false });
    expect(settings).toMatchObject({ enabled: false, thresholdMillicents: THRESHOLD, amountMillicents: AMOUNT }); // kept for later
    await h.chargeAndSettle(disabled, 3);
    expect(await h.attempts(rich)).toEqual([]);
    expect(await h.attempts(disabled)).toEqual([]);
    expect(paymentsOf(rich)).toEqual([]);
    expect(paymentsOf(disabled)).toEqual([]);
  });

  it('refuses settings that could never run, naming the field', async () => {
    const workspace = await h.workspace();
    const refused = (overrides: Record<string, unknown>) => enable(workspace, overrides).catch((error: unknown) => error);
    expect(await refused({ paymentMethodRef: undefined })).toMatchObject({ type: 'bad_request', param: 'stripe_payment_method' });
    expect(await refused({ amountMillicents: 10_000 })).toMatchObject({ type: 'bad_request', param: 'amount' }); // under Stripe's $0.50
    expect(await refused({ thresholdMillicents: 0 })).toMatchObject({ type: 'bad_request', param: 'threshold' });
    expect(await refused({ monthlyCapMillicents: 99_000 })).toMatchObject({ type: 'bad_request', param: 'monthly_cap' });
    expect(await refused({ amountMillicents: -5 })).toMatchObject({ type: 'bad_request', param: 'amount' });
    expect(await refused({ customerRef: 'acct_123' })).toMatchObject({ type: 'bad_request', param: 'stripe_customer' });
    expect(
      await h
        .autoTopupSettings()
        .configure({ workspaceId: '00000000-0000-4000-8000-000000000000', enabled: false })
        .catch((error: unknown) => error),
    ).toMatchObject({ type: 'not_found' });
    expect(await h.attempts(workspace)).toEqual([]);
  });

  it('is configured with the operator CLI, which prints one JSON object', async () => {
    const workspace = await h.workspace();
    const env = { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error', STRIPE_SECRET_KEY: 'sk_test_cli', STRIPE_API_BASE: stripe.url };
    const args = ['wallet', 'auto-topup', '--workspace', workspace.id, '--enabled', 'true', '--threshold', '50000', '--amount', '100000'];
    const result = await runCli([...args, '--monthly-cap', '500000', '--stripe-customer', 'cus_Cli1', '--stripe-payment-method', 'pm_card_visa'], env);
    expect(result).toMatchObject({ code: 0, stderr: '' });
    expect(JSON.parse(result.stdout)).toEqual({
      workspace_id: workspace.id,
      enabled: true,
      threshold_millicents: 50_000,
      amount_millicents: 100_000,
      monthly_cap_millicents: 500_000,
      stripe_customer_id: 'cus_Cli1',
      stripe_payment_method_id: 'pm_card_visa',
      payment_provider: 'stripe',
    });
    expect(result.stdout.trim().split('\n')).toHaveLength(1);

    const wrong = await runCli(['wallet', 'auto-topup', '--workspace', workspace.id, '--enabled', 'maybe'], env);
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toContain('--enabled must be true or false (got "maybe")');

    // The running app charges by what the CLI saved.
    await h.chargeAndSettle(workspace);
    expect(paymentsOf(workspace).map((r) => r.params.customer)).toEqual(['cus_Cli1']);
    expect(await h.topups(workspace)).toHaveLength(1);
  });
});

describe('auto top-up without Stripe (simulated payments)', () => {
  let t: TestApp;
  const h = helpers(() => t);

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
  });
  afterAll(() => t?.close());

  const enable = (workspace: TestWorkspace, overrides: Record<string, unknown> = {}) =>
    h.autoTopupSettings().configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: THRESHOLD,
      amountMillicents: AMOUNT,
      ...overrides,
    });

  it('tops up without a card, labelled as simulated, once for 50 concurrent charges', async () => {
    expect(h.autoTopupSettings().providerName).toBe('simulated');
    const workspace = await h.workspace();
    await enable(workspace);
    await h.chargeAndSettle(workspace, 50);
    const rows = await h.topups(workspace);
    expect(rows).toEqual([
      { amount: AMOUNT, description: 'Automatic top-up (simulated payment)', idempotency_key: expect.stringMatching(/^simulated:simpay_/) },
    ]);
    expect((await h.attempts(workspace)).map((a) => [a.status, a.provider])).toEqual([['succeeded', 'simulated']]);
    await h.expectConsistent(workspace);
  });

  it('is started by the wallet itself once a settlement commits, with no chat request behind it', async () => {
    const workspace = await h.workspace();
    await enable(workspace);
    const wallet = t.app.get(WalletService);
    const hold = await wallet.hold(workspace.id, 'req_direct_settlement', 10_000, MINUTE);
    await wallet.settle(hold!, { workspaceId: workspace.id, costMicros: microsOf(5_000), description: 'A charge outside chat' });
    await h.autoTopupScheduler().idle();
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([AMOUNT]);
    await h.expectConsistent(workspace);
  });

  it('a charge reported twice (by the wallet and by a caller) buys one top-up', async () => {
    const workspace = await h.workspace();
    // (A top-up too small to lift the balance back over the threshold is refused now: the
    // threshold must be below the amount.)
    await enable(workspace);
    const wallet = t.app.get(WalletService);
    const hold = await wallet.hold(workspace.id, 'req_reported_twice', 40_000, MINUTE);
    await wallet.settle(hold!, { workspaceId: workspace.id, costMicros: microsOf(40_000), description: 'A large charge' });
    h.autoTopupScheduler().afterCharge(workspace.id);
    await h.autoTopupScheduler().idle();
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([AMOUNT]);
    expect(await h.attempts(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('charges whole cents: the amount is rounded and exactly what was paid is credited', async () => {
    const workspace = await h.workspace();
    await enable(workspace, { amountMillicents: 100_600 });
    await h.chargeAndSettle(workspace);
    expect((await h.topups(workspace)).map((row) => row.amount)).toEqual([101_000]);
    await h.expectConsistent(workspace);
  });

  it("declines with Stripe's declining test card, credits nothing, and retries", async () => {
    const workspace = await h.workspace();
    await enable(workspace, { paymentMethodRef: 'pm_card_chargeDeclined' });
    await h.chargeAndSettle(workspace);
    expect(await h.topups(workspace)).toEqual([]);
    expect((await h.attempts(workspace))[0]).toMatchObject({ status: 'retry_scheduled', last_failure_code: 'card_declined' });

    await enable(workspace, { paymentMethodRef: 'pm_card_visa' });
    await h.autoTopupScheduler().runDueRetries(new Date(Date.now() + 16 * MINUTE));
    expect((await h.attempts(workspace))[0]).toMatchObject({ status: 'succeeded', tries: 2 });
    expect(await h.topups(workspace)).toHaveLength(1);
    await h.expectConsistent(workspace);
  });

  it('shows the settings beside the spec fields of GET /v1/wallet once configured', async () => {
    const plain = await h.workspace(5_000);
    expect(await plain.client.get('/wallet')).toEqual({ balanceMillicents: 5_000, reservedMillicents: 0, availableMillicents: 5_000 });
    const workspace = await h.workspace(123_456);
    await enable(workspace);
    expect(await workspace.client.get('/wallet')).toEqual({
      balanceMillicents: 123_456,
      reservedMillicents: 0,
      availableMillicents: 123_456,
      autoTopup: {
        enabled: true,
        thresholdMillicents: expect.any(Number),
        amountMillicents: expect.any(Number),
        // None set: the operator's default cap ($500).
        monthlyCapMillicents: 50_000_000,
        monthlyCapIsDefault: true,
        monthToDateMillicents: 0,
        paymentMethodSaved: expect.any(Boolean),
      },
    });
  });
});
