import type { Browser } from 'playwright-core';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AutoTopupAttempts } from '../src/wallet/auto-topup-attempts';
import { AutoTopupScheduler } from '../src/wallet/auto-topup-scheduler';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { TopupCheckoutService } from '../src/wallet/topup-checkout.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeStripe, startFakeStripe } from './fakes/fake-stripe';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { parseCsv } from './support/csv';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * Billing in the dashboard: balance, the ledger (filters, pages, CSV), manual top-ups
 * through the payment provider's checkout (the simulated provider here; Stripe Checkout,
 * faked at the HTTP level, in the browser suite below), auto top-up settings and attempts,
 * and who may change what.
 */

jest.setTimeout(60_000);

/** The ledger rows of a workspace, newest first, as the database has them. */
async function ledgerOf(t: TestApp, workspaceId: string) {
  await t.settled(workspaceId);
  return (await t.app.get(DataSource).query(
    `SELECT id, type, amount_millicents::bigint AS amount, balance_after_millicents::bigint AS balance_after, description, created_at
       FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC`,
    [workspaceId],
  )) as { id: string; type: string; amount: string; balance_after: string; description: string; created_at: Date }[];
}

describe('dashboard: billing (simulated payments)', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let member: SignedUpPerson;
  let billing: string;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'bill@example.com', name: 'Bill Owner' });
    billing = `/w/${owner.workspaceId}/billing`;
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'enterprise');
    const [{ id: ownerId }] = (await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', ['bill@example.com'])) as { id: string }[];
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'mia@example.com', 'member', ownerId);
    member = await signUp(t.baseUrl, { email: 'mia@example.com', name: 'Mia Member', invitation: invitation.token });
  });

  afterAll(async () => {
    await t?.close();
  });

  it('starts empty, saying what to do next', async () => {
    const page = await owner.client.get(billing);
    expect(page.status).toBe(200);
    const text = textOf(page.html);
    expect(page.html).toContain('id="billing-balance">$0.00<');
    expect(text).toContain('No transactions yet.');
    expect(text).toContain('Add credit, above');
    expect(page.html).toContain('id="no-attempts"');
    expect(page.html).toContain('id="simulated-payments"');
    expect(page.html).toContain('aria-current="page">Billing</a>');
  });

  it('adds credit through the simulated checkout: one topup row, the balance, and the return page says so', async () => {
    await owner.client.get(billing);
    const posted = await owner.client.post(`${billing}/topup`, { preset: '25', custom_amount: '' });
    expect(posted.status).toBe(303);
    expect(posted.location).toMatch(new RegExp(`^${billing}/topup/return\\?session_id=simcs_[0-9a-f]{24}$`));
    const back = await owner.client.follow(posted);
    expect(back.status).toBe(200);
    expect(back.html).toContain('data-state="credited"');
    expect(textOf(back.html)).toContain('Payment received: $25.00 was added');
    expect(textOf(back.html)).toContain('The balance is now $25.00');

    // A typed amount wins over the preset buttons.
    const typed = await owner.client.post(`${billing}/topup`, { preset: '25', custom_amount: '12.34' });
    expect(typed.status).toBe(303);

    const rows = await ledgerOf(t, owner.workspaceId);
    expect(rows.map((row) => [row.type, Number(row.amount), row.description])).toEqual([
      ['topup', 1_234_000, 'Top-up (simulated payment)'],
      ['topup', 2_500_000, 'Top-up (simulated payment)'],
    ]);
    expect(await t.app.get(WalletService).balance(owner.workspaceId)).toEqual({
      balanceMillicents: 3_734_000,
      reservedMillicents: 0,
      availableMillicents: 3_734_000,
    });
    const page = await owner.client.get(billing);
    expect(page.html).toContain('id="billing-balance">$37.34<');
    expect(textOf(page.html)).toContain('topup +$12.34 $37.34 Top-up (simulated payment)');

    // The same completion reported again (a webhook replay) credits nothing more.
    const sessionId = new URL(posted.location!, t.baseUrl).searchParams.get('session_id')!;
    await t.app.get(TopupCheckoutService).apply('simulated', {
      sessionId,
      workspaceId: owner.workspaceId,
      mode: 'payment',
      paymentId: sessionId,
      amountCents: 2500,
    });
    expect(await ledgerOf(t, owner.workspaceId)).toHaveLength(2);
  });

  it('says a canceled checkout charged nothing, and never shows another workspace\'s payment as credited', async () => {
    const canceled = await owner.client.get(`${billing}?checkout=canceled`);
    expect(canceled.html).toContain('id="checkout-canceled"');
    const other = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 0 });
    const theirs = await t.app.get(TopupCheckoutService).startTopup(other.id, 500_000, { successUrl: 'http://x/{CHECKOUT_SESSION_ID}', cancelUrl: 'http://x' });
    const page = await owner.client.get(`${billing}/topup/return?session_id=${theirs.sessionId}`);
    expect(page.status).toBe(200);
    expect(page.html).toContain('data-state="pending"');
    expect(page.html).not.toContain('$5.00');
    const broken = await owner.client.get(`${billing}/topup/return?session_id=${encodeURIComponent('<script>')}`);
    expect(textOf(broken.html)).toContain('This link names no payment.');
  });

  it('refuses amounts that are not dollars or are out of bounds, saying why, and charges nothing', async () => {
    const before = (await ledgerOf(t, owner.workspaceId)).length;
    const cases: [string, string][] = [
      ['abc', 'Give an amount in dollars'],
      ['10.001', 'Give an amount in dollars'],
      ['0.50', 'between $1.00 and $10000.00'],
      ['10000.01', 'between $1.00 and $10000.00'],
    ];
    for (const [amount, message] of cases) {
      await owner.client.get(billing);
      const response = await owner.client.post(`${billing}/topup`, { custom_amount: amount });
      expect({ amount, status: response.status }).toEqual({ amount, status: 400 });
      expect(response.html).toContain('<small id="topup-amount-error">');
      expect(textOf(response.html)).toContain(message);
      expect(response.html).toContain(`value="${amount}"`);
    }
    expect(await ledgerOf(t, owner.workspaceId)).toHaveLength(before);
  });

  it('lets members read billing but not change it: no forms, and every POST is a 403', async () => {
    const page = await member.client.get(billing);
    expect(page.status).toBe(200);
    expect(page.html).toContain('id="read-only-note"');
    expect(page.html).not.toContain('id="topup-form"');
    expect(page.html).not.toContain('id="auto-topup-form"');
    expect(page.html).not.toContain('id="card-form"');
    expect(page.html).toContain('id="billing-balance">$37.34<');
    const before = await ledgerOf(t, owner.workspaceId);
    for (const [path, form] of [
      ['topup', { preset: '25' }],
      ['auto-topup', { enabled: 'on', threshold: '5', amount: '20' }],
      ['card', {}],
    ] as const) {
      const response = await member.client.post(`${billing}/${path}`, form);
      expect({ path, status: response.status }).toEqual({ path, status: 403 });
    }
    expect(await ledgerOf(t, owner.workspaceId)).toEqual(before);
    expect(await t.app.get(AutoTopupSettingsService).summary(owner.workspaceId)).toBeNull();
  });

  it('filters the ledger by type and days, pages through it, and downloads it as CSV with exact amounts and quoting', async () => {
    const workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 0 });
    const [{ id: ownerId }] = (await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', ['bill@example.com'])) as { id: string }[];
    await t.app.get(DataSource).query(`INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, [workspace.id, ownerId]);
    const wallet = t.app.get(WalletService);
    const tricky = ['Refund, with a comma', 'He said "thanks"', '=HYPERLINK("http://evil")', 'two\nlines'];
    for (let i = 0; i < 30; i++) {
      await wallet.credit({
        workspaceId: workspace.id,
        amountMillicents: 1_000 + i,
        type: i % 3 === 0 ? 'adjustment' : 'topup',
        description: tricky[i % tricky.length] + ` #${i}`,
        idempotencyKey: `ledger-test-${i}`,
      });
    }
    // Five rows on an earlier day.
    const oldIds = (await ledgerOf(t, workspace.id)).slice(-5).map((row) => row.id);
    await t.app.get(DataSource).query(`UPDATE wallet_transactions SET created_at = '2026-01-10T12:00:00Z' WHERE id = ANY($1)`, [oldIds]);
    const all = await ledgerOf(t, workspace.id);
    const path = `/w/${workspace.id}/billing`;

    const first = await owner.client.get(path);
    const firstIds = [...first.html.matchAll(/<tr id="tx-([0-9a-f-]{36})">/g)].map((m) => m[1]);
    expect(firstIds).toEqual(all.slice(0, 25).map((row) => row.id));
    const next = first.html.match(/id="ledger-next"|href="([^"]+)" id="ledger-next"/);
    expect(next).not.toBeNull();
    const nextHref = first.html.match(/<a href="([^"]+)" id="ledger-next"/)![1].replace(/&amp;/g, '&');
    const second = await owner.client.get(nextHref);
    expect([...second.html.matchAll(/<tr id="tx-([0-9a-f-]{36})">/g)].map((m) => m[1])).toEqual(all.slice(25).map((row) => row.id));
    expect(second.html).not.toContain('id="ledger-next"');
    expect(second.html).toContain('id="ledger-first"');

    const adjustments = await owner.client.get(`${path}?type=adjustment`);
    const adjustmentIds = [...adjustments.html.matchAll(/<tr id="tx-([0-9a-f-]{36})">/g)].map((m) => m[1]);
    expect(adjustmentIds).toEqual(all.filter((row) => row.type === 'adjustment').map((row) => row.id));
    expect(adjustments.html).toContain('<option value="adjustment" selected>');

    const day = await owner.client.get(`${path}?from=2026-01-10&to=2026-01-10`);
    expect([...day.html.matchAll(/<tr id="tx-([0-9a-f-]{36})">/g)].map((m) => m[1]).sort()).toEqual([...oldIds].sort());
    const none = await owner.client.get(`${path}?type=refund`);
    expect(textOf(none.html)).toContain('No transaction matches these filters.');

    const bad = await owner.client.get(`${path}?type=gift&from=2026-02-30`);
    expect(bad.status).toBe(400);
    expect(bad.html).toContain('<small id="ledger-type-error">');
    expect(bad.html).toContain('<small id="ledger-from-error">');
    const badCursor = await owner.client.get(`${path}?after=${owner.workspaceId}`);
    expect(badCursor.status).toBe(400);
    expect(badCursor.html).toContain('id="ledger-cursor-error"');

    const csv = await owner.client.get(`${path}/ledger.csv`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-type')).toBe('text/csv; charset=utf-8');
    expect(csv.headers.get('content-disposition')).toBe(`attachment; filename="ledger-${workspace.id}.csv"`);
    const rows = parseCsv(csv.html);
    expect(rows[0]).toEqual(['id', 'created_at', 'type', 'amount_millicents', 'balance_after_millicents', 'description']);
    expect(rows.slice(1)).toEqual(
      all.map((row) => [
        row.id,
        row.created_at.toISOString(),
        row.type,
        String(row.amount),
        String(row.balance_after),
        row.description.startsWith('=') ? `'${row.description}` : row.description,
      ]),
    );
    expect(csv.html).toContain('"Refund, with a comma #0"');
    expect(csv.html).toContain('"He said ""thanks"" #1"');
    expect(csv.html).toContain(`"'=HYPERLINK(""http://evil"") #2"`);
    const filteredCsv = parseCsv((await owner.client.get(`${path}/ledger.csv?type=adjustment&from=2026-01-10&to=2026-01-10`)).html);
    expect(filteredCsv.slice(1).map((row) => row[0])).toEqual(all.filter((row) => oldIds.includes(row.id) && row.type === 'adjustment').map((row) => row.id));
  });

  it('configures auto top-up in the page; spending below the threshold with the OpenAI SDK adds an auto_topup row, listed as an attempt', async () => {
    await owner.client.get(billing);
    // Turning it on without sensible numbers says which field is wrong.
    const refused = await owner.client.post(`${billing}/auto-topup`, { enabled: 'on', threshold: '0', amount: '20' });
    expect(refused.status).toBe(400);
    expect(textOf(refused.html)).toContain('threshold is required and must be positive');
    const notDollars = await owner.client.post(`${billing}/auto-topup`, { enabled: 'on', threshold: 'five', amount: '20', monthly_cap: 'lots' });
    expect(notDollars.status).toBe(400);
    expect(notDollars.html).toContain('<small id="auto-topup-threshold-error">');
    expect(notDollars.html).toContain('<small id="auto-topup-cap-error">');

    const card = await owner.client.post(`${billing}/card`);
    expect(card.status).toBe(303);
    const saved = await owner.client.post(`${billing}/auto-topup`, { enabled: 'on', threshold: '40', amount: '50', monthly_cap: '100' });
    expect(saved.status).toBe(303);
    const page = await owner.client.follow(saved);
    expect(textOf(page.html)).toContain('Auto top-up is on.');
    expect(textOf(page.html).replace(/ ([,.;])/g, '$1')).toContain(
      'On: when a request leaves the balance below $40.00, the saved card is charged $50.00 (monthly cap: $100.00; $0.00 so far this month).',
    );
    expect(page.html).toContain('id="auto-topup-threshold" name="threshold" inputmode="decimal" required value="40.00"');
    expect(page.html).toContain('id="card-status">Card: saved.');
    expect(await t.app.get(AutoTopupSettingsService).summary(owner.workspaceId)).toMatchObject({
      enabled: true,
      thresholdMillicents: 4_000_000,
      amountMillicents: 5_000_000,
      monthlyCapMillicents: 10_000_000,
      paymentMethodSaved: true,
    });

    // The balance is $37.34, below $40: the next charge starts a top-up.
    const created = await t.app.get(ApiKeysService).create(owner.workspaceId, 'billing test');
    const client = openAiClient(t.baseUrl, created.apiKey);
    await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10 });
    // The top-up starts once the charge commits, a moment after the answer.
    await t.settled(owner.workspaceId);
    await t.app.get(AutoTopupScheduler).idle();

    const autoRows = (await ledgerOf(t, owner.workspaceId)).filter((row) => row.type === 'auto_topup');
    expect(autoRows.map((row) => [Number(row.amount), row.description])).toEqual([[5_000_000, 'Automatic top-up (simulated payment)']]);
    const after = await owner.client.get(billing);
    const attempts = after.html.match(/<table id="attempts-table"[\s\S]*?<\/table>/)![0];
    expect(textOf(attempts)).toMatch(/Started Amount Outcome Tries Details \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC \$50\.00 succeeded 1$/);
    expect(textOf(after.html)).toContain('auto_topup +$50.00');
  });

  it('lists a failed auto top-up with its reason and next try', async () => {
    const workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000 });
    const [{ id: ownerId }] = (await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', ['bill@example.com'])) as { id: string }[];
    await t.app.get(DataSource).query(`INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, [workspace.id, ownerId]);
    const autoTopup = t.app.get(AutoTopupSettingsService);
    // The CLI can save Stripe's declining test card; the simulated provider declines it as Stripe would.
    await autoTopup.configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: 500_000,
      amountMillicents: 1_000_000,
      customerRef: 'cus_test',
      paymentMethodRef: 'pm_card_chargeDeclined',
    });
    expect(await t.app.get(AutoTopupAttempts).topUpIfNeeded(workspace.id)).toMatchObject({ status: 'retry_scheduled' });
    const page = await owner.client.get(`/w/${workspace.id}/billing`);
    const attempts = textOf(page.html.match(/<table id="attempts-table"[\s\S]*?<\/table>/)![0]);
    expect(attempts).toMatch(/\$10\.00 retry scheduled 1 Your card was declined\. \(simulated\) Next try: \d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC\.$/);
    expect((await ledgerOf(t, workspace.id)).filter((row) => row.type === 'auto_topup')).toEqual([]);
  });
});

const WEBHOOK_SECRET = 'whsec_dashboard_billing';

describeWithBrowser('dashboard: billing through Stripe Checkout (fake Stripe, in Chromium)', () => {
  jest.setTimeout(90_000);
  let stripe: FakeStripe;
  let t: TestApp;
  let browser: Browser;
  let owner: SignedUpPerson;
  let billing: string;

  beforeAll(async () => {
    stripe = await startFakeStripe();
    [t, browser] = await Promise.all([
      startTestApp({
        config: {
          llmSimulator: 'on',
          simulatorWordDelayMs: 0,
          stripe: { secretKey: 'sk_test_dashboard', webhookSecret: WEBHOOK_SECRET, apiBase: stripe.url },
        },
      }),
      launchChromium(),
    ]);
    stripe.deliverWebhooksTo(`${t.baseUrl}/v1/payments/stripe/webhook`, WEBHOOK_SECRET);
    owner = await signUp(t.baseUrl, { email: 'stripe-owner@example.com', name: 'Sam Stripe' });
    billing = `/w/${owner.workspaceId}/billing`;
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'enterprise');
  });

  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await stripe?.close();
  });

  /** Problems on our pages (the fake Stripe page has no favicon, and says so). */
  const ours = (problems: PageProblem[]) => problems.filter((problem) => !problem.location?.startsWith(stripe.url));

  /** A browser page signed in as the owner (the session cookie of the HTTP sign-up). */
  async function signedInPage() {
    const context = await newContext(browser, t.baseUrl);
    await context.addCookies([{ name: 'acs.sid', value: owner.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    return { context, page, problems: collectConsoleErrors(page) };
  }

  it('tops up through Stripe Checkout: pending on return until the webhook, then one topup row and the balance', async () => {
    const { context, page, problems } = await signedInPage();
    await page.goto(billing);
    await expectAccessible(page, 'billing, empty, Stripe');
    await page.getByLabel('Or another amount, in dollars').fill('42.50');
    await page.getByRole('button', { name: 'Continue to payment' }).click();
    await page.waitForURL(`${stripe.url}/checkout/**`);
    expect(await page.textContent('h1')).toBe('Fake Stripe Checkout');

    const [session] = [...stripe.checkoutSessions.values()];
    expect(session.params).toMatchObject({
      mode: 'payment',
      'line_items[0][price_data][unit_amount]': '4250',
      'line_items[0][price_data][currency]': 'usd',
      'metadata[workspace_id]': owner.workspaceId,
      client_reference_id: owner.workspaceId,
      success_url: `${t.baseUrl}${billing}/topup/return?session_id={CHECKOUT_SESSION_ID}`,
    });

    // The webhook is late: the return page says the payment is pending, and credits nothing yet.
    stripe.holdWebhooks();
    await page.getByRole('button', { name: 'Pay $42.50' }).click();
    await page.waitForURL(`**${billing}/topup/return?session_id=${session.id}`);
    await page.waitForSelector('#topup-status[data-state="pending"]');
    await expectAccessible(page, 'top-up return, pending');
    expect((await ledgerOf(t, owner.workspaceId)).filter((row) => row.type === 'topup')).toEqual([]);

    // The webhook arrives: the page (polling with htmx) shows the credit by itself.
    expect(await stripe.releaseWebhooks()).toEqual([200]);
    await page.waitForSelector('#topup-status[data-state="credited"]', { timeout: 10_000 });
    expect(await page.textContent('#topup-status')).toContain('Payment received: $42.50 was added');
    await expectAccessible(page, 'top-up return, credited');

    // Stripe delivers the event again: still one row.
    expect(await stripe.redeliver(session.id)).toBe(200);
    const topups = (await ledgerOf(t, owner.workspaceId)).filter((row) => row.type === 'topup');
    expect(topups.map((row) => [Number(row.amount), row.description])).toEqual([
      [4_250_000, `Top-up (stripe payment ${String(session.payment_intent)})`],
    ]);

    await page.goto(billing);
    expect(await page.textContent('#billing-balance')).toBe('$42.50');
    expect(await page.textContent(`#tx-${topups[0].id}`)).toContain('+$42.50');
    expect(ours(problems)).toEqual([]);
    await context.close();
  });

  it('saves a card through Checkout in setup mode, turns auto top-up on, and a charge below the threshold buys an auto_topup with that card', async () => {
    const { context, page, problems } = await signedInPage();
    await page.goto(billing);
    expect(await page.textContent('#card-status')).toContain('none saved yet');
    // Stripe needs a saved card before auto top-up can be on: the page says so, and saves nothing.
    await page.getByLabel('Enabled').check();
    await page.getByLabel('Threshold, in dollars').fill('50');
    await page.getByLabel('Amount, in dollars', { exact: true }).fill('20');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Save auto top-up' }).click()]);
    expect(await page.textContent('#auto-topup .flash.error')).toContain('Save a card first');
    expect(await t.app.get(AutoTopupSettingsService).summary(owner.workspaceId)).toBeNull();
    await expectAccessible(page, 'billing, auto top-up refused');
    // Chromium logs the page's 400 status, which was the point.
    expect(ours(problems).map((problem) => problem.text)).toEqual(['Failed to load resource: the server responded with a status of 400 (Bad Request)']);
    problems.length = 0;
    await page.getByRole('button', { name: 'Save a card' }).click();
    await page.waitForURL(`${stripe.url}/checkout/**`);
    const setup = [...stripe.checkoutSessions.values()].find((session) => session.mode === 'setup')!;
    expect(setup.params).toMatchObject({ mode: 'setup', currency: 'usd', 'metadata[workspace_id]': owner.workspaceId });
    expect(setup.params.customer).toMatch(/^cus_/);
    await page.getByRole('button', { name: 'Save card' }).click();
    await page.waitForURL(`**${billing}#auto-topup-heading`);
    expect(await page.textContent('#flash-area')).toContain('Your card is saved for auto top-up.');
    expect(await page.textContent('#card-status')).toContain('Card: saved.');

    await page.getByLabel('Enabled').check();
    await page.getByLabel('Threshold, in dollars').fill('50');
    await page.getByLabel('Amount, in dollars', { exact: true }).fill('60');
    await page.getByLabel('Monthly cap, in dollars').fill('');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Save auto top-up' }).click()]);
    expect(await page.textContent('#auto-topup-summary')).toContain('monthly cap: $500.00 (the default)');

    // $42.50 is below $50: the next charge, made with the official OpenAI SDK, starts a top-up.
    const key = await t.app.get(ApiKeysService).create(owner.workspaceId, 'auto top-up test');
    await openAiClient(t.baseUrl, key.apiKey).chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 10,
    });
    await t.settled(owner.workspaceId);
    await t.app.get(AutoTopupScheduler).idle();

    const [charge] = stripe.created();
    expect(charge.params).toMatchObject({ amount: '6000', customer: String(setup.customer), payment_method: 'pm_card_visa', off_session: 'true' });
    const autoRows = (await ledgerOf(t, owner.workspaceId)).filter((row) => row.type === 'auto_topup');
    expect(autoRows.map((row) => Number(row.amount))).toEqual([6_000_000]);

    await page.goto(billing);
    expect(await page.textContent('#attempts-table tbody')).toMatch(/\$60\.00\s+succeeded\s+1/);
    await expectAccessible(page, 'billing with attempts and ledger');
    expect(ours(problems)).toEqual([]);
    await context.close();
  });
});
