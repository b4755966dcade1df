import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { APIError } from 'openai';
import { DataSource } from 'typeorm';
import { AutoTopupAttempts } from '../src/wallet/auto-topup-attempts';
import { AutoTopupScheduler } from '../src/wallet/auto-topup-scheduler';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { WalletService } from '../src/wallet/wallet.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeStripe, startFakeStripe } from './fakes/fake-stripe';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { runCliInProcess } from './support/processes';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * Auto top-up within the operator's bounds (issue 29): settings above a bound are refused
 * with the reason, at the field (the service the CLI calls, the CLI, the dashboard form);
 * stored settings above the bounds are clamped when a top-up is claimed; and a burst of chat
 * requests crossing the threshold again and again charges the card (a fake Stripe API, the
 * real SDK) at most AUTO_TOPUP_MAX_PER_HOUR times.
 */

jest.setTimeout(90_000);

/** A model priced so that one short answer costs about $0.30 (20 output tokens at 1,500 millicents). */
function pricedCatalog(): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'catalog-')), 'models.json');
  writeFileSync(
    file,
    JSON.stringify({
      models: [{ id: 'pricey', provider: 'openai', context_length: 8_000, max_output_tokens: 1_000, input_price: 0, output_price: 1_500_000_000 }],
    }),
  );
  return file;
}

const DOLLAR = 100_000;

describe('auto top-up bounds (fake Stripe)', () => {
  let stripe: FakeStripe;
  let t: TestApp;
  const autoTopupSettings = () => t.app.get(AutoTopupSettingsService);
  const autoTopupScheduler = () => t.app.get(AutoTopupScheduler);
  const autoTopupAttempts = () => t.app.get(AutoTopupAttempts);
  const db = () => t.app.get(DataSource);
  const paymentsOf = (workspaceId: string) => stripe.created().filter((r) => r.params['metadata[workspace_id]'] === workspaceId);
  const card = { customerRef: 'cus_Bounds', paymentMethodRef: 'pm_card_visa' };

  beforeAll(async () => {
    stripe = await startFakeStripe();
    t = await startTestApp({
      config: {
        llmSimulator: 'on',
        simulatorWordDelayMs: 0,
        modelCatalogFile: pricedCatalog(),
        stripe: { secretKey: 'sk_test_bounds', webhookSecret: 'whsec_bounds', apiBase: stripe.url },
      },
    });
  });
  afterAll(async () => {
    await t?.close();
    await stripe?.close();
  });

  it('runs with the documented defaults', () => {
    expect(t.config.payments).toMatchObject({
      topupMaxMillicents: 10_000 * DOLLAR,
      autoTopupDefaultMonthlyCapMillicents: 500 * DOLLAR,
      autoTopupMaxMonthlyCapMillicents: 50_000 * DOLLAR,
      autoTopupMaxPerHour: 3,
    });
  });

  describe('settings above a bound are refused, naming the field', () => {
    let workspace: TestWorkspace;
    beforeAll(async () => {
      workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 100 * DOLLAR });
    });
    const configure = (fields: Record<string, unknown>) =>
      autoTopupSettings()
        .configure({ workspaceId: workspace.id, enabled: true, thresholdMillicents: 5 * DOLLAR, amountMillicents: 20 * DOLLAR, ...card, ...fields })
        .then(() => null)
        .catch((error: unknown) => error as { status: number; param?: string; code?: string; message: string });

    it('by the service (what the CLI calls): a 400 with the field and the reason', async () => {
      // The settings: $999,999 with a threshold above it and no cap.
      expect(await configure({ amountMillicents: 999_999 * DOLLAR, thresholdMillicents: 1_000_000 * DOLLAR, monthlyCapMillicents: null })).toMatchObject({
        status: 400,
        param: 'amount',
        code: 'auto_topup_out_of_bounds',
        message: 'The amount ($999,999.00) is above the largest top-up, $10,000.00.',
      });
      expect(await configure({ amountMillicents: 10_000 * DOLLAR + 1_000, monthlyCapMillicents: 20_000 * DOLLAR })).toMatchObject({ param: 'amount' });
      expect(await configure({ thresholdMillicents: 20 * DOLLAR })).toMatchObject({
        status: 400,
        param: 'threshold',
        message: expect.stringContaining('The threshold ($20.00) must be below the amount ($20.00)'),
      });
      expect(await configure({ monthlyCapMillicents: 50_000 * DOLLAR + 1_000 })).toMatchObject({
        status: 400,
        param: 'monthly_cap',
        message: 'The monthly cap ($50,000.01) is above the largest monthly cap, $50,000.00.',
      });
      expect(await configure({ amountMillicents: 600 * DOLLAR })).toMatchObject({
        status: 400,
        param: 'monthly_cap',
        message: expect.stringContaining('The amount ($600.00) is above the default monthly cap ($500.00): set a monthly cap of at least the amount'),
      });
      // Bounds hold for settings saved switched off too.
      expect(await configure({ enabled: false, amountMillicents: 20_000 * DOLLAR })).toMatchObject({ param: 'amount' });
      expect(await autoTopupSettings().summary(workspace.id)).toBeNull();

      // At the bounds, accepted: $10,000 a top-up with a cap that allows it; with no cap, the default.
      expect(await configure({ amountMillicents: 10_000 * DOLLAR, thresholdMillicents: 9_999 * DOLLAR, monthlyCapMillicents: 50_000 * DOLLAR })).toBeNull();
      expect(await configure({ monthlyCapMillicents: null })).toBeNull();
      expect(await autoTopupSettings().summary(workspace.id)).toMatchObject({
        amountMillicents: 20 * DOLLAR,
        monthlyCapMillicents: 500 * DOLLAR,
        monthlyCapIsDefault: true,
      });
    });

    it('by the CLI: exit 1 with the reason, nothing saved', async () => {
      const args = ['wallet', 'auto-topup', '--workspace', workspace.id, '--enabled', 'true', '--threshold', '500000', '--amount', String(999_999 * DOLLAR)];
      const result = await runCliInProcess(args, { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error', STRIPE_SECRET_KEY: 'sk_test_bounds', STRIPE_API_BASE: stripe.url });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain('The amount ($999,999.00) is above the largest top-up, $10,000.00.');
      expect(result.stdout).toBe('');
      expect((await autoTopupSettings().summary(workspace.id))?.amountMillicents).toBe(20 * DOLLAR);
    });
  });

  describe('in the dashboard', () => {
    let owner: SignedUpPerson;
    let billing: string;
    beforeAll(async () => {
      owner = await signUp(t.baseUrl, { email: 'bounds-owner@example.com', name: 'Bo Bounds' });
      billing = `/w/${owner.workspaceId}/billing`;
      await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'enterprise');
      // The card Stripe Checkout would have saved.
      await autoTopupSettings().savePaymentMethod(owner.workspaceId, card);
    });

    it('shows the bounds and the default monthly cap in the form', async () => {
      const page = await owner.client.get(billing);
      expect(page.status).toBe(200);
      expect(textOf(page.html)).toContain('Each top-up adds at most $10,000.00; at most 3 top-ups an hour, whatever the settings.');
      expect(page.html).toContain('placeholder="500.00 (default)"');
      expect(textOf(page.html)).toContain('at most $50,000.00. Empty: the default cap, $500.00.');
    });

    it('refuses each bound at its field, and saves nothing', async () => {
      const refusedAt = async (form: Record<string, string>, field: string, reason: string) => {
        await owner.client.get(billing);
        const response = await owner.client.post(`${billing}/auto-topup`, { enabled: 'on', ...form });
        expect(response.status).toBe(400);
        // The summary says what is saved (off), not what the refused form asked for.
        expect(response.html).toContain('id="auto-topup-summary">Off.');
        const error = response.html.match(new RegExp(`<small id="auto-topup-${field}-error">([^<]*)</small>`));
        expect(error && textOf(error[1])).toContain(reason);
      };
      // The settings, typed into the form.
      await refusedAt({ threshold: '1000000', amount: '999999', monthly_cap: '' }, 'amount', 'above the largest top-up, $10,000.00');
      await refusedAt({ threshold: '50', amount: '20', monthly_cap: '' }, 'threshold', 'The threshold ($50.00) must be below the amount ($20.00)');
      await refusedAt({ threshold: '5', amount: '20', monthly_cap: '60000' }, 'cap', 'above the largest monthly cap, $50,000.00');
      await refusedAt({ threshold: '5', amount: '600', monthly_cap: '' }, 'cap', 'above the default monthly cap ($500.00)');
      expect(await autoTopupSettings().summary(owner.workspaceId)).toMatchObject({ enabled: false, amountMillicents: 0 });
    });

    it('saves settings within the bounds; an empty cap is the default, said so', async () => {
      await owner.client.get(billing);
      const saved = await owner.client.post(`${billing}/auto-topup`, { enabled: 'on', threshold: '5', amount: '20', monthly_cap: '' });
      expect(saved.status).toBe(303);
      const page = await owner.client.follow(saved);
      expect(textOf(page.html).replace(/ ([,.;])/g, '$1')).toContain(
        'the saved card is charged $20.00 (monthly cap: $500.00 (the default); $0.00 so far this month).',
      );
      expect(page.html).toContain('name="monthly_cap" inputmode="decimal" value=""');
      expect(await autoTopupSettings().summary(owner.workspaceId)).toMatchObject({ enabled: true, monthlyCapMillicents: 500 * DOLLAR, monthlyCapIsDefault: true });
    });
  });

  const chat = (workspace: TestWorkspace) =>
    workspace.client.chat.completions.create({ model: 'pricey', messages: [{ role: 'user', content: 'Count to twenty.' }], max_tokens: 20 });

  it('clamps stored settings above the bounds when it charges: the three requests of the issue charge $10,000 once, not $999,999 three times', async () => {
    const workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 50 * DOLLAR });
    // Saved before the bounds existed: $999,999 a top-up, a threshold above it, a $1,000,000 cap.
    await db().query(
      `INSERT INTO auto_topup_settings (workspace_id, enabled, threshold_millicents, amount_millicents, monthly_cap_millicents, payment_customer_ref, payment_method_ref)
       VALUES ($1, true, $2, $3, $4, $5, $6)`,
      [workspace.id, 1_000_000 * DOLLAR, 999_999 * DOLLAR, 1_000_000 * DOLLAR, card.customerRef, card.paymentMethodRef],
    );
    for (let i = 0; i < 3; i++) {
      await chat(workspace);
      await t.settled(workspace.id);
      await autoTopupScheduler().idle();
    }
    const payments = paymentsOf(workspace.id);
    expect(payments.map((p) => Number(p.params.amount))).toEqual([1_000_000]); // cents: $10,000
    const [{ credited }] = await db().query(
      `SELECT coalesce(sum(amount_millicents), 0)::bigint AS credited FROM wallet_transactions WHERE workspace_id = $1 AND type = 'auto_topup'`,
      [workspace.id],
    );
    expect(Number(credited)).toBe(10_000 * DOLLAR);
  });

  it('a burst of 100 chat requests across the threshold charges the card at most AUTO_TOPUP_MAX_PER_HOUR (3) times', async () => {
    const THRESHOLD = 4 * DOLLAR;
    const AMOUNT = Math.round(4.5 * DOLLAR);
    const workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: AMOUNT });
    // A cap far above what the burst could buy: only the hourly limit stops it.
    await autoTopupSettings().configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: THRESHOLD,
      amountMillicents: AMOUNT,
      monthlyCapMillicents: 1_000 * DOLLAR,
      ...card,
    });

    // About $0.30 an answer: each top-up lasts ~15 answers, so 100 would cross the threshold
    // six times or more (the starting balance and three top-ups buy ~60 answers).
    let next = 0;
    const outcomes = { answered: 0, refused: 0 };
    const worker = async () => {
      while (next < 100) {
        next++;
        try {
          await chat(workspace);
          outcomes.answered++;
        } catch (error) {
          if (!(error instanceof APIError) || error.status !== 402) throw error;
          outcomes.refused++;
        }
      }
    };
    await Promise.all(Array.from({ length: 4 }, worker));
    // The last charges commit after their answers, and may start a top-up then.
    await t.settled(workspace.id);
    await autoTopupScheduler().idle();

    expect(outcomes.answered + outcomes.refused).toBe(100);
    // Without the hourly limit this burst made 7 payment intents.
    expect(paymentsOf(workspace.id).map((p) => Number(p.params.amount))).toEqual([450, 450, 450]); // cents
    const attempts = await db().query(`SELECT status, amount_millicents::bigint AS amount FROM auto_topup_attempts WHERE workspace_id = $1`, [workspace.id]);
    expect(attempts.map((a: { status: string; amount: string }) => [a.status, Number(a.amount)])).toEqual([
      ['succeeded', AMOUNT],
      ['succeeded', AMOUNT],
      ['succeeded', AMOUNT],
    ]);
    // A fourth was due (the balance is below the threshold, auto top-up is on, the month's cap
    // allows more, no attempt is open) and the hourly limit refused it.
    const wallet = await t.app.get(WalletService).balance(workspace.id);
    expect(wallet.balanceMillicents).toBeLessThan(THRESHOLD);
    expect(await autoTopupSettings().summary(workspace.id)).toMatchObject({ enabled: true, monthToDateMillicents: 3 * AMOUNT });
    expect(outcomes.refused).toBeGreaterThan(0);
    expect(await autoTopupAttempts().topUpIfNeeded(workspace.id)).toBeNull();
    expect(paymentsOf(workspace.id).length).toBe(3);

    // The ledger still sums to the balance.
    const [{ sum }] = await db().query('SELECT coalesce(sum(amount_millicents), 0)::bigint AS sum FROM wallet_transactions WHERE workspace_id = $1', [workspace.id]);
    expect(wallet.balanceMillicents).toBe(Number(sum));
  });
});
