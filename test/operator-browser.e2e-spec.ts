/**
 * The operator console in a real browser (Debian's Chromium through playwright-core): an
 * operator finds it from the nav, changes a workspace's tier, credits $5 with a reason,
 * suspends the workspace (its key is refused through the official SDK, its owner sees the
 * banner) and resumes it. Every operator page, in each state met, passes axe with no console
 * error or CSP violation; to the workspace's owner the console's pages are 404s.
 */
import OpenAI from 'openai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { openAiClient, startTestApp, testConfig, TestApp } from './support/test-app';

const OPERATOR = { name: 'Oona Operator', email: 'oona@example.com', password: 'operators read ledgers' };
const OWNER = { name: 'Carl Customer', email: 'carl@example.com', password: 'customers write prompts' };

describeWithBrowser('operator console in the browser', () => {
  jest.setTimeout(120_000);
  let t: TestApp;
  let browser: Browser;
  let workspaceId: string;
  let apiKey: string;
  const checked: string[] = [];

  beforeAll(async () => {
    [t, browser] = await Promise.all([
      startTestApp({
        config: { llmSimulator: 'on', simulatorWordDelayMs: 0, dashboard: { ...testConfig().dashboard, operatorEmails: [OPERATOR.email] } },
      }),
      launchChromium(),
    ]);
    const accounts = t.app.get(AccountsService);
    for (const person of [OPERATOR, OWNER]) {
      const { user, workspaceId: id } = await accounts.signUp(person, { firstWorkspace: { tier: 'free' } });
      await accounts.markEmailVerified(user.id);
      if (person === OWNER) workspaceId = id!;
    }
    apiKey = (await t.app.get(ApiKeysService).create(workspaceId, 'ci')).apiKey;
    await t.app.get(WalletService).credit({ workspaceId, amountMillicents: 100_000, type: 'topup', idempotencyKey: `test:${workspaceId}` });
  });
  afterAll(async () => {
    console.log(`operator pages checked with axe (${checked.length}): ${checked.join('; ')}`);
    await browser?.close();
    await t?.close();
  });

  async function signedIn(person: { email: string; password: string }): Promise<{ context: BrowserContext; page: Page; problems: PageProblem[] }> {
    const context = await newContext(browser, t.baseUrl);
    const page = await context.newPage();
    const problems = collectConsoleErrors(page);
    await page.goto('/login');
    await page.getByLabel('Email').fill(person.email);
    await page.getByLabel('Password').fill(person.password);
    await Promise.all([page.waitForURL((url) => !url.pathname.startsWith('/login')), page.getByRole('button', { name: 'Sign in' }).click()]);
    return { context, page, problems };
  }

  /** axe once per page and state (path pattern, flash and banners shown), and no console error or CSP violation. */
  async function check(page: Page, problems: PageProblem[], expectedStatus = 200): Promise<void> {
    await page.waitForLoadState('load');
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    const pattern = new URL(page.url()).pathname.replace(/[0-9a-f-]{36}/g, ':id');
    const state = await page.evaluate<string>("['.flash', '.banner', 'table'].map((s) => document.querySelectorAll(s).length).join()");
    const key = `${pattern} ${expectedStatus} ${state}`;
    if (!checked.includes(key)) {
      checked.push(key);
      await expectAccessible(page);
    }
    const unexpected = problems.filter(
      (problem) => !(expectedStatus >= 400 && problem.kind === 'console-error' && problem.text.includes(`status of ${expectedStatus}`)),
    );
    expect(unexpected).toEqual([]);
    problems.length = 0;
  }

  async function go(page: Page, problems: PageProblem[], to: string, expectedStatus = 200): Promise<void> {
    const response = await page.goto(to);
    expect({ to, status: response?.status() }).toEqual({ to, status: expectedStatus });
    await check(page, problems, expectedStatus);
  }

  /** Submits a form of the workspace page and waits for the page it redirects to. */
  async function submit(page: Page, button: string): Promise<void> {
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: button }).click()]);
  }

  it('is a 404 to a workspace owner who is no operator, and absent from their nav', async () => {
    const { context, page, problems } = await signedIn(OWNER);
    try {
      await check(page, problems);
      expect(await page.getByRole('link', { name: 'Operator' }).count()).toBe(0);
      for (const path of ['/operator', `/operator/workspaces/${workspaceId}`, '/operator/figures', '/operator/audit']) {
        await go(page, problems, path, 404);
      }
    } finally {
      await context.close();
    }
  });

  it('changes the tier, credits $5 with a reason, suspends and resumes a workspace', async () => {
    const sdk = openAiClient(t.baseUrl, apiKey);
    const chat = () => sdk.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'hi' }] });
    await chat(); // usage for the figures page
    const { context, page, problems } = await signedIn(OPERATOR);
    const owner = await signedIn(OWNER);
    try {
      await check(page, problems);
      await Promise.all([page.waitForEvent('load'), page.getByRole('link', { name: 'Operator' }).click()]);
      await check(page, problems);
      await page.getByLabel('Name or id').fill('Carl');
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Search' }).click()]);
      await check(page, problems);
      await Promise.all([page.waitForEvent('load'), page.locator(`#workspace-${workspaceId} a`).click()]);
      expect(new URL(page.url()).pathname).toBe(`/operator/workspaces/${workspaceId}`);
      await check(page, problems);

      await page.getByLabel('Tier', { exact: true }).selectOption('team');
      await page.locator('#tier-reason').fill('upgrade by phone');
      await submit(page, 'Change the tier');
      expect(await page.locator('.flash').innerText()).toContain('now on the team tier');
      await check(page, problems);
      expect(await sdk.get('/limits')).toMatchObject({ data: { tier: 'team' } });

      await page.getByLabel('Amount in dollars').fill('5');
      await page.locator('#balance-reason').fill('goodwill credit');
      await submit(page, 'Book the adjustment');
      expect(await page.locator('.flash').innerText()).toContain('Credited $5.00');
      expect(await page.locator('#ledger-table').innerText()).toContain(`Operator credit by ${OPERATOR.email}: goodwill credit`);
      expect(await page.locator('#workspace-audit-table').innerText()).toContain('goodwill credit');
      await check(page, problems);
      const [row] = (await t.app.get(DataSource).query(
        `SELECT amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 AND type = 'adjustment'`,
        [workspaceId],
      )) as { amount: number }[];
      expect(row).toEqual({ amount: 500_000 });

      await page.locator('#status-reason').fill('abuse report');
      await submit(page, 'Suspend the workspace');
      await check(page, problems);
      const refused = await chat().catch((error: unknown) => error);
      expect(refused).toBeInstanceOf(OpenAI.PermissionDeniedError);
      expect(refused).toMatchObject({ status: 403, code: 'workspace_suspended' });
      await owner.page.goto(`/w/${workspaceId}/usage`);
      expect(await owner.page.locator('#suspended-banner').innerText()).toContain('This workspace is suspended.');
      await check(owner.page, owner.problems);

      await submit(page, 'Resume the workspace');
      await check(page, problems);
      await expect(chat()).resolves.toMatchObject({ object: 'chat.completion' });
      await owner.page.reload();
      expect(await owner.page.locator('#suspended-banner').count()).toBe(0);

      await go(page, problems, '/operator/figures');
      expect(await page.locator('#top-workspaces-table').innerText()).toContain('Carl');
      await go(page, problems, '/operator/figures?days=7');
      await go(page, problems, '/operator/audit');
      const audit = await page.locator('#audit-table').innerText();
      for (const text of ['upgrade by phone', 'goodwill credit', 'abuse report', 'Resumed']) expect(audit).toContain(text);
      await go(page, problems, '/operator?q=no-such-workspace');
    } finally {
      await owner.context.close();
      await context.close();
    }
  });
});
