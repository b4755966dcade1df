import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { formatMillicents } from '../src/dashboard/format';
import { UsageStatsService } from '../src/usage/usage-stats.service';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { WalletService } from '../src/wallet/wallet.service';
import { BROWSER_ACCEPT, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * The overview of a workspace against the database: money, this month's use, limits, the
 * low-balance banner, and the first-steps card until its three steps are done.
 */
describe('dashboard: overview', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let overviewPath: string;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'ada@example.com', name: 'Ada Admin' });
    overviewPath = `/w/${owner.workspaceId}`;
  });

  afterAll(async () => {
    await t?.close();
  });

  const db = () => t.app.get(DataSource);

  /** The overview's text per figure, by the ids of its stat values. */
  async function overview(client = owner.client, path = overviewPath) {
    const page = await client.get(path);
    expect(page.status).toBe(200);
    const stat = (id: string) => {
      const match = page.html.match(new RegExp(`<span class="stat-value" id="stat-${id}">([^<]*)</span>`));
      if (!match) throw new Error(`No stat ${id}`);
      return match[1];
    };
    const section = (id: string) => page.html.match(new RegExp(`<li[^>]* id="${id}">[\\s\\S]*?</li>`))?.[0] ?? '';
    return {
      html: page.html,
      balance: stat('balance'),
      reserved: stat('reserved'),
      available: stat('available'),
      monthSpend: stat('month-spend'),
      monthRequests: stat('month-requests'),
      rateLimit: stat('rate-limit'),
      assistants: stat('assistants'),
      banner: page.html.match(/<div class="banner warning" role="status" id="low-balance">[\s\S]*?<\/div>/)?.[0] ?? null,
      firstSteps: page.html.includes('id="first-steps"'),
      stepDone: (step: 'key' | 'call' | 'assistant') => /^<li class="done"/.test(section(`step-${step}`)),
      step: (step: 'key' | 'call' | 'assistant') => section(`step-${step}`),
    };
  }

  /** The wallet as stored, and the month's usage as the records say (not the daily totals the page reads). */
  async function fromDatabase(workspaceId = owner.workspaceId) {
    await t.settled(workspaceId);
    const [wallet] = (await db().query('SELECT balance_millicents, reserved_millicents FROM wallets WHERE workspace_id = $1', [
      workspaceId,
    ])) as { balance_millicents: string; reserved_millicents: string }[];
    const [usage] = (await db().query(
      `SELECT count(*)::int AS requests, coalesce(sum(total_cost_millicents), 0)::text AS cost
         FROM usage_records WHERE workspace_id = $1 AND created_at >= date_trunc('month', now(), 'UTC')`,
      [workspaceId],
    )) as { requests: number; cost: string }[];
    return {
      balance: Number(wallet.balance_millicents),
      reserved: Number(wallet.reserved_millicents),
      requests: usage.requests,
      cost: usage.cost,
    };
  }

  it('starts empty: no money (with the banner saying where credit comes from), the tier limits, three steps to do', async () => {
    const page = await overview();
    expect(page.html).toContain('<h1>Ada Admin&#39;s workspace</h1>');
    expect([page.balance, page.reserved, page.available]).toEqual(['$0.00', '$0.00', '$0.00']);
    expect([page.monthSpend, page.monthRequests]).toEqual(['$0.00', '0']);
    // Sign-up's default tier: free, 5 requests a minute and one assistant.
    expect(page.rateLimit).toBe('5 per minute');
    expect(page.assistants).toBe('0 of 1');
    expect(page.banner).not.toBeNull();
    expect(textOf(page.banner!)).toContain('Low balance: $0.00 available, below $1.00.');
    expect(textOf(page.banner!)).toContain('Add credit on the billing page, or turn on auto top-up there.');
    expect(page.banner!).toContain(`href="${overviewPath}/billing"`);
    expect(page.firstSteps).toBe(true);
    expect([page.stepDone('key'), page.stepDone('call'), page.stepDone('assistant')]).toEqual([false, false, false]);
    expect(page.step('call')).toContain(`new OpenAI({ baseURL: '${t.baseUrl}/v1', apiKey: process.env.ACS_API_KEY })`);
    expect(page.step('assistant')).toContain(`href="${overviewPath}/assistants/new"`);
    expect(page.step('key')).toContain(`href="${overviewPath}/settings/keys"`);
  });

  it('remembers the workspace for `/`', async () => {
    const home = await owner.client.get('/');
    expect(home.status).toBe(303);
    expect(home.location).toBe(overviewPath);
  });

  it('shows the balance after a top-up, and the banner goes once $1.00 is available', async () => {
    await t.app.get(WalletService).credit({
      workspaceId: owner.workspaceId,
      amountMillicents: 99_999,
      type: 'topup',
      idempotencyKey: randomUUID(),
    });
    let page = await overview();
    expect(page.balance).toBe('$0.99999');
    expect(page.banner).not.toBeNull();

    await t.app.get(WalletService).credit({
      workspaceId: owner.workspaceId,
      amountMillicents: 1_000_001,
      type: 'topup',
      idempotencyKey: randomUUID(),
    });
    page = await overview();
    expect(page.balance).toBe('$11.00');
    expect(page.available).toBe('$11.00');
    expect(page.banner).toBeNull();
  });

  it('shows money held by a request under way as reserved, and available as the rest', async () => {
    const wallet = t.app.get(WalletService);
    const hold = await wallet.hold(owner.workspaceId, `req_${randomUUID()}`, 250_000, 60_000);
    expect(hold).not.toBeNull();
    const page = await overview();
    const stored = await fromDatabase();
    expect(stored.reserved).toBe(250_000);
    expect(page.balance).toBe(formatMillicents(stored.balance));
    expect(page.reserved).toBe('$2.50');
    expect(page.available).toBe(formatMillicents(stored.balance - 250_000));
    await wallet.release(hold!);
    expect((await overview()).reserved).toBe('$0.00');
  });

  it('ticks the steps off as they are done, and drops the card after the third', async () => {
    // 1. A key made in the dashboard.
    const keysPath = `${overviewPath}/settings/keys`;
    await owner.client.get(keysPath);
    const created = await owner.client.post(keysPath, { name: 'first', expires: 'never' });
    expect(created.status).toBe(201);
    const apiKey = created.html.match(/class="secret">(sk-[^<]+)</)![1];
    let page = await overview();
    expect([page.stepDone('key'), page.stepDone('call'), page.stepDone('assistant')]).toEqual([true, false, false]);
    expect(textOf(page.step('key'))).toBe('Create an API key (done)');

    // 2. A call through the official SDK (the simulator answers, and it is charged).
    const sdk = openAiClient(t.baseUrl, apiKey);
    const completion = await sdk.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello!' }] });
    expect(completion.choices[0].message.content).toBeTruthy();
    page = await overview();
    expect([page.stepDone('key'), page.stepDone('call'), page.stepDone('assistant')]).toEqual([true, true, false]);

    const stored = await fromDatabase();
    expect(stored.requests).toBe(1);
    expect(Number(stored.cost)).toBeGreaterThan(0);
    expect(page.monthRequests).toBe('1');
    expect(page.monthSpend).toBe(formatMillicents(stored.cost));
    expect(page.balance).toBe(formatMillicents(stored.balance));
    expect(stored.balance).toBeLessThan(1_100_000);

    // 3. An assistant.
    await t.app.get(AssistantsService).create(owner.workspaceId, { name: 'Helper', model: 'gpt-4o-mini' });
    page = await overview();
    expect(page.firstSteps).toBe(false);
    expect(page.html).not.toContain('First steps');
    expect(page.assistants).toBe('1 of 1');

    // The key step counts keys that are not revoked: revoking the only one brings the card back.
    const [{ id }] = (await db().query('SELECT id FROM api_keys WHERE workspace_id = $1', [owner.workspaceId])) as { id: string }[];
    await owner.client.get(keysPath);
    await owner.client.post(`${keysPath}/${id}/revoke`);
    page = await overview();
    expect(page.firstSteps).toBe(true);
    expect([page.stepDone('key'), page.stepDone('call'), page.stepDone('assistant')]).toEqual([false, true, true]);
  }, 20_000);

  it("counts this month's spend and requests exactly as the usage records sum them", async () => {
    const key = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 5_000_000 });
    // Put the owner in that workspace, to read its overview.
    await db().query(`INSERT INTO memberships (workspace_id, user_id, role) SELECT $1, id, 'owner' FROM users WHERE email = $2`, [
      key.id,
      'ada@example.com',
    ]);
    for (let i = 0; i < 5; i++) {
      await key.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: `Question ${i}: ${'words '.repeat(i * 40)}` }] });
    }
    // A record of last month: not this month's.
    await db().query(
      `INSERT INTO usage_records (workspace_id, request_id, model, input_tokens, output_tokens, total_tokens,
              llm_cost_millicents, tool_cost_millicents, total_cost_millicents, latency_ms, status, created_at)
       VALUES ($1, $2, 'gpt-4o-mini', 10, 10, 20, 123.456789, 0, 123.456789, 5, 'success', date_trunc('month', now(), 'UTC') - interval '1 hour')`,
      [key.id, `req_${randomUUID()}`],
    );
    const page = await overview(owner.client, `/w/${key.id}`);
    const stored = await fromDatabase(key.id);
    expect(stored.requests).toBe(5);
    expect(page.monthRequests).toBe('5');
    expect(page.monthSpend).toBe(formatMillicents(stored.cost));
    expect(page.balance).toBe(formatMillicents(stored.balance));
    expect(page.rateLimit).toBe('unlimited');
    expect(page.assistants).toBe('0 (no limit)');

    const totals = await t.app.get(UsageStatsService).monthToDate(key.id);
    expect(totals).toMatchObject({ requests: 5, costMillicents: expect.any(String) });
    expect(Number(totals.costMillicents)).toBeCloseTo(Number(stored.cost), 6);
  }, 20_000);

  it('uses the auto top-up threshold when auto top-up is on, and says it is on', async () => {
    const workspace = await t.createWorkspace({ tier: 'pro', balanceMillicents: 500_000 });
    await db().query(`INSERT INTO memberships (workspace_id, user_id, role) SELECT $1, id, 'admin' FROM users WHERE email = $2`, [
      workspace.id,
      'ada@example.com',
    ]);
    // $5.00 is well above $1.00: no banner.
    expect((await overview(owner.client, `/w/${workspace.id}`)).banner).toBeNull();

    await t.app.get(AutoTopupSettingsService).configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: 1_000_000,
      amountMillicents: 2_000_000,
    });
    const page = await overview(owner.client, `/w/${workspace.id}`);
    expect(page.rateLimit).toBe('60 per minute');
    expect(page.banner).not.toBeNull();
    expect(textOf(page.banner!)).toContain('Low balance: $5.00 available, below $10.00.');
    expect(textOf(page.banner!)).toContain('Auto top-up is on: it adds $20.00 when the balance falls below $10.00.');
    expect(page.banner).not.toContain('Add credit');
  });

  it("tells a member to ask an admin, and shows a member the same figures", async () => {
    const invitation = await t.app
      .get(MembersService)
      .invite(owner.workspaceId, 'max@example.com', 'member', (await db().query(`SELECT id FROM users WHERE email = 'ada@example.com'`))[0].id);
    const member = await signUp(t.baseUrl, { email: 'max@example.com', name: 'Max Member', invitation: invitation.token });
    // The lease of the earlier call sets money aside for WALLET_LEASE_IDLE_MS: an adjustment may not go below it.
    await t.quiet(owner.workspaceId);
    await t.app.get(WalletService).credit({
      workspaceId: owner.workspaceId,
      amountMillicents: -((await fromDatabase()).balance - 50_000),
      type: 'adjustment',
      idempotencyKey: randomUUID(),
    });
    const seen = await overview(member.client);
    const ownerSees = await overview();
    expect(seen.balance).toBe('$0.50');
    expect([seen.monthSpend, seen.monthRequests, seen.assistants]).toEqual([ownerSees.monthSpend, ownerSees.monthRequests, ownerSees.assistants]);
    expect(textOf(seen.banner!)).toContain('Tell an admin of this workspace.');
    expect(seen.banner).not.toContain('Add credit');
    expect(seen.step('key')).toContain('an admin of this workspace can make one');
  });

  it('is a 404 for someone outside the workspace, and a sign-in redirect for no one', async () => {
    const stranger = await signUp(t.baseUrl, { email: 'sam@example.com', name: 'Sam Stranger' });
    expect((await stranger.client.get(overviewPath)).status).toBe(404);
    const anonymous = await fetch(`${t.baseUrl}${overviewPath}`, { redirect: 'manual', headers: { accept: BROWSER_ACCEPT } });
    expect(anonymous.status).toBe(303);
    expect(anonymous.headers.get('location')).toBe(`/login?next=${encodeURIComponent(overviewPath)}`);
  });

  it('reads the month from the daily totals (at most days x models rows), never the records', async () => {
    const { TOTALS_SQL } = await import('../src/usage/usage-stats.service');
    expect(TOTALS_SQL).toContain('FROM usage_daily_totals');
    expect(TOTALS_SQL).not.toContain('usage_records');
    const stats = t.app.get(UsageStatsService);
    expect(await stats.totals(owner.workspaceId, '2000-01-01', '2000-01-31')).toEqual({ requests: 0, tokens: 0, costMillicents: '0' });
  });
});
