import OpenAI from 'openai';
import { randomUUID } from 'node:crypto';
import { MembersService } from '../src/accounts/members.service';
import { AccountsService } from '../src/accounts/accounts.service';
import { NerfingRulesService } from '../src/limits/nerfing/nerfing-rules.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import type { Browser } from 'playwright-core';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, screenshot } from './support/browser';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * Settings > Limits through HTTP, as a browser uses it: admins and owners add, reorder and
 * delete nerfing rules (checked as the API checks them, the tier's count as a form message),
 * the rules made here are the ones `GET /v1/limits` shows and the chat path applies, and
 * members read them and get 403 for any change.
 */
describe('dashboard: nerfing rules (Settings > Limits)', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let limitsPath: string;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'nora@example.com', name: 'Nora Owner' });
    limitsPath = `/w/${owner.workspaceId}/settings/limits`;
  });
  afterAll(async () => {
    await t?.close();
  });

  const rules = () => t.app.get(NerfingRulesService).list(owner.workspaceId);

  it('shows the tab, the tier allowance and no rules at first', async () => {
    const page = await owner.client.get(limitsPath);
    expect(page.status).toBe(200);
    expect(page.html).toContain(`href="${limitsPath}" aria-current="page"`);
    expect(page.html).toContain('id="no-rules"');
    // Sign-up makes a free workspace: two rules.
    expect(textOf(page.html)).toContain('The free tier allows 2 rules; this workspace has 0.');
    expect(page.html).toContain('id="add-rule-form"');
  });

  it('adds rules through the form, which the API lists and the chat path applies', async () => {
    await owner.client.get(limitsPath);
    const added = await owner.client.post(limitsPath, {
      scope: 'user',
      user_id: 'visitor-9',
      window: 'minute',
      metric: 'requests',
      threshold: '1',
      action: 'cap_output',
      max_tokens: '5',
      model: '',
    });
    expect(added.status).toBe(303);
    expect(added.location).toBe(limitsPath);
    const page = await owner.client.follow(added);
    expect(textOf(page.html)).toContain('The user "visitor-9", past 1 request in a minute, gets at most 5 output tokens per request.');
    expect(textOf(page.html)).toContain('The rule is added.');

    await owner.client.post(limitsPath, { scope: 'all', window: 'day', metric: 'tokens', threshold: '100000', action: 'downgrade', model: 'gpt-4o-mini' });
    const [first, second] = await rules();
    expect([first.scopeUserId, first.actionMaxTokens, second.actionModel]).toEqual(['visitor-9', 5, 'gpt-4o-mini']);

    // The API key of the same workspace sees both, in order.
    const { apiKey } = await t.app.get(ApiKeysService).create(owner.workspaceId, { name: 'test' });
    const client = openAiClient(t.baseUrl, apiKey);
    await t.app.get(WalletService).credit({ workspaceId: owner.workspaceId, amountMillicents: 100_000, type: 'topup', idempotencyKey: randomUUID() });
    const limits = (await client.get('/limits')) as { data: { nerfingRules: { id: string; action: unknown }[]; maxNerfingRules: number } };
    expect(limits.data.maxNerfingRules).toBe(2);
    expect(limits.data.nerfingRules.map((rule) => [rule.id, rule.action])).toEqual([
      [first.id, { type: 'cap_output', max_tokens: 5 }],
      [second.id, { type: 'downgrade', model: 'gpt-4o-mini' }],
    ]);

    // The second request of visitor-9 in the minute is cut at 5 tokens by the simulator.
    const ask = () =>
      client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'Tell me a long story about a lighthouse keeper.' }],
        user_id: 'visitor-9',
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    expect((await ask()).usage!.completion_tokens).toBeGreaterThan(5);
    const capped = await ask();
    expect(capped.usage!.completion_tokens).toBeLessThanOrEqual(5);
    expect(capped.choices[0].finish_reason).toBe('length');
  });

  it("refuses a third rule on the free tier with the tier's limit as the form's message, and keeps the two", async () => {
    await owner.client.get(limitsPath);
    const refused = await owner.client.post(limitsPath, { scope: 'all', window: 'hour', metric: 'requests', threshold: '50', action: 'block' });
    expect(refused.status).toBe(403);
    expect(textOf(refused.html)).toContain('The free tier allows 2 nerfing rules per workspace, and this workspace has 2.');
    expect(refused.html).toContain('id="rules-full"');
    expect(await rules()).toHaveLength(2);
  });

  it('shows what is wrong with an invalid rule beside its field, with the values kept', async () => {
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'pro');
    await owner.client.get(limitsPath);
    const refused = await owner.client.post(limitsPath, { scope: 'all', window: 'hour', metric: 'requests', threshold: '0', action: 'block' });
    expect(refused.status).toBe(400);
    expect(refused.html).toMatch(/<small id="rule-threshold-error">The threshold must be a whole number of at least 1\.<\/small>/);
    expect(refused.html).toContain('aria-invalid="true" aria-describedby="rule-threshold-error"');
    const unknownModel = await owner.client.post(limitsPath, { scope: 'all', window: 'hour', metric: 'requests', threshold: '5', action: 'downgrade', model: 'gpt-99' });
    expect(unknownModel.status).toBe(400);
    expect(textOf(unknownModel.html)).toContain("The model 'gpt-99' is not in the catalog.");
    expect(await rules()).toHaveLength(2);
  });

  it('moves a rule up and down, and deletes one', async () => {
    const [first, second] = await rules();
    await owner.client.get(limitsPath);
    const moved = await owner.client.post(`${limitsPath}/${second.id}/move`, { direction: 'up' });
    expect(moved.status).toBe(303);
    expect((await rules()).map((rule) => rule.id)).toEqual([second.id, first.id]);
    const page = await owner.client.get(limitsPath);
    expect(page.html.indexOf(`id="rule-${second.id}"`)).toBeLessThan(page.html.indexOf(`id="rule-${first.id}"`));

    const deleted = await owner.client.post(`${limitsPath}/${second.id}/delete`);
    expect(deleted.status).toBe(303);
    expect((await rules()).map((rule) => rule.id)).toEqual([first.id]);
    // Another workspace's rule, or no rule: not found, nothing deleted.
    await owner.client.get(limitsPath);
    expect((await owner.client.post(`${limitsPath}/${second.id}/delete`)).status).toBe(404);
    expect((await owner.client.post(`${limitsPath}/not-a-uuid/delete`)).status).toBe(404);
    expect(await rules()).toHaveLength(1);
  });

  describe('a member (reads only)', () => {
    let member: SignedUpPerson;

    beforeAll(async () => {
      const ownerUser = await t.app.get(AccountsService).findByEmail('nora@example.com');
      const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'milo@example.com', 'member', ownerUser!.id);
      member = await signUp(t.baseUrl, { email: 'milo@example.com', name: 'Milo Member', invitation: invitation.token });
      expect(member.workspaceId).toBe(owner.workspaceId);
    });

    it('sees the rules, without the form or any button', async () => {
      const page = await member.client.get(limitsPath);
      expect(page.status).toBe(200);
      expect(page.html).toContain('id="rules-table"');
      expect(textOf(page.html)).toContain('The user "visitor-9"');
      expect(page.html).not.toContain('add-rule-form');
      expect(page.html).not.toContain('/delete');
      expect(page.html).not.toContain('/move');
    });

    it('gets 403 for adding, moving or deleting, and nothing changes', async () => {
      const before = await rules();
      await member.client.get(limitsPath);
      const attempts = [
        await member.client.post(limitsPath, { scope: 'all', window: 'hour', metric: 'requests', threshold: '1', action: 'block' }),
        await member.client.post(`${limitsPath}/${before[0].id}/move`, { direction: 'down' }),
        await member.client.post(`${limitsPath}/${before[0].id}/delete`),
      ];
      expect(attempts.map((attempt) => attempt.status)).toEqual([403, 403, 403]);
      expect(await rules()).toEqual(before);
    });
  });
});

describeWithBrowser('dashboard: nerfing rules in the browser', () => {
  let t: TestApp;
  let browser: Browser;
  let owner: SignedUpPerson;

  beforeAll(async () => {
    t = await startTestApp();
    browser = await launchChromium();
    owner = await signUp(t.baseUrl, { email: 'lina@example.com', name: 'Lina Limits' });
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'pro');
  }, 30_000);

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('adds a rule with the form (an error shown beside its field first), reorders and deletes after asking, accessibly; writes docs/dashboard-limits.png', async () => {
    const context = await newContext(browser, t.baseUrl);
    await context.addCookies([{ name: 'acs.sid', value: owner.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    page.setDefaultTimeout(8_000);
    const problems = collectConsoleErrors(page);
    const limitsPath = `/w/${owner.workspaceId}/settings/limits`;
    await page.goto(limitsPath);
    await expectAccessible(page, 'limits page, no rules');

    // A downgrade without its model: the form comes back with the message beside the field.
    await page.getByLabel('Applies to').selectOption('all');
    await page.getByLabel('Window').selectOption('hour');
    await page.getByLabel('Counting').selectOption('requests');
    await page.getByLabel('Threshold').fill('100');
    await page.getByLabel('Action').selectOption('downgrade');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Add rule' }).click()]);
    await page.locator('#rule-model-error', { hasText: 'Choose the model to serve instead.' }).waitFor();
    expect(await page.getByLabel('Threshold').inputValue()).toBe('100');
    await expectAccessible(page, 'limits page with a form error');

    await page.getByLabel(/Model to serve/).selectOption('gpt-4o-mini');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Add rule' }).click()]);
    await page.getByText('Each end user, past 100 requests in an hour, is served gpt-4o-mini instead.').waitFor();

    await page.getByLabel('Applies to').selectOption('widget_visitors');
    await page.getByLabel('Window').selectOption('day');
    await page.getByLabel('Counting').selectOption('cost_millicents');
    await page.getByLabel('Threshold').fill('50000');
    await page.getByLabel('Action').selectOption('block');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Add rule' }).click()]);
    const rows = page.locator('#rules-table tbody tr');
    expect(await rows.count()).toBe(2);
    await expectAccessible(page, 'limits page with two rules');
    await screenshot(page, 'docs/dashboard-limits.png');

    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Move rule 2 up' }).click()]);
    expect(await rows.first().textContent()).toContain('Each widget visitor, past 50,000 millicents in a day, is refused (429)');

    page.once('dialog', (dialog) => void dialog.accept());
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Delete rule 1' }).click()]);
    expect(await rows.count()).toBe(1);
    expect(await rows.first().textContent()).toContain('is served gpt-4o-mini instead');
    const [rule] = await t.app.get(NerfingRulesService).list(owner.workspaceId);
    expect(rule).toMatchObject({ scopeType: 'all', actionType: 'downgrade', actionModel: 'gpt-4o-mini' });
    // Chromium logs the 400 of the re-rendered form; anything else (CSP, script errors) is a failure.
    expect(problems.filter((problem) => !problem.text.includes('status of 400'))).toEqual([]);
  });
});
