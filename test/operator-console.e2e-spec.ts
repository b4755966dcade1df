import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { formatMillicents } from '../src/dashboard/format';
import { MailService } from '../src/mail/mail.service';
import { OperatorConsoleService } from '../src/operator/operator-console.service';
import { OperatorsService } from '../src/operator/operators.service';
import { defaultWidgetSettings } from '../src/widget/widget-settings';
import { WidgetsService } from '../src/widget/widgets.service';
import { describeResult, runCliInProcess } from './support/processes';
import { DashboardClient, signIn, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, testConfig, TestApp } from './support/test-app';

const OPERATOR_EMAIL = 'oona@example.com';
/** Listed in OPERATOR_EMAILS too: signs up in a test and verifies later. */
const LISTED_EMAIL = 'uma@example.com';
/** Listed, and never signs up. */
const ABSENT_EMAIL = 'absent@example.com';

/**
 * The operator console through HTTP, as a browser uses it, and the API through the official
 * SDK: only operators find it (everyone else gets 404, signed in or not, whatever they send);
 * an operator's tier change, credit and suspension reach the workspace's API key, each with
 * its audit entry; and the CLI's `operator grant` makes an operator.
 */
describe('operator console', () => {
  let t: TestApp;
  let operator: SignedUpPerson;
  let customer: SignedUpPerson;
  let customerKey: string;

  beforeAll(async () => {
    t = await startTestApp({
      config: {
        llmSimulator: 'on',
        simulatorWordDelayMs: 0,
        dashboard: { ...testConfig().dashboard, operatorEmails: [OPERATOR_EMAIL, LISTED_EMAIL, ABSENT_EMAIL] },
      },
    });
    operator = await signUp(t.baseUrl, { email: OPERATOR_EMAIL, name: 'Oona Operator' });
    await verify(operator);
    customer = await signUp(t.baseUrl, { email: 'carl@example.com', name: 'Carl Customer' });
    customerKey = await createKey(customer);
    // Records 5 and 40 days old, for the figures: days before yesterday are read once and kept
    // (no request settles into them any more), so they are written before any page is seen.
    await db().query(
      `INSERT INTO usage_records (workspace_id, request_id, model, total_tokens, total_cost_millicents, charged_millicents, status, error_code, created_at)
       SELECT $1, 'old-' || g, 'gpt-4o', 100, 1234.5, 1235, CASE WHEN g = 1 THEN 'error' ELSE 'success' END,
              CASE WHEN g = 1 THEN 'upstream_timeout' END, now() - make_interval(days => CASE WHEN g <= 2 THEN 5 ELSE 40 END)
         FROM generate_series(1, 3) AS g`,
      [customer.workspaceId],
    );
  });

  afterAll(async () => {
    await t?.close();
  });

  const db = () => t.app.get(DataSource);

  /** Follows the verification link the person was sent (no SMTP: the mail log keeps it). */
  async function verify(person: SignedUpPerson): Promise<void> {
    const link = t.app.get(MailService).logged.filter((m) => m.to === person.email && /verify-email/.test(m.link ?? '')).at(-1)!.link!;
    expect((await person.client.get(new URL(link).pathname)).status).toBe(303);
  }

  /** A fresh session of the operator, by a sign-in link (the password's sign-in is throttled at 10 in 15 minutes). */
  async function operatorSession(): Promise<DashboardClient> {
    const [{ id }] = (await db().query('SELECT id FROM users WHERE email = $1', [OPERATOR_EMAIL])) as { id: string }[];
    const token = await t.app.get(AccountsService).issueToken(id, 'sign_in');
    const client = new DashboardClient(t.baseUrl);
    await client.get(`/sign-in/${token}`);
    expect((await client.post(`/sign-in/${token}`)).status).toBe(303);
    return client;
  }

  /** A form posted as JSON, the CSRF token in its header, the answer read as JSON. */
  async function postJson(client: DashboardClient, path: string, body: unknown): Promise<{ status: number; body: { error?: { param?: string; type?: string } } }> {
    const response = await fetch(`${t.baseUrl}${path}`, {
      method: 'POST',
      headers: {
        'content-type': 'application/json',
        accept: 'application/json',
        'x-csrf-token': client.csrfToken ?? '',
        cookie: [...client.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
      },
      body: JSON.stringify(body),
      redirect: 'manual',
    });
    const text = await response.text();
    return { status: response.status, body: text.startsWith('{') ? JSON.parse(text) : {} };
  }

  async function createKey(person: SignedUpPerson): Promise<string> {
    const path = `/w/${person.workspaceId}/settings/keys`;
    await person.client.get(path);
    const created = await person.client.post(path, { name: 'ci', expires: 'never' });
    expect(created.status).toBe(201);
    return created.html.match(/<code id="new-key" class="secret">(sk-[A-Za-z0-9_-]+)<\/code>/)![1];
  }

  function pagesOf(workspaceId: string): string[] {
    return ['/operator', '/operator?q=carl&page=2', `/operator/workspaces/${workspaceId}`, '/operator/figures', '/operator/audit'];
  }

  function actionsOf(workspaceId: string): [string, Record<string, string>][] {
    return [
      [`/operator/workspaces/${workspaceId}/tier`, { tier: 'enterprise' }],
      [`/operator/workspaces/${workspaceId}/balance`, { direction: 'credit', amount: '5', reason: 'x', nonce: crypto.randomUUID() }],
      [`/operator/workspaces/${workspaceId}/suspend`, {}],
      [`/operator/workspaces/${workspaceId}/resume`, {}],
    ];
  }

  async function auditCount(): Promise<number> {
    const [row] = (await db().query('SELECT count(*)::int AS n FROM operator_audit_log')) as { n: number }[];
    return row.n;
  }

  it('answers 404 on every operator page and action to anyone but an operator, signed in or not', async () => {
    const anonymous = new DashboardClient(t.baseUrl);
    await anonymous.get('/login');
    const before = await auditCount();
    for (const client of [customer.client, anonymous]) {
      for (const path of pagesOf(customer.workspaceId)) {
        const page = await client.get(path);
        expect({ path, status: page.status }).toEqual({ path, status: 404 });
        expect(page.html).not.toContain('Operator console');
      }
      await client.get(`/w/${customer.workspaceId}`);
      for (const [path, form] of actionsOf(customer.workspaceId)) {
        // With the person's own valid CSRF token, and with none: 404 both ways, never 403.
        expect({ path, status: (await client.post(path, form)).status }).toEqual({ path, status: 404 });
        expect({ path, status: (await client.post(path, form, { csrf: false })).status }).toEqual({ path, status: 404 });
      }
    }
    expect(await auditCount()).toBe(before);
    const [tier] = (await db().query('SELECT tier, status FROM workspaces WHERE id = $1', [customer.workspaceId])) as { tier: string; status: string }[];
    expect(tier).toEqual({ tier: 'free', status: 'active' });
    // The nav entry is for operators only.
    expect((await customer.client.get(`/w/${customer.workspaceId}`)).html).not.toContain('/operator"');
    expect((await operator.client.get(`/w/${operator.workspaceId}`)).html).toContain('/operator"');
  });

  it('shows every operator page to an operator', async () => {
    for (const path of pagesOf(customer.workspaceId)) {
      const page = await operator.client.get(path);
      expect({ path, status: page.status }).toEqual({ path, status: 200 });
    }
    // To an operator, the forms check CSRF as every dashboard form does.
    for (const [path, form] of actionsOf(customer.workspaceId)) {
      expect({ path, status: (await operator.client.post(path, form, { csrf: false })).status }).toEqual({ path, status: 403 });
      expect({ path, status: (await operator.client.post(path, form, { csrf: 'not-the-token' })).status }).toEqual({ path, status: 403 });
    }
    expect(await auditCount()).toBe(0);
    const list = await operator.client.get('/operator?q=Carl');
    expect(textOf(list.html)).toContain(customer.workspaceId);
    expect(textOf(list.html)).not.toContain(operator.workspaceId);
    expect((await operator.client.get('/operator/workspaces/00000000-0000-4000-8000-000000000000')).status).toBe(404);
  });

  it('changes a tier: the workspace’s GET /v1/limits shows it, and the audit log has it', async () => {
    const client = openAiClient(t.baseUrl, customerKey);
    expect(await client.get('/limits')).toMatchObject({ data: { tier: 'free' } });
    const path = `/operator/workspaces/${customer.workspaceId}`;
    await operator.client.get(path);
    const changed = await operator.client.post(`${path}/tier`, { tier: 'enterprise', rpm: '1234', reason: 'signed the contract' });
    expect(changed.status).toBe(303);
    expect(textOf((await operator.client.follow(changed)).html)).toContain('The workspace is now on the enterprise tier, custom rate 1234 requests a minute.');
    expect(await client.get('/limits')).toMatchObject({ data: { tier: 'enterprise', rateLimitRpm: 1234 } });
    const [entry] = (await db().query(
      `SELECT operator_email, action, before, after, reason FROM operator_audit_log WHERE workspace_id = $1 AND action = 'set_tier'`,
      [customer.workspaceId],
    )) as unknown[];
    expect(entry).toEqual({
      operator_email: OPERATOR_EMAIL,
      action: 'set_tier',
      before: { tier: 'free', custom_rate_limit_rpm: null },
      after: { tier: 'enterprise', custom_rate_limit_rpm: 1234 },
      reason: 'signed the contract',
    });
  });

  it('credits $5 with a reason once, however often the form is sent; refuses without a reason', async () => {
    const path = `/operator/workspaces/${customer.workspaceId}`;
    const page = await operator.client.get(path);
    const nonce = page.html.match(/name="nonce" value="([0-9a-f-]{36})"/)![1];
    const balance = async () =>
      Number(((await db().query('SELECT balance_millicents FROM wallets WHERE workspace_id = $1', [customer.workspaceId])) as { balance_millicents: string }[])[0].balance_millicents);
    const start = await balance();

    const refused = await operator.client.post(`${path}/balance`, { direction: 'credit', amount: '5', reason: '  ', nonce });
    expect(textOf((await operator.client.follow(refused)).html)).toContain('Write the reason for this change');
    expect(await balance()).toBe(start);

    const form = { direction: 'credit', amount: '5', reason: 'goodwill after the outage', nonce };
    const [first, second] = await Promise.all([operator.client.post(`${path}/balance`, form), operator.client.post(`${path}/balance`, form)]);
    expect([first.status, second.status]).toEqual([303, 303]);
    const third = await operator.client.post(`${path}/balance`, form);
    expect(textOf((await operator.client.follow(third)).html)).toContain('This form had already been submitted');
    expect(await balance()).toBe(start + 500_000);

    const ledger = (await db().query(
      `SELECT type, amount_millicents::int AS amount, description FROM wallet_transactions WHERE workspace_id = $1 AND type = 'adjustment'`,
      [customer.workspaceId],
    )) as unknown[];
    expect(ledger).toEqual([{ type: 'adjustment', amount: 500_000, description: `Operator credit by ${OPERATOR_EMAIL}: goodwill after the outage` }]);
    const audit = (await db().query(
      `SELECT operator_email, before, after - 'transaction_id' AS after, reason FROM operator_audit_log WHERE workspace_id = $1 AND action = 'adjust_balance'`,
      [customer.workspaceId],
    )) as unknown[];
    expect(audit).toEqual([
      {
        operator_email: OPERATOR_EMAIL,
        before: { balance_millicents: start },
        after: { balance_millicents: start + 500_000, amount_millicents: 500_000 },
        reason: 'goodwill after the outage',
      },
    ]);
    // The workspace's own billing page shows the row; the console's audit page lists the entry.
    expect(textOf((await customer.client.get(`/w/${customer.workspaceId}/billing`)).html)).toContain('goodwill after the outage');
    expect(textOf((await operator.client.get('/operator/audit')).html)).toContain('goodwill after the outage');
  });

  it('credits once for twenty submits of one form at once: one ledger row, one audit entry, one "Credited"', async () => {
    const path = `/operator/workspaces/${customer.workspaceId}`;
    // Twenty browsers of the operator, each with its own session (its own flash), all sending the same page's form.
    const clients = await Promise.all(Array.from({ length: 20 }, () => operatorSession()));
    const nonce = (await clients[0].get(path)).html.match(/name="nonce" value="([0-9a-f-]{36})"/)![1];
    for (const client of clients.slice(1)) await client.get(path);
    const form = { direction: 'credit', amount: '2.50', reason: 'twenty clicks', nonce };
    const answers = await Promise.all(clients.map((client) => client.post(`${path}/balance`, form)));
    expect(answers.map((answer) => answer.status)).toEqual(answers.map(() => 303));
    const said = await Promise.all(
      answers.map(async (answer, i) => {
        const text = textOf((await clients[i].follow(answer)).html);
        if (text.includes('Credited $2.50')) return 'credited';
        return text.includes('This form had already been submitted: $2.50 was credited once.') ? 'already done' : text.slice(0, 300);
      }),
    );
    expect(said.filter((answer) => answer === 'credited')).toHaveLength(1);
    expect(said.filter((answer) => answer !== 'credited')).toEqual(Array(19).fill('already done'));

    const ledger = (await db().query(
      `SELECT amount_millicents::int AS amount, balance_after_millicents::int AS after FROM wallet_transactions WHERE workspace_id = $1 AND description LIKE '%twenty clicks'`,
      [customer.workspaceId],
    )) as { amount: number; after: number }[];
    expect(ledger.map((row) => row.amount)).toEqual([250_000]);
    const audit = (await db().query(
      `SELECT before, after - 'transaction_id' AS after FROM operator_audit_log WHERE workspace_id = $1 AND action = 'adjust_balance' AND reason = 'twenty clicks'`,
      [customer.workspaceId],
    )) as unknown[];
    expect(audit).toEqual([
      { before: { balance_millicents: ledger[0].after - 250_000 }, after: { balance_millicents: ledger[0].after, amount_millicents: 250_000 } },
    ]);
  });

  it('writes no audit entry and answers "already done" when the same form committed between its check and its transaction', async () => {
    // The race of twenty submits, made certain: another submit of the nonce commits after this one found none.
    const console = t.app.get(OperatorConsoleService);
    const actor = { id: null, email: OPERATOR_EMAIL };
    const nonce = crypto.randomUUID();
    const transaction = db().transaction.bind(db());
    const spy = jest.spyOn(db(), 'transaction').mockImplementationOnce((async (work: never) => {
      expect((await console.adjustBalance(actor, customer.workspaceId, 100_000, 'in between', nonce)).duplicate).toBe(false);
      return transaction(work);
    }) as never);
    try {
      expect((await console.adjustBalance(actor, customer.workspaceId, 100_000, 'in between', nonce)).duplicate).toBe(true);
    } finally {
      spy.mockRestore();
    }
    const [{ ledger, audit }] = (await db().query(
      `SELECT (SELECT count(*)::int FROM wallet_transactions WHERE description LIKE '%in between') AS ledger,
              (SELECT count(*)::int FROM operator_audit_log WHERE reason = 'in between') AS audit`,
    )) as { ledger: number; audit: number }[];
    expect({ ledger, audit }).toEqual({ ledger: 1, audit: 1 });
  });

  it('refuses with 400 naming the field a form posted as JSON with a field that is not text, and an id that is not one', async () => {
    const client = await operatorSession();
    const path = `/operator/workspaces/${customer.workspaceId}`;
    await client.get(path);
    const before = await auditCount();
    const cases: [string, Record<string, unknown>, string][] = [
      [`${path}/tier`, { tier: 'pro', reason: 5 }, 'reason'],
      [`${path}/tier`, { tier: ['pro', 'team'] }, 'tier'],
      [`${path}/tier`, { tier: 'pro', rpm: 10 }, 'rpm'],
      [`${path}/balance`, { direction: 'credit', amount: 5, reason: 'x', nonce: crypto.randomUUID() }, 'amount'],
      [`${path}/balance`, { direction: 'credit', amount: '5', reason: { text: 'x' }, nonce: crypto.randomUUID() }, 'reason'],
      [`${path}/balance`, { direction: 'credit', amount: '5', reason: 'x', nonce: 7 }, 'nonce'],
      [`${path}/balance`, { direction: true, amount: '5', reason: 'x', nonce: crypto.randomUUID() }, 'direction'],
      [`${path}/suspend`, { reason: ['x', 'y'] }, 'reason'],
      [`${path}/suspend`, { reason: 42 }, 'reason'],
      [`${path}/resume`, { reason: false }, 'reason'],
    ];
    for (const [url, body, param] of cases) {
      const answer = await postJson(client, url, body);
      expect({ url, body, status: answer.status, type: answer.body.error?.type, param: answer.body.error?.param }).toEqual({
        url,
        body,
        status: 400,
        type: 'bad_request',
        param,
      });
    }
    // A workspace id with a NUL (or anything not a workspace id) never reaches the database.
    for (const action of ['balance', 'tier', 'suspend', 'resume']) {
      const answer = await postJson(client, `/operator/workspaces/%00/${action}`, { direction: 'credit', amount: '5', reason: 'x', nonce: crypto.randomUUID(), tier: 'pro' });
      expect({ action, status: answer.status, param: answer.body.error?.param }).toEqual({ action, status: 400, param: 'id' });
    }
    const page = await client.get('/operator/workspaces/%00', { headers: { accept: 'application/json' } });
    expect(page.status).toBe(400);
    expect(await auditCount()).toBe(before);
    const [workspace] = (await db().query('SELECT status FROM workspaces WHERE id = $1', [customer.workspaceId])) as { status: string }[];
    expect(workspace.status).toBe('active');
  });

  it('keeps the console from an account listed in OPERATOR_EMAILS until its address is verified, and says so at start', async () => {
    const listed = await signUp(t.baseUrl, { email: LISTED_EMAIL, name: 'Uma Unverified' });
    const before = await auditCount();
    const warning = await t.app.get(OperatorsService).unverifiedOperatorsWarning();
    expect(warning).toContain(`${LISTED_EMAIL} (not verified)`);
    expect(warning).toContain(`${ABSENT_EMAIL} (no account)`);
    expect(warning).not.toContain(OPERATOR_EMAIL);

    for (const path of pagesOf(listed.workspaceId)) {
      expect({ path, status: (await listed.client.get(path)).status }).toEqual({ path, status: 404 });
    }
    await listed.client.get(`/w/${listed.workspaceId}`);
    for (const [path, form] of actionsOf(listed.workspaceId)) {
      expect({ path, status: (await listed.client.post(path, form)).status }).toEqual({ path, status: 404 });
    }
    expect((await listed.client.get(`/w/${listed.workspaceId}`)).html).not.toContain('/operator"');
    expect(await auditCount()).toBe(before);

    // Marked as `cli operator grant` marks (the CLI refuses an unverified account; a flag set otherwise): still 404.
    await db().query('UPDATE users SET is_operator = true WHERE email = $1', [LISTED_EMAIL]);
    expect((await listed.client.get('/operator')).status).toBe(404);
    await db().query('UPDATE users SET is_operator = false WHERE email = $1', [LISTED_EMAIL]);

    await verify(listed);
    expect((await listed.client.get('/operator')).status).toBe(200);
    expect(await t.app.get(OperatorsService).unverifiedOperatorsWarning()).not.toContain(LISTED_EMAIL);
  });

  it('suspends a workspace: its key gets 403 workspace_suspended, its pages a banner; resuming undoes both', async () => {
    const client = openAiClient(t.baseUrl, customerKey);
    const chat = () => client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'hello' }] });
    await expect(chat()).resolves.toMatchObject({ object: 'chat.completion' });
    // The workspace's chat widget, on a shop's site.
    const site = 'https://shop.example';
    const assistant = await t.app.get(AssistantsService).create(customer.workspaceId, { name: 'Shop helper', model: 'gpt-4o-mini' });
    const widget = await t.app
      .get(WidgetsService)
      .save(customer.workspaceId, assistant.id, { ...defaultWidgetSettings('Shop helper'), enabled: true, allowedOrigins: [site] });
    const widgetCall = async (what: string, body: unknown) => {
      const response = await fetch(`${t.baseUrl}/widget/v1/${widget.publicId}/${what}`, {
        method: 'POST',
        headers: { origin: site, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      return { status: response.status, text: await response.text() };
    };
    const visitor = (JSON.parse((await widgetCall('visitors', {})).text) as { visitor: string }).visitor;
    const path = `/operator/workspaces/${customer.workspaceId}`;
    await operator.client.get(path);
    expect((await operator.client.post(`${path}/suspend`, { reason: 'chargeback' })).status).toBe(303);
    const widgetRefused = await widgetCall('messages', { visitor, message: 'hello' });
    expect(widgetRefused.status).toBe(403);
    expect(JSON.parse(widgetRefused.text)).toMatchObject({ error: { code: 'workspace_suspended' } });

    const refused = await chat().catch((error: unknown) => error);
    expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect(refused).toMatchObject({ status: 403, code: 'workspace_suspended' });
    expect((refused as Error).message).toContain('suspended');
    await expect(client.models.list()).rejects.toMatchObject({ status: 403, code: 'workspace_suspended' });
    for (const page of [`/w/${customer.workspaceId}`, `/w/${customer.workspaceId}/usage`, `/w/${customer.workspaceId}/settings/keys`]) {
      expect((await customer.client.get(page)).html).toContain('id="suspended-banner"');
    }
    expect((await operator.client.get(`/w/${operator.workspaceId}`)).html).not.toContain('id="suspended-banner"');

    expect((await operator.client.post(`${path}/resume`, { reason: 'paid' })).status).toBe(303);
    await expect(chat()).resolves.toMatchObject({ object: 'chat.completion' });
    expect((await widgetCall('messages', { visitor, message: 'hello again' })).status).toBe(200);
    expect((await customer.client.get(`/w/${customer.workspaceId}`)).html).not.toContain('id="suspended-banner"');
    const entries = (await db().query(
      `SELECT action, before, after, reason FROM operator_audit_log WHERE workspace_id = $1 AND action IN ('suspend', 'resume') ORDER BY at`,
      [customer.workspaceId],
    )) as unknown[];
    expect(entries).toEqual([
      { action: 'suspend', before: { status: 'active' }, after: { status: 'suspended' }, reason: 'chargeback' },
      { action: 'resume', before: { status: 'suspended' }, after: { status: 'active' }, reason: 'paid' },
    ]);
  });

  it('adds up the figures of every workspace from the daily totals, closed days (kept) and today (read each time) alike', async () => {
    await t.settled(customer.workspaceId);
    const expected = async (days: number) =>
      (
        (await db().query(
          `SELECT sum(requests)::int AS requests, sum(cost_millicents)::text AS cost FROM usage_daily_totals
            WHERE day > (now() AT TIME ZONE 'UTC')::date - $1::int`,
          [days],
        )) as { requests: number; cost: string }[]
      )[0];
    for (const days of [7, 30, 90]) {
      const page = await operator.client.get(`/operator/figures?days=${days}`);
      const want = await expected(days);
      expect(page.html).toContain(`id="figures-requests">${want.requests.toLocaleString('en-US')}<`);
      expect(page.html).toContain(`id="figures-cost">${formatMillicents(want.cost)}<`);
    }
    const month = await operator.client.get('/operator/figures');
    expect(textOf(month.html)).toMatch(/upstream_timeout 1\b/);
    expect(textOf(month.html)).toContain('Carl');
  });

  it('never shows a workspace’s conversation contents to an operator', async () => {
    const secret = 'the launch code is swordfish';
    await openAiClient(t.baseUrl, customerKey).chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: secret }] });
    await t.settled(customer.workspaceId);
    for (const path of pagesOf(customer.workspaceId)) {
      expect((await operator.client.get(path)).html).not.toContain('swordfish');
    }
  });

  it('makes an operator with the CLI’s `operator grant`, and takes it back with `operator revoke`', async () => {
    const person = await signUp(t.baseUrl, { email: 'gina@example.com', name: 'Gina Granted' });
    expect((await person.client.get('/operator')).status).toBe(404);
    const env = { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error' };
    // Whoever signed up first with an address has not shown it is theirs until they verify it.
    const unverified = await runCliInProcess(['operator', 'grant', '--email', 'gina@example.com'], env);
    expect({ code: unverified.code, stderr: unverified.stderr }).toEqual({
      code: 1,
      stderr: 'The account gina@example.com has not verified its email address: it follows the link it was sent (or asks for a new one), then grant again.\n',
    });
    expect((await person.client.get('/operator')).status).toBe(404);
    await verify(person);
    const granted = await runCliInProcess(['operator', 'grant', '--email', 'Gina@Example.com'], env);
    expect({ code: granted.code, stdout: JSON.parse(granted.stdout) as unknown }).toEqual({
      code: 0,
      stdout: { email: 'gina@example.com', is_operator: true, also_in_operator_emails: false },
    });
    const client = await signIn(t.baseUrl, { email: person.email, password: person.password });
    expect((await client.get('/operator')).status).toBe(200);

    const revoked = await runCliInProcess(['operator', 'revoke', '--email', 'gina@example.com'], env);
    expect(revoked.code).toBe(0);
    expect((await client.get('/operator')).status).toBe(404);

    const unknown = await runCliInProcess(['operator', 'grant', '--email', 'nobody@example.com'], env);
    expect({ code: unknown.code, stderr: unknown.stderr }).toEqual({
      code: 1,
      stderr: 'No account with the email nobody@example.com: the person signs up (or is invited) first.\n',
    });
    const usage = await runCliInProcess(['operator', 'grant'], env);
    expect(usage.code).toBe(2);
    expect(usage.stderr).toContain('--email is required');
    const entries = (await db().query(
      `SELECT operator_email, action FROM operator_audit_log WHERE action LIKE 'operator_%' ORDER BY at`,
    )) as unknown[];
    expect(entries).toEqual([
      { operator_email: 'cli', action: 'operator_grant' },
      { operator_email: 'cli', action: 'operator_revoke' },
    ]);
    if (granted.code !== 0) throw new Error(describeResult(['operator', 'grant'], granted));
  });
});
