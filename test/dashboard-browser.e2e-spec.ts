/**
 * The dashboard in a real browser (Debian's Chromium through playwright-core): a person
 * signs up, verifies their address through the link shown in the page, signs out (and
 * the old cookie is worthless), resets a forgotten password, uses the account page; every
 * page visited passes axe and shows no console error or CSP violation; the pages work at
 * 360 px wide and from the keyboard. Also takes the README's screenshot.
 */
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import OpenAI from 'openai';
import type { Browser, BrowserContext, Cookie, Page, Response } from 'playwright-core';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { MailService } from '../src/mail/mail.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { startTestApp, TestApp } from './support/test-app';

const SCREENSHOT = path.join(__dirname, '..', 'docs', 'dashboard.png');

describeWithBrowser('dashboard in the browser', () => {
  jest.setTimeout(90_000);
  let t: TestApp;
  let browser: Browser;
  /** Every page checked by axe, for the log. */
  const checked: string[] = [];

  beforeAll(async () => {
    [t, browser] = await Promise.all([startTestApp(), launchChromium()]);
  });
  afterAll(async () => {
    console.log(`pages checked with axe (${checked.length}, each distinct page and state once): ${checked.join('; ')}`);
    await browser?.close();
    await t?.close();
  });

  /** A page in a fresh context that records console errors and CSP violations. */
  async function open(context?: BrowserContext): Promise<{ context: BrowserContext; page: Page; problems: PageProblem[] }> {
    const ctx = context ?? (await newContext(browser, t.baseUrl));
    const page = await ctx.newPage();
    return { context: ctx, page, problems: collectConsoleErrors(page) };
  }

  /**
   * Checks the page the browser is on: axe (no serious or critical violation), and no
   * console error or CSP violation, except Chromium's own line for an error status the
   * page was expected to answer with.
   */
  async function check(page: Page, problems: PageProblem[], expectedStatus = 200): Promise<void> {
    await page.waitForLoadState('load');
    // htmx and dashboard.js run deferred: give them their turn before judging.
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    // The same page in the same state (path pattern, title, status, messages, invalid fields, width) is checked by axe once.
    const pattern = new URL(page.url()).pathname.replace(/[0-9a-f-]{36}/g, ':id').replace(/[A-Za-z0-9_-]{43}/g, ':token');
    const state = await page.evaluate<string>(
      "['.flash', '.banner', '[aria-invalid=\"true\"]', 'table', 'dialog', '#new-key'].map((s) => document.querySelectorAll(s).length).join()",
    );
    const key = `${pattern} ${await page.title()} ${expectedStatus} ${state} ${page.viewportSize()?.width ?? 0}px`;
    if (!checked.includes(key)) {
      checked.push(key);
      await expectAccessible(page);
    }
    const unexpected = problems.filter(
      (problem) => !(expectedStatus >= 400 && problem.text.includes(`status of ${expectedStatus}`) && problem.kind === 'console-error'),
    );
    expect(unexpected).toEqual([]);
    problems.length = 0;
  }

  async function go(page: Page, problems: PageProblem[], to: string, expectedStatus = 200): Promise<Response | null> {
    const response = await page.goto(to);
    expect(response?.status()).toBe(expectedStatus);
    await check(page, problems, expectedStatus);
    return response;
  }

  function lastMail(to: string, subject: RegExp) {
    const mail = t.app.get(MailService).logged.filter((m) => m.to === to && subject.test(m.subject)).at(-1);
    if (!mail?.link) throw new Error(`no mail "${subject}" to ${to}`);
    return mail;
  }

  let emailCounter = 0;
  const newEmail = (tag: string) => `${tag}-${Date.now().toString(36)}-${++emailCounter}@example.com`;

  async function signInInBrowser(page: Page, email: string, password: string): Promise<void> {
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await Promise.all([
      page.waitForURL((url) => !url.pathname.startsWith('/login')),
      page.getByRole('button', { name: 'Sign in' }).click(),
    ]);
  }

  const person = { name: 'Grace Hopper', email: '', password: 'compilers are friends', workspaceId: '' };

  /** The person of the first test; made directly when that test did not run (`jest -t`). */
  async function ensurePerson(): Promise<void> {
    if (person.email) return;
    person.email = newEmail('grace');
    const accounts = t.app.get(AccountsService);
    const { user, workspaceId } = await accounts.signUp(
      { name: person.name, email: person.email, password: person.password },
      { firstWorkspace: { tier: 'free' } },
    );
    await accounts.markEmailVerified(user.id);
    person.workspaceId = workspaceId!;
  }

  async function signedInPage(): Promise<{ context: BrowserContext; page: Page; problems: PageProblem[] }> {
    await ensurePerson();
    const opened = await open();
    await go(opened.page, opened.problems, '/login');
    await signInInBrowser(opened.page, person.email, person.password);
    await check(opened.page, opened.problems);
    return opened;
  }

  it('signs up, verifies the address through the link shown in the page, and the banner goes', async () => {
    person.email = newEmail('grace');
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/');
      expect(new URL(page.url()).pathname).toBe('/login');
      await page.getByRole('link', { name: 'Create an account' }).first().click();
      await page.waitForURL('**/signup');
      await check(page, problems);

      // A too-short password: the form comes back with the message tied to the field.
      await page.getByLabel('Your name').fill(person.name);
      await page.getByLabel('Email').fill(person.email);
      await page.getByLabel('Password').fill('short');
      await page.getByRole('button', { name: 'Create account' }).click();
      await page.waitForLoadState('load');
      await expect(page.getByLabel('Password').getAttribute('aria-invalid')).resolves.toBe('true');
      await check(page, problems, 400);
      await page.getByLabel('Password').fill(person.password);
      await Promise.all([page.waitForURL(/\/w\/[0-9a-f-]{36}$/), page.getByRole('button', { name: 'Create account' }).click()]);
      await check(page, problems);
      person.workspaceId = new URL(page.url()).pathname.split('/')[2];

      // No SMTP: the verification link is in the page (and in the mail log), and the banner asks for it.
      const banner = page.locator('.banner.warning', { hasText: 'verify your email' });
      await expect(banner.textContent()).resolves.toContain('Please verify your email address');
      const link = page.getByRole('link', { name: 'Verify my email address' });
      expect(await link.getAttribute('href')).toBe(lastMail(person.email, /verify/i).link);
      await Promise.all([page.waitForURL(/\/w\/[0-9a-f-]{36}$/), link.click()]);
      await check(page, problems);
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('Your email address is verified.');
      expect(await banner.count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it('keeps the session id from before sign-in out (fixation), and signing out makes the old cookie worthless', async () => {
    await ensurePerson();
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/login');
      const before = (await context.cookies()).find((cookie) => cookie.name === 'acs.sid');
      expect(before).toBeDefined();
      expect(before!.httpOnly).toBe(true);
      expect(before!.sameSite).toBe('Lax');
      await signInInBrowser(page, person.email, person.password);
      await check(page, problems);
      const signedIn = (await context.cookies()).find((cookie) => cookie.name === 'acs.sid');
      expect(signedIn!.value).not.toBe(before!.value);

      // Sign out through the account menu.
      await page.getByText(person.name, { exact: true }).click();
      await Promise.all([page.waitForURL('**/login?signed_out=1'), page.getByRole('button', { name: 'Sign out' }).click()]);
      await check(page, problems);
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('You are signed out.');

      // The cookie from before sign-out, in a browser of its own, opens nothing.
      const replay = await open();
      try {
        await replay.context.addCookies([signedIn!]);
        await replay.page.goto('/account');
        expect(replay.page.url()).toBe(`${t.baseUrl}/login?next=%2Faccount`);
        await check(replay.page, replay.problems);
      } finally {
        await replay.context.close();
      }
    } finally {
      await context.close();
    }
  });

  it('resets a forgotten password through the mailed link, then signs in with the new one', async () => {
    await ensurePerson();
    const { context, page, problems } = await open();
    const newPassword = 'a much better passphrase';
    try {
      await go(page, problems, '/login');
      await page.getByRole('link', { name: 'Forgot your password?' }).click();
      await page.waitForURL('**/password/forgot');
      await check(page, problems);
      await page.getByLabel('Email').fill(person.email);
      await page.getByRole('button', { name: 'Send me a link' }).click();
      await page.getByText('If an account exists for').waitFor();
      await check(page, problems);
      // Never in the page: whoever types an address must not get its reset link.
      const link = lastMail(person.email, /reset/i).link!;
      expect(await page.content()).not.toContain(link);

      await go(page, problems, link);
      await page.getByLabel('New password').fill(newPassword);
      await Promise.all([page.waitForURL('**/login?reset=1'), page.getByRole('button', { name: 'Set password' }).click()]);
      await check(page, problems);
      await signInInBrowser(page, person.email, newPassword);
      await check(page, problems);
      expect(new URL(page.url()).pathname).toMatch(/^\/w\/[0-9a-f-]{36}$/);
      person.password = newPassword;

      // The link worked once.
      await go(page, problems, link, 400);
      await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Link expired');
    } finally {
      await context.close();
    }
  });

  it('uses the account page: rename, a wrong current password refused, a password change', async () => {
    await ensurePerson();
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/login?next=%2Faccount');
      await signInInBrowser(page, person.email, person.password);
      expect(new URL(page.url()).pathname).toBe('/account');
      await check(page, problems);
      await page.getByLabel('Name').fill('Grace B. Hopper');
      // Posts from /account land back on /account: waitForURL would match before the post; wait for the next page load.
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Save' }).click()]);
      await check(page, problems);
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('Saved.');
      await expect(page.getByLabel('Name').inputValue()).resolves.toBe('Grace B. Hopper');
      person.name = 'Grace B. Hopper';

      await page.getByLabel('Current password').fill('not my password at all');
      await page.getByLabel('New password').fill('yet another passphrase');
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Change password' }).click()]);
      await expect(page.getByLabel('Current password').getAttribute('aria-invalid')).resolves.toBe('true');
      await check(page, problems, 400);

      await page.getByLabel('Current password').fill(person.password);
      await page.getByLabel('New password').fill('yet another passphrase');
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Change password' }).click()]);
      await check(page, problems);
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('Your password is changed.');
      person.password = 'yet another passphrase';
    } finally {
      await context.close();
    }
  });

  it('shows the 404 page, expired-link pages and the sign-in link page in the same layout, accessibly', async () => {
    await ensurePerson();
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/no/such/page', 404);
      await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Page not found');
      expect(await page.locator('header.site-header').count()).toBe(1);
      await go(page, problems, `/verify-email/${'x'.repeat(43)}`, 400);
      await go(page, problems, `/password/reset/${'x'.repeat(43)}`, 400);

      const user = await t.app.get(AccountsService).findByEmail(person.email);
      const token = await t.app.get(AccountsService).issueToken(user!.id, 'sign_in');
      await go(page, problems, `/sign-in/${token}`);
      // The link lands on the person's workspace (it has a password: no prompt there).
      await Promise.all([page.waitForURL(`**/w/${person.workspaceId}`), page.getByRole('button', { name: 'Continue to the dashboard' }).click()]);
      await check(page, problems);
      // Signed in: the 404 page, the workspace settings and the new-workspace form, all accessible.
      await go(page, problems, '/w/00000000-0000-4000-8000-000000000000', 404);
      await go(page, problems, `/w/${person.workspaceId}`);
      await page.getByRole('navigation', { name: 'Workspace' }).getByRole('link', { name: 'Settings' }).click();
      await page.waitForURL(`**/w/${person.workspaceId}/settings`);
      await check(page, problems);
      for (const tab of ['API keys', 'Members', 'General']) {
        await page.getByRole('navigation', { name: 'Settings' }).getByRole('link', { name: tab }).click();
        await page.waitForLoadState('load');
        await expect(page.getByRole('navigation', { name: 'Settings' }).locator('a[aria-current="page"]').textContent()).resolves.toBe(tab);
        await check(page, problems);
      }
      await go(page, problems, '/workspaces/new');
    } finally {
      await context.close();
    }
  });

  it('works at 360 px wide: no horizontal scroll on sign-in and overview, and the menus work', async () => {
    await ensurePerson();
    const context = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 360, height: 740 }, locale: 'en-US' });
    const { page, problems } = await open(context);
    // (Expressions as strings: this project compiles without the DOM library.)
    const scrollWidth = () => page.evaluate<number>('document.documentElement.scrollWidth');
    try {
      await go(page, problems, '/login');
      expect(await scrollWidth()).toBeLessThanOrEqual(360);
      await signInInBrowser(page, person.email, person.password);
      await check(page, problems);
      expect(new URL(page.url()).pathname).toMatch(/^\/w\//);
      expect(await scrollWidth()).toBeLessThanOrEqual(360);

      // Every navigation link is on screen and within the width.
      const links = page.locator('header.site-header a:visible');
      for (const box of await Promise.all((await links.all()).map((link) => link.boundingBox()))) {
        expect(box).not.toBeNull();
        expect(box!.x).toBeGreaterThanOrEqual(0);
        expect(box!.x + box!.width).toBeLessThanOrEqual(360);
      }
      // The workspace menu opens and lists the workspace; the account menu leads to the account page.
      const switcher = page.getByRole('button', { name: /^Workspace: / });
      await switcher.click();
      await expect(page.locator('#workspace-menu a[aria-current="page"]').isVisible()).resolves.toBe(true);
      const listed = await page.locator('#workspace-menu a[aria-current="page"]').boundingBox();
      expect(listed!.x).toBeGreaterThanOrEqual(0);
      expect(listed!.x + listed!.width).toBeLessThanOrEqual(360);
      await switcher.click();
      await page.getByText(person.name, { exact: true }).click();
      const account = page.getByRole('link', { name: 'Account', exact: true });
      const box = await account.boundingBox();
      expect(box!.x).toBeGreaterThanOrEqual(0);
      expect(box!.x + box!.width).toBeLessThanOrEqual(360);
      await Promise.all([page.waitForURL('**/account'), account.click()]);
      await check(page, problems);
      expect(await scrollWidth()).toBeLessThanOrEqual(360);
    } finally {
      await context.close();
    }
  });

  it('is keyboard usable: Tab from the top reaches the skip link, then the sign-in form', async () => {
    await ensurePerson();
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/login');
      // Start from the top of the document, as a keyboard user arriving does (the email field has autofocus).
      await page.evaluate('document.activeElement && document.activeElement.blur(); window.scrollTo(0, 0)');
      await page.locator('body').click({ position: { x: 1, y: 1 } });
      const focused = () =>
        page.evaluate<string>(`(() => {
          const el = document.activeElement;
          if (!el) return 'none';
          return el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') + (el.className ? '.' + el.className : '') + ':' + (el.textContent || '').trim().slice(0, 30);
        })()`);
      await page.keyboard.press('Tab');
      expect(await focused()).toBe('a.skip-link:Skip to content');
      // The skip link is visible when focused, and goes to the content.
      expect(await page.locator('a.skip-link').boundingBox()).toMatchObject({ x: expect.any(Number) });
      expect((await page.locator('a.skip-link').boundingBox())!.x).toBeGreaterThanOrEqual(0);
      await page.keyboard.press('Enter');
      const order: string[] = [];
      for (let i = 0; i < 4; i++) {
        await page.keyboard.press('Tab');
        order.push(await focused());
      }
      expect(order.slice(0, 3)).toEqual(['input#email:', 'input#password:', 'button:Sign in']);
      // And the form works from the keyboard alone.
      await page.keyboard.press('Shift+Tab');
      await page.keyboard.press('Shift+Tab');
      await page.keyboard.press('Shift+Tab');
      await page.keyboard.type(person.email);
      await page.keyboard.press('Tab');
      await page.keyboard.type(person.password);
      await Promise.all([page.waitForURL(/\/w\//), page.keyboard.press('Enter')]);
      await check(page, problems);
    } finally {
      await context.close();
    }
  });

  /** The invited member's browser, kept for the key tests. */
  let memberCookies: Cookie[] = [];
  const member = { name: 'Katherine Johnson', email: '', password: 'orbital mechanics rock' };

  it('invites a member, who accepts in another browser by signing up through the link shown to the owner', async () => {
    const owner = await signedInPage();
    try {
      const { page, problems } = owner;
      await go(page, problems, `/w/${person.workspaceId}/settings/members`);
      member.email = newEmail('katherine');
      await page.getByLabel('Email').fill(member.email);
      await page.getByLabel('Role', { exact: true }).selectOption('member');
      // The form posts from /settings/members and lands back on it: waitForURL would match the page
      // before the post (under load, axe then ran on the old page), so wait for the next page load.
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Create invitation link' }).click()]);
      await check(page, problems, 201);
      // No mail server: the owner gets the link to pass on.
      const link = (await page.locator('#invitation-link').textContent())!.trim();
      expect(link).toMatch(/\/invitations\/[A-Za-z0-9_-]{43}$/);
      expect(link).toBe(lastMail(member.email, /invited you/i).link);
      await expect(page.getByRole('cell', { name: member.email })).toBeTruthy();

      const invited = await open();
      try {
        await go(invited.page, invited.problems, link);
        await invited.page.getByRole('button', { name: 'Create an account' }).click();
        await invited.page.waitForURL('**/signup?invitation=*');
        await check(invited.page, invited.problems);
        await expect(invited.page.getByLabel('Email').inputValue()).resolves.toBe(member.email);
        await invited.page.getByLabel('Your name').fill(member.name);
        await invited.page.getByLabel('Password').fill(member.password);
        await Promise.all([
          invited.page.waitForURL(`**/w/${person.workspaceId}`),
          invited.page.getByRole('button', { name: 'Create account' }).click(),
        ]);
        await check(invited.page, invited.problems);
        await expect(invited.page.getByRole('heading', { level: 1 }).textContent()).resolves.toContain("Grace Hopper's workspace");
        memberCookies = await invited.context.cookies();
      } finally {
        await invited.context.close();
      }
      // The owner sees the new member in the list.
      await go(page, problems, `/w/${person.workspaceId}/settings/members`);
      expect(await page.getByRole('cell', { name: member.email, exact: true }).count()).toBe(1);
    } finally {
      await owner.context.close();
    }
  });

  it('creates a key in the page, calls the API with it through the OpenAI SDK, revokes it in the page, and the SDK is refused', async () => {
    const { context, page, problems } = await signedInPage();
    try {
      await go(page, problems, `/w/${person.workspaceId}/settings/keys`);
      await page.getByLabel('Name').fill('sdk check');
      await Promise.all([page.waitForLoadState('load'), page.getByRole('button', { name: 'Create key' }).click()]);
      await page.locator('#new-key').waitFor();
      await check(page, problems, 201);
      const apiKey = (await page.locator('#new-key').textContent())!.trim();
      expect(apiKey).toMatch(/^sk-[A-Za-z0-9_-]{20,}$/);

      const client = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });
      const models = await client.models.list();
      expect(models.data.length).toBeGreaterThan(0);

      // Back to the list: the secret is not there, only its prefix.
      await page.getByRole('button', { name: 'Done' }).click();
      await page.waitForURL(`**/w/${person.workspaceId}/settings/keys`);
      await check(page, problems);
      expect(await page.content()).not.toContain(apiKey);
      expect(await page.content()).toContain(apiKey.slice(0, 11));

      // Revoke (htmx, with the CSRF header; the confirm dialog accepted).
      page.once('dialog', (dialog) => void dialog.accept());
      const revokeRequest = page.waitForRequest((request) => request.method() === 'POST' && request.url().endsWith('/revoke'));
      await page.getByRole('button', { name: 'Revoke sdk check' }).click();
      const sent = (await revokeRequest).headers();
      expect(sent['hx-request']).toBe('true');
      expect(sent['x-csrf-token']).toMatch(/^[0-9a-f]{32,}$/);
      const row = page.locator('tr', { hasText: 'sdk check' });
      await row.locator('.key-status').filter({ hasText: /revoked/i }).waitFor({ timeout: 5_000 });
      await check(page, problems);

      // Refused within the key cache's few seconds.
      const deadline = Date.now() + 8_000;
      let refusal: unknown;
      while (Date.now() < deadline) {
        try {
          await client.models.list();
        } catch (error) {
          refusal = error;
          break;
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(refusal).toBeInstanceOf(OpenAI.AuthenticationError);
    } finally {
      await context.close();
    }
  });

  it('shows a member no create-key button, and refuses their direct POST with 403', async () => {
    expect(memberCookies.length).toBeGreaterThan(0);
    const context = await newContext(browser, t.baseUrl);
    try {
      await context.addCookies(memberCookies);
      const { page, problems } = await open(context);
      await go(page, problems, `/w/${person.workspaceId}/settings/keys`);
      expect(await page.getByRole('button', { name: 'Create key' }).count()).toBe(0);
      expect(await page.getByRole('button', { name: /^Revoke/ }).count()).toBe(0);
      const db = t.app.get(DataSource);
      const countKeys = async () => {
        const [{ count }]: { count: string }[] = await db.query('SELECT count(*) FROM api_keys WHERE workspace_id = $1', [person.workspaceId]);
        return Number(count);
      };
      const before = await countKeys();
      const csrf = await page.locator('input[name="_csrf"]').first().inputValue();
      const res = await page.request.post(`/w/${person.workspaceId}/settings/keys`, {
        form: { _csrf: csrf, name: 'sneaky', expires: 'never' },
        headers: { accept: 'text/html' },
        maxRedirects: 0,
      });
      expect(res.status()).toBe(403);
      expect(await countKeys()).toBe(before);
      // The token was good: without it the answer would be the CSRF refusal, not the role's.
      expect(await res.text()).toContain('This needs the admin role');
      await go(page, problems, `/w/${person.workspaceId}/settings/members`);
      expect(await page.getByRole('button', { name: /Create invitation link|Send invitation/ }).count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it('takes the README screenshot of the overview (1280 x 800, viewport only)', async () => {
    // A workspace of its own, in use: some credit, a key, a few requests (the simulator answers them).
    // Same content every run, so the committed PNG only changes when the page does.
    const accounts = t.app.get(AccountsService);
    const owner = { name: 'Ada Lovelace', email: newEmail('ada'), password: 'analytical engine notes' };
    const { user, workspaceId } = await accounts.signUp(owner, { firstWorkspace: { tier: 'free' } });
    await accounts.markEmailVerified(user.id);
    await t.app.get(WalletService).credit({
      workspaceId: workspaceId!,
      amountMillicents: 2_500_000,
      type: 'topup',
      idempotencyKey: `screenshot:${workspaceId}`,
    });
    const { apiKey } = await t.app.get(ApiKeysService).create(workspaceId!, { name: 'production server', createdBy: user.id });
    const client = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 20_000 });
    for (const question of ['Hello!', 'What can you do?', 'Summarise our plan in one line.']) {
      await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: question }] });
    }
    const { context, page, problems } = await open();
    try {
      await go(page, problems, '/login');
      await signInInBrowser(page, owner.email, owner.password);
      await check(page, problems);
      expect(new URL(page.url()).pathname).toBe(`/w/${workspaceId}`);
      expect(await page.locator('#stat-month-requests').textContent()).toBe('3');
      await page.screenshot({ path: SCREENSHOT, type: 'png', fullPage: false });
      expect(existsSync(SCREENSHOT)).toBe(true);
    } finally {
      await context.close();
    }
  });
});
