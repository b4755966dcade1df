import OpenAI from 'openai';
import type { Browser, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { formatDateTime } from '../src/dashboard/format';
import { ApiKeysService, hashKey } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { WalletService } from '../src/wallet/wallet.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { DashboardClient, DashboardResponse, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * Settings > API keys through HTTP, as a browser would use it: the key made in the page
 * works with the official SDK, is shown once, and stops working once revoked; members see
 * the list and nothing they could change.
 */
describe('dashboard: API keys', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let ownerId: string;
  let keysPath: string;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'olga@example.com', name: 'Olga Owner' });
    keysPath = `/w/${owner.workspaceId}/settings/keys`;
    ownerId = await userIdOf('olga@example.com');
    // Sign-up makes a free workspace (5 requests a minute): these tests poll faster than that.
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'enterprise');
  });

  afterAll(async () => {
    await t?.close();
  });

  const db = () => t.app.get(DataSource);

  async function userIdOf(email: string): Promise<string> {
    const [row] = (await db().query('SELECT id FROM users WHERE email = $1', [email])) as { id: string }[];
    return row.id;
  }

  /** Creates a key through the form; returns the page and the secret it shows. */
  async function createKey(
    client: DashboardClient,
    form: Record<string, string>,
    path = keysPath,
  ): Promise<{ response: DashboardResponse; apiKey: string; id: string }> {
    await client.get(path);
    const response = await client.post(path, { expires: 'never', ...form });
    expect(response.status).toBe(201);
    const apiKey = response.html.match(/<code id="new-key" class="secret">(sk-[A-Za-z0-9_-]+)<\/code>/)![1];
    const [row] = (await db().query('SELECT id FROM api_keys WHERE key_hash = $1', [hashKey(apiKey)])) as { id: string }[];
    return { response, apiKey, id: row.id };
  }

  /** The `<tr>` of a key in the list page. */
  function rowOf(html: string, keyId: string): string {
    const row = html.match(new RegExp(`<tr id="key-${keyId}">[\\s\\S]*?</tr>`));
    if (!row) throw new Error(`No row for key ${keyId}`);
    return row[0];
  }

  /** The SDK's answer, polled until it fails with AuthenticationError or `ms` pass (the key cache is 5 s). */
  async function expectRefusedWithin(client: OpenAI, ms: number): Promise<void> {
    const deadline = Date.now() + ms;
    for (;;) {
      try {
        await client.models.list();
      } catch (error) {
        expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
        return;
      }
      if (Date.now() > deadline) throw new Error(`The key still worked after ${ms} ms`);
      await new Promise((resolve) => setTimeout(resolve, 250));
    }
  }

  it('creates a key shown once, which the OpenAI SDK uses, and revokes it: the SDK then gets AuthenticationError', async () => {
    const empty = await owner.client.get(keysPath);
    expect(empty.status).toBe(200);
    expect(empty.html).toContain('id="no-keys"');
    expect(empty.html).toContain('id="create-key-form"');
    expect(empty.html).toContain('aria-current="page">API keys</a>');

    const { response, apiKey, id } = await createKey(owner.client, { name: 'ci server' });
    expect(response.headers.get('cache-control')).toBe('no-store');
    expect(response.html).toContain(`curl ${t.baseUrl}/v1/models -H "Authorization: Bearer ${apiKey}"`);
    expect(response.html).toContain(`new OpenAI({ baseURL: '${t.baseUrl}/v1', apiKey })`);
    expect(response.html).toContain('data-copy="new-key"');
    expect(response.html).toContain(`href="${keysPath}" role="button">Done</a>`);

    // A key like any other: the official SDK lists the models with it.
    const sdk = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });
    expect((await sdk.models.list()).data.length).toBeGreaterThan(0);

    // The list shows it without its secret or hash; the secret is nowhere but in that one answer.
    const list = await owner.client.get(keysPath);
    const row = rowOf(list.html, id);
    expect(textOf(row)).toMatch(new RegExp(`^ci server ${apiKey.slice(0, 11)}… \\d{4}-\\d{2}-\\d{2} Olga Owner never never active none Limits Revoke$`));
    expect(list.html).not.toContain(apiKey);
    expect(list.html).not.toContain(apiKey.slice(11));
    expect(list.html).not.toContain(hashKey(apiKey));
    const sessions = (await db().query('SELECT sess::text AS sess FROM dashboard_sessions')) as { sess: string }[];
    expect(sessions.length).toBeGreaterThan(0);
    for (const { sess } of sessions) expect(sess).not.toContain(apiKey.slice(3));
    expect((await owner.client.get(`/w/${owner.workspaceId}`)).html).not.toContain(apiKey);

    // Revoke with a plain form: redirect, a message, and the key refused.
    const revoked = await owner.client.post(`${keysPath}/${id}/revoke`);
    expect(revoked.status).toBe(303);
    expect(revoked.location).toBe(keysPath);
    const after = await owner.client.follow(revoked);
    expect(textOf(after.html)).toContain('is revoked: requests with it are refused within seconds.');
    expect(textOf(rowOf(after.html, id))).toMatch(/ revoked \d{4}-\d{2}-\d{2} none$/);
    expect(rowOf(after.html, id)).not.toContain('Revoke');
    await expectRefusedWithin(sdk, 7_000);
  }, 20_000);

  it('revokes through htmx: the answer is the updated row, with the message out of band', async () => {
    const { apiKey, id } = await createKey(owner.client, { name: 'htmx' });
    const sdk = openAiClient(t.baseUrl, apiKey);
    await sdk.models.list();
    const page = await owner.client.get(keysPath);
    const form = rowOf(page.html, id);
    expect(form).toContain(`hx-post="${keysPath}/${id}/revoke"`);
    expect(form).toContain('hx-target="closest tr"');
    expect(form).toContain('hx-swap="outerHTML"');
    expect(form).toContain('data-confirm="Revoke the key “htmx”?');

    const response = await owner.client.post(`${keysPath}/${id}/revoke`, {}, { headers: { 'HX-Request': 'true' } });
    expect(response.status).toBe(200);
    expect(response.html.trimStart().startsWith(`<tr id="key-${id}">`)).toBe(true);
    expect(response.html).not.toContain('<html');
    expect(textOf(rowOf(response.html, id))).toMatch(/ revoked \d{4}-\d{2}-\d{2} none$/);
    expect(response.html).toContain('<div id="flash-area" hx-swap-oob="true">');
    expect(textOf(response.html)).toContain('requests with it are refused within seconds');
    await expectRefusedWithin(sdk, 7_000);
  });

  it('shows when a key was last used (written about once a minute)', async () => {
    const { apiKey, id } = await createKey(owner.client, { name: 'used' });
    expect(textOf(rowOf((await owner.client.get(keysPath)).html, id))).toContain('Olga Owner never never');
    await openAiClient(t.baseUrl, apiKey).models.list();
    await t.app.get(ApiKeysService).flushLastUsed();
    const [{ last_used_at }] = (await db().query('SELECT last_used_at FROM api_keys WHERE id = $1', [id])) as { last_used_at: Date }[];
    const row = textOf(rowOf((await owner.client.get(keysPath)).html, id));
    expect(row).toContain(`Olga Owner ${formatDateTime(last_used_at)} never active`);
  });

  it('lists keys made by the CLI as made by "CLI"', async () => {
    const cli = await t.app.get(ApiKeysService).create(owner.workspaceId, 'from the cli');
    const row = textOf(rowOf((await owner.client.get(keysPath)).html, cli.id));
    expect(row).toMatch(new RegExp(`^from the cli ${cli.displayPrefix}… \\d{4}-\\d{2}-\\d{2} CLI never never active none Limits Revoke$`));
  });

  it('shows the expiry it was given, and the key stops working at it', async () => {
    const week = await createKey(owner.client, { name: 'a week', expires: '7' });
    const [{ expires_at: weekEnd }] = (await db().query('SELECT expires_at FROM api_keys WHERE id = $1', [week.id])) as {
      expires_at: Date;
    }[];
    expect(Math.abs(weekEnd.getTime() - (Date.now() + 7 * 86_400_000))).toBeLessThan(60_000);
    expect(week.response.html).toContain(`Expires: ${formatDateTime(weekEnd)}`);
    expect(textOf(rowOf((await owner.client.get(keysPath)).html, week.id))).toContain(`never ${formatDateTime(weekEnd)} active`);

    // A date: the key works until the end of that day, UTC.
    const inThreeDays = new Date(Date.now() + 3 * 86_400_000).toISOString().slice(0, 10);
    const dated = await createKey(owner.client, { name: 'dated', expires: 'date', expires_on: inThreeDays });
    const endOfDay = new Date(Date.parse(`${inThreeDays}T00:00:00Z`) + 86_400_000);
    expect(textOf(rowOf((await owner.client.get(keysPath)).html, dated.id))).toContain(`never ${formatDateTime(endOfDay)} active`);

    // Enforced: move the expiry close (before the key is first used, so nothing is cached), and wait past it.
    const soon = await createKey(owner.client, { name: 'soon', expires: '30' });
    await db().query(`UPDATE api_keys SET expires_at = now() + interval '1500 milliseconds' WHERE id = $1`, [soon.id]);
    const sdk = openAiClient(t.baseUrl, soon.apiKey);
    await sdk.models.list();
    await expectRefusedWithin(sdk, 4_000);
    const row = rowOf((await owner.client.get(keysPath)).html, soon.id);
    expect(textOf(row)).toMatch(/ expired none$/);
    expect(row).not.toContain('Revoke');
  }, 15_000);

  it('re-renders the form with the problem for a missing or long name, a past day, or an unknown expiry', async () => {
    const attempts: [Record<string, string>, string, string][] = [
      [{ name: '   ' }, 'key-name-error', 'Give the key a name'],
      [{ name: 'x'.repeat(101) }, 'key-name-error', 'at most 100 characters'],
      [{ name: 'old', expires: 'date', expires_on: '2020-01-01' }, 'key-expires-on-error', 'That day is over'],
      [{ name: 'bad', expires: 'date', expires_on: '2025-02-30' }, 'key-expires-on-error', 'Choose the last day'],
      [{ name: 'bad', expires: '365' }, 'key-expires-error', 'Choose one of the offered expiries'],
    ];
    const before = (await t.app.get(ApiKeysService).list(owner.workspaceId)).length;
    for (const [form, errorId, message] of attempts) {
      await owner.client.get(keysPath);
      const response = await owner.client.post(keysPath, { expires: 'never', ...form });
      expect({ form, status: response.status }).toEqual({ form, status: 400 });
      expect(response.html).toContain(`<small id="${errorId}">`);
      expect(textOf(response.html)).toContain(message);
      expect(response.html).toContain('aria-invalid="true"');
      expect(response.html).not.toMatch(/sk-[A-Za-z0-9_-]{40}/);
    }
    // What was typed is kept.
    expect(owner.client.lastHtml).toContain('<option value="date"');
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).length).toBe(before);
  });

  /** A form posted as JSON, as a script might: the fields may be of any JSON type. */
  async function postJson(client: DashboardClient, path: string, body: Record<string, unknown>): Promise<{ status: number; html: string }> {
    await client.get(path);
    const response = await fetch(`${t.baseUrl}${path}`, {
      method: 'POST',
      redirect: 'manual',
      headers: {
        'content-type': 'application/json',
        accept: 'text/html',
        cookie: [...client.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
        'x-csrf-token': client.csrfToken!,
      },
      body: JSON.stringify(body),
    });
    return { status: response.status, html: await response.text() };
  }

  it('answers 400 naming the field when the key forms are posted as JSON with fields that are not text', async () => {
    const before = (await t.app.get(ApiKeysService).list(owner.workspaceId)).length;
    const created = await postJson(owner.client, keysPath, { name: 12345, expires: 'never' });
    expect(created.status).toBe(400);
    expect(textOf(created.html)).toContain('The field name must be text');
    expect(textOf((await postJson(owner.client, keysPath, { name: 'ok', expires: { days: 7 } })).html)).toContain('The field expires must be text');
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).length).toBe(before);

    const key = await t.app.get(ApiKeysService).create(owner.workspaceId, 'json target');
    const limitsPath = `${keysPath}/${key.id}/limits`;
    const cases: [Record<string, unknown>, string][] = [
      [{ spend_limit: 5 }, 'The field spend_limit must be text'],
      [{ spend_limit_period: ['daily', 'weekly'] }, 'The field spend_limit_period is sent once'],
      [{ rate_limit_rpm: { n: 30 } }, 'The field rate_limit_rpm must be text'],
      [{ allowed_ips: 7 }, 'The field allowed_ips must be text'],
      [{ allowed_models: [42] }, 'The field allowed_models must be text'],
      [{ allowed_assistants: { slug: 'x' } }, 'The field allowed_assistants must be text'],
    ];
    for (const [fields, says] of cases) {
      const answer = await postJson(owner.client, limitsPath, { spend_limit: '', spend_limit_period: 'none', rate_limit_rpm: '', allowed_ips: '', ...fields });
      expect({ fields, status: answer.status }).toEqual({ fields, status: 400 });
      expect(textOf(answer.html)).toContain(says);
    }
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).find((k) => k.id === key.id)!.limits).toMatchObject({
      spendLimitMillicents: null,
      allowedModels: null,
      allowedAssistants: null,
    });
  });

  it('refuses a model outside the catalog and an assistant the workspace does not have, naming the entry', async () => {
    const key = await t.app.get(ApiKeysService).create(owner.workspaceId, 'lists target');
    const limitsPath = `${keysPath}/${key.id}/limits`;
    const blank = { spend_limit: '', spend_limit_period: 'none', rate_limit_rpm: '', allowed_ips: '' };
    // The period without a reset is `none`, as in the CLI and the API.
    expect((await owner.client.get(limitsPath)).html).toMatch(/<option value="none"[^>]*>None: never \(a limit for all time\)<\/option>/);
    const cases: [Record<string, string>, string][] = [
      [{ allowed_models: 'no-such-model' }, 'allowed_models: "no-such-model" is not a model of the catalog'],
      [{ allowed_assistants: 'NoSuchSlug' }, 'allowed_assistants: "NoSuchSlug" is not an assistant slug'],
      [{ allowed_assistants: 'no-such-slug' }, 'allowed_assistants: "no-such-slug" is not an assistant of this workspace'],
    ];
    for (const [fields, message] of cases) {
      await owner.client.get(limitsPath);
      const answer = await owner.client.post(limitsPath, { ...blank, ...fields });
      expect({ fields, status: answer.status }).toEqual({ fields, status: 400 });
      expect(textOf(answer.html)).toContain(message);
    }
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).find((k) => k.id === key.id)!.limits).toMatchObject({
      allowedModels: null,
      allowedAssistants: null,
    });
  });

  it('refuses a form without the CSRF token', async () => {
    await owner.client.get(keysPath);
    const response = await owner.client.post(keysPath, { name: 'no token' }, { csrf: false });
    expect(response.status).toBe(403);
    const key = await t.app.get(ApiKeysService).create(owner.workspaceId, 'target');
    expect((await owner.client.post(`${keysPath}/${key.id}/revoke`, {}, { csrf: false })).status).toBe(403);
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).find((k) => k.id === key.id)!.status).toBe('active');
  });

  it("sets a key's limits from its page: the list shows them with the spend, and the API enforces them", async () => {
    const { apiKey, id } = await createKey(owner.client, { name: 'capped' });
    const limitsPath = `${keysPath}/${id}/limits`;
    const form = await owner.client.get(limitsPath);
    expect(form.status).toBe(200);
    expect(form.html).toContain('id="key-limits-form"');

    // Bad input comes back with the problem, and nothing is saved.
    const bad = await owner.client.post(limitsPath, { spend_limit: 'five', spend_limit_period: 'daily', rate_limit_rpm: '', allowed_ips: '' });
    expect(bad.status).toBe(400);
    expect(bad.html).toContain('Type an amount in dollars');
    const badRange = await owner.client.post(limitsPath, { spend_limit: '', spend_limit_period: 'none', rate_limit_rpm: '', allowed_ips: '10.0.0.0/33' });
    expect(badRange.status).toBe(400);
    expect(badRange.html).toContain('is not an IP address or a CIDR range');

    const saved = await owner.client.post(limitsPath, {
      spend_limit: '0.05',
      spend_limit_period: 'daily',
      allowed_models: 'gpt-4o-mini',
      rate_limit_rpm: '30',
      allowed_ips: '127.0.0.1\n203.0.113.0/24',
    });
    expect(saved.status).toBe(303);
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).find((key) => key.id === id)!.limits).toEqual({
      spendLimitMillicents: 5_000,
      spendLimitPeriod: 'daily',
      allowedModels: ['gpt-4o-mini'],
      allowedAssistants: null,
      rateLimitRpm: 30,
      allowedIps: ['127.0.0.1', '203.0.113.0/24'],
    });
    await t.app.get(WalletService).credit({ workspaceId: owner.workspaceId, amountMillicents: 100_000, type: 'topup', idempotencyKey: 'limits-test' });
    const client = openAiClient(t.baseUrl, apiKey);
    await expect(client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] })).rejects.toMatchObject({
      status: 403,
      code: 'model_not_allowed',
    });
    await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }] });
    await t.settled(owner.workspaceId);
    const row = rowOf((await owner.client.get(keysPath)).html, id);
    expect(textOf(row)).toMatch(/\$0\.05 per day: \$0\.\d+ spent/);
    expect(textOf(row)).toContain('Models: gpt-4o-mini');
    expect(textOf(row)).toContain('30 requests per minute');
    expect((await owner.client.get(limitsPath)).html).toMatch(/Spent with this key: <strong>\$0\.\d+<\/strong> in the current period/);
  });

  describe('a member (view and use only)', () => {
    let member: SignedUpPerson;

    beforeAll(async () => {
      const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'mia@example.com', 'member', ownerId);
      member = await signUp(t.baseUrl, { email: 'mia@example.com', name: 'Mia Member', invitation: invitation.token });
      expect(member.workspaceId).toBe(owner.workspaceId);
    });

    it("sees keys' limits but cannot open or post the limits page", async () => {
      const key = await t.app.get(ApiKeysService).create(owner.workspaceId, 'limited for members');
      expect([403, 404]).toContain((await member.client.get(`${keysPath}/${key.id}/limits`)).status);
      await member.client.get(keysPath);
      expect([403, 404]).toContain((await member.client.post(`${keysPath}/${key.id}/limits`, { spend_limit: '1', spend_limit_period: 'none' })).status);
      expect((await t.app.get(ApiKeysService).list(owner.workspaceId)).find((k) => k.id === key.id)!.limits.spendLimitMillicents).toBeNull();
    });

    it('sees the list, but no form and no revoke button', async () => {
      const page = await member.client.get(keysPath);
      expect(page.status).toBe(200);
      expect(page.html).toContain('id="keys-table"');
      expect(page.html).toContain('ci server');
      expect(page.html).not.toContain('create-key-form');
      expect(page.html).not.toContain('Create key');
      expect(page.html).not.toContain('Revoke');
      expect(page.html).not.toContain('/revoke');
    });

    it('gets 403 for creating or revoking, and nothing changes', async () => {
      const keys = t.app.get(ApiKeysService);
      const before = await keys.list(owner.workspaceId);
      await member.client.get(keysPath);
      const create = await member.client.post(keysPath, { name: 'sneaky', expires: 'never' });
      expect(create.status).toBe(403);
      expect(create.html).not.toMatch(/sk-[A-Za-z0-9_-]{40}/);
      const active = before.find((key) => key.status === 'active')!;
      const revoke = await member.client.post(`${keysPath}/${active.id}/revoke`);
      expect(revoke.status).toBe(403);
      const htmx = await member.client.post(`${keysPath}/${active.id}/revoke`, {}, { headers: { 'HX-Request': 'true' } });
      expect(htmx.status).toBe(403);
      expect(htmx.headers.get('hx-retarget')).toBe('#flash-area');
      expect(await keys.list(owner.workspaceId)).toEqual(before);
    });
  });

  describe('another workspace', () => {
    let other: SignedUpPerson;
    let otherKey: { id: string; apiKey: string };

    beforeAll(async () => {
      other = await signUp(t.baseUrl, { email: 'otto@example.com', name: 'Otto Other' });
      otherKey = await createKey(other.client, { name: 'otto key' }, `/w/${other.workspaceId}/settings/keys`);
    });

    it("is not reachable: its key id under one's own workspace is a 404, its page too", async () => {
      await owner.client.get(keysPath);
      const response = await owner.client.post(`${keysPath}/${otherKey.id}/revoke`);
      expect(response.status).toBe(404);
      expect(response.html).not.toContain('otto key');
      expect((await owner.client.post(`${keysPath}/not-a-uuid/revoke`)).status).toBe(404);
      expect((await owner.client.get(`/w/${other.workspaceId}/settings/keys`)).status).toBe(404);
      const [{ revoked_at }] = (await db().query('SELECT revoked_at FROM api_keys WHERE id = $1', [otherKey.id])) as {
        revoked_at: Date | null;
      }[];
      expect(revoked_at).toBeNull();
      expect((await openAiClient(t.baseUrl, otherKey.apiKey).models.list()).data.length).toBeGreaterThan(0);
    });

    it("does not list the other workspace's keys", async () => {
      const page = await owner.client.get(keysPath);
      expect(page.html).not.toContain('otto key');
      expect(page.html).not.toContain(otherKey.id);
    });
  });
});

/**
 * The keys page in Chromium: the revoke button asks first (declining sends nothing), then
 * swaps its row through htmx with the message beside it; every page of the flow passes axe
 * and fits 360 px.
 */
describeWithBrowser('dashboard: API keys in the browser', () => {
  let t: TestApp;
  let browser: Browser;
  let owner: SignedUpPerson;

  beforeAll(async () => {
    t = await startTestApp();
    browser = await launchChromium();
    owner = await signUp(t.baseUrl, { email: 'bea@example.com', name: 'Bea Browser' });
  }, 30_000);

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  async function signedInPage(width = 1280): Promise<{ page: Page; problems: PageProblem[] }> {
    const context = await newContext(browser, t.baseUrl);
    await context.addCookies([{ name: 'acs.sid', value: owner.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    await page.setViewportSize({ width, height: 800 });
    page.setDefaultTimeout(8_000);
    return { page, problems: collectConsoleErrors(page) };
  }

  it('creates a key, shows it once, and revokes it in place after asking', async () => {
    const { page, problems } = await signedInPage();
    const keysPath = `/w/${owner.workspaceId}/settings/keys`;
    await page.goto(keysPath);
    await expectAccessible(page, 'keys page, empty');

    // A past day: the form comes back with the message, accessibly.
    await page.getByLabel('Name').fill('browser key');
    await page.getByLabel('Expires').selectOption('date');
    await page.getByLabel(/Last day it works/).fill('2020-01-01');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByText('That day is over').waitFor();
    await expectAccessible(page, 'keys page with a form error');

    await page.getByLabel('Expires').selectOption('30');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('heading', { name: 'Your new API key' }).waitFor();
    const apiKey = (await page.locator('#new-key').textContent())!.trim();
    expect(apiKey).toMatch(/^sk-/);
    await expectAccessible(page, 'new key page');
    // The new key's page has the list's URL (the POST's): wait for the next page load, not for the URL.
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Done' }).click()]);

    const row = page.locator('#keys-table tbody tr', { hasText: 'browser key' });
    expect(await row.locator('.key-status').textContent()).toBe('active');
    await expectAccessible(page, 'keys page with a key');

    // Declined: nothing is sent.
    page.once('dialog', (dialog) => void dialog.dismiss());
    await row.getByRole('button', { name: 'Revoke browser key' }).click();
    await page.waitForTimeout(300);
    expect(await row.locator('.key-status').textContent()).toBe('active');
    expect((await t.app.get(ApiKeysService).list(owner.workspaceId))[0].status).toBe('active');

    // Accepted: htmx swaps the row and shows the message, without leaving the page.
    let question = '';
    page.once('dialog', (dialog) => {
      question = dialog.message();
      void dialog.accept();
    });
    await row.getByRole('button', { name: 'Revoke browser key' }).click();
    await page.locator('#flash-area', { hasText: 'refused within seconds' }).waitFor();
    expect(question).toContain('Revoke the key “browser key”?');
    expect(await row.locator('.key-status').textContent()).toMatch(/^revoked \d{4}-\d{2}-\d{2}$/);
    expect(await row.getByRole('button').count()).toBe(0);
    expect(page.url()).toBe(`${t.baseUrl}${keysPath}`);
    await expect(openAiClient(t.baseUrl, apiKey).models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    await expectAccessible(page, 'keys page after revoking');

    // Chromium logs the 400 of the re-rendered form; anything else (CSP, script errors) is a failure.
    expect(problems.filter((problem) => !problem.text.includes('status of 400'))).toEqual([]);
  }, 60_000);

  it("sets a key's limits on its page, accessibly, and the list shows them", async () => {
    const { page, problems } = await signedInPage();
    const keysPath = `/w/${owner.workspaceId}/settings/keys`;
    // A key's limits page, with an error and saved.
    const limited = await t.app.get(ApiKeysService).create(owner.workspaceId, 'limited');
    await page.goto(`${keysPath}/${limited.id}/limits`);
    await expectAccessible(page, 'key limits page');
    await page.getByLabel('Amount in dollars').fill('lots');
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.getByText('Type an amount in dollars').waitFor();
    await expectAccessible(page, 'key limits page with an error');
    await page.getByLabel('Amount in dollars').fill('5');
    await page.getByLabel('Starts again').selectOption('monthly');
    await page.getByLabel('gpt-4o-mini', { exact: true }).check();
    await page.getByRole('button', { name: 'Save limits' }).click();
    await page.locator('#keys-table tr', { hasText: 'limited' }).getByText('$5.00 per month').waitFor();
    await expectAccessible(page, 'keys page with limits');
    expect(problems.filter((problem) => !problem.text.includes('status of 400'))).toEqual([]);
  }, 60_000);

  it('fits 360 px: the keys page, the new key page and the overview scroll only their tables', async () => {
    const { page, problems } = await signedInPage(360);
    // A string, evaluated in the page: this project's TypeScript has no DOM types.
    const noHorizontalScroll = () => page.evaluate<boolean>('document.documentElement.scrollWidth <= window.innerWidth');
    await page.goto(`/w/${owner.workspaceId}/settings/keys`);
    expect(await noHorizontalScroll()).toBe(true);
    await page.getByLabel('Name').fill('narrow');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.getByRole('heading', { name: 'Your new API key' }).waitFor();
    expect(await noHorizontalScroll()).toBe(true);
    await page.goto(`/w/${owner.workspaceId}`);
    await page.locator('#first-steps').waitFor();
    await page.locator('#low-balance').waitFor();
    expect(await noHorizontalScroll()).toBe(true);
    await expectAccessible(page, 'overview at 360 px');
    expect(problems).toEqual([]);
  }, 30_000);
});
