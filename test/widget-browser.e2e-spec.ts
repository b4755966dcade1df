import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { WalletService } from '../src/wallet/wallet.service';
import { defaultWidgetSettings } from '../src/widget/widget-settings';
import { WidgetsService } from '../src/widget/widgets.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, PageProblem, screenshot } from './support/browser';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

// What the functions given to page.evaluate use, in the browser (the tests compile without the DOM library).
declare const document: any;
declare const window: any;
declare const localStorage: any;
declare function getComputedStyle(element: any): any;

const ANSWER = 'We ship to **Norway** in 3 days:\n\n- standard delivery is free\n- express costs €9, see [our prices](https://shop.example/prices)';
/** What a model could be made to write: it must stay text. */
const HOSTILE_ANSWER = 'Sure: <img src=x onerror="window.pwned=1"> [click](javascript:window.pwned=2)';

/** The host page's CSS at its worst: every element reset and restyled, with !important. */
const AGGRESSIVE_CSS = `
  * { all: unset !important; font-size: 40px !important; color: red !important; font-family: "Comic Sans MS", fantasy !important;
      line-height: 3 !important; letter-spacing: 5px !important; box-sizing: content-box !important; }
  div, section, button, p, h2, form, textarea { display: inline !important; position: static !important; padding: 30px !important;
      margin: 30px !important; background: lime !important; border: 5px dotted blue !important; width: 900px !important; }
  [data-acs-widget] { display: none !important; position: absolute !important; left: -9999px !important; opacity: 0 !important; }
  html, body { display: block !important; }
`;

/** A page of another website, embedding the widget with its one tag. */
function hostPage(scriptTag: string, options: { css?: string } = {}): string {
  return `<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Nordic Shop</title>${options.css ? `<style>${options.css}</style>` : ''}</head>
<body><main><h1>Nordic Shop</h1><p>Warm socks, shipped fast.</p></main>${scriptTag}</body></html>`;
}

/** A website on its own origin (a port of 127.0.0.1), serving `html()` at every path. */
async function startSite(html: (path: string) => string, headers: (path: string) => Record<string, string> = () => ({})): Promise<{ origin: string; server: Server }> {
  const server = createServer((req, res) => {
    res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', ...headers(req.url ?? '/') });
    res.end(html(req.url ?? '/'));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return { origin: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, server };
}

/** Computed styles of the widget's parts, read inside its shadow root. */
async function widgetStyles(page: Page): Promise<Record<string, Record<string, string>>> {
  return page.evaluate(() => {
    const root = document.querySelector('[data-acs-widget]')!.shadowRoot!;
    const properties = ['font-size', 'font-family', 'color', 'background-color', 'display', 'position', 'padding-top', 'margin-top', 'width', 'height', 'border-top-style', 'line-height', 'letter-spacing', 'visibility', 'opacity'];
    const result: Record<string, Record<string, string>> = {};
    for (const selector of ['.launcher', '.panel', '.head h2', '.log', '.msg.user', '.msg.assistant', 'textarea', 'form button', '.branding a']) {
      const element = root.querySelector(selector);
      if (!element) throw new Error(`no ${selector} in the widget`);
      const style = getComputedStyle(element);
      result[selector] = Object.fromEntries(properties.map((property) => [property, style.getPropertyValue(property)]));
    }
    const host = document.querySelector('[data-acs-widget]')!;
    result.host = { display: getComputedStyle(host).display, position: getComputedStyle(host).position, opacity: getComputedStyle(host).opacity };
    return result;
  });
}

/** Polls `check` until it holds (10 s at most). */
async function soon(what: string, check: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`Not within ${timeoutMs} ms: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

/** The text of the widget's shadow root parts (Playwright's locators pierce open shadow roots). */
const inWidget = (page: Page, selector: string) => page.locator(`[data-acs-widget] ${selector}`);

/**
 * The widget in Chromium, embedded with its one tag in pages of other origins (small node
 * servers on 127.0.0.1), against the real service and a fake OpenAI that streams slowly.
 */
describeWithBrowser('widget in a browser', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let browser: Browser;
  let workspace: TestWorkspace;
  let publicId: string;
  /** A widget of a workspace whose wallet is empty. */
  let brokeId: string;
  /** A widget whose daily cap no message fits in. */
  let cappedId: string;
  let sourcesId: string;
  let allowed: { origin: string; server: Server };
  let refused: { origin: string; server: Server };
  let context: BrowserContext;
  let page: Page;
  let problems: PageProblem[];

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
    });
    workspace = await t.createWorkspace({ tier: 'free', balanceMillicents: 100_000 });
    const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: 'Shop helper', model: 'gpt-4o-mini' });
    const tag = (id = publicId) => `<script src="${t.baseUrl}/widget.js" data-widget="${id}" async></script>`;
    allowed = await startSite(
      (path) =>
        hostPage(tag(path.startsWith('/broke') ? brokeId : path.startsWith('/capped') ? cappedId : path.startsWith('/sources') ? sourcesId : publicId), {
          css: path.startsWith('/aggressive') ? AGGRESSIVE_CSS : undefined,
        }),
      // A strict page: scripts and connections to the service only, no inline style or script at all.
      (path): Record<string, string> => (path.startsWith('/strict') ? { 'content-security-policy': `default-src 'none'; script-src ${t.baseUrl}; connect-src ${t.baseUrl}; style-src 'self'` } : {}),
    );
    refused = await startSite(() => hostPage(tag()));
    const widget = await t.app.get(WidgetsService).save(workspace.id, assistant.id, {
      ...defaultWidgetSettings('Shop helper'),
      title: 'Nordic Shop help',
      greeting: 'Hello! Ask me about **shipping**.',
      placeholder: 'Ask about your order…',
      enabled: true,
      allowedOrigins: [allowed.origin],
    });
    publicId = widget.publicId;
    const broke = await t.createWorkspace({ tier: 'free', balanceMillicents: 0 });
    const brokeAssistant = await t.app.get(AssistantsService).create(broke.id, { name: 'Broke', model: 'gpt-4o-mini' });
    brokeId = (await t.app.get(WidgetsService).save(broke.id, brokeAssistant.id, { ...defaultWidgetSettings('Broke shop'), enabled: true, allowedOrigins: [allowed.origin] })).publicId;
    const cappedWorkspace = await t.createWorkspace({ tier: 'free', balanceMillicents: 100_000 });
    const cappedAssistant = await t.app.get(AssistantsService).create(cappedWorkspace.id, { name: 'Capped', model: 'gpt-4o-mini' });
    cappedId = (
      await t.app.get(WidgetsService).save(cappedWorkspace.id, cappedAssistant.id, {
        ...defaultWidgetSettings('Capped shop'),
        enabled: true,
        allowedOrigins: [allowed.origin],
        dailyCapMillicents: 1,
      })
    ).publicId;
    // A widget whose owner shows the sources of answers, on an assistant answering from a document.
    const library = await t.createWorkspace({ tier: 'team', balanceMillicents: 100_000 });
    const librarian = await t.app.get(AssistantsService).create(library.id, { name: 'Librarian', model: 'gpt-4o-mini', tools: ['file_search'] });
    await t.app.get(DocumentsService).add({ workspaceId: library.id, assistantId: librarian.id, fileName: 'shipping.md', data: Buffer.from('We ship to Norway in 3 days.') });
    sourcesId = (
      await t.app.get(WidgetsService).save(library.id, librarian.id, { ...defaultWidgetSettings('Library'), enabled: true, allowedOrigins: [allowed.origin], showSources: true })
    ).publicId;
    browser = await launchChromium();
    context = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' });
    page = await context.newPage();
    problems = collectConsoleErrors(page);
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await upstream?.close();
    await new Promise((resolve) => allowed?.server.close(resolve));
    await new Promise((resolve) => refused?.server.close(resolve));
  });

  const launcher = () => page.getByRole('button', { name: 'Open chat: Nordic Shop help' });
  const activeId = () => page.evaluate(() => document.querySelector('[data-acs-widget]')?.shadowRoot?.activeElement?.id ?? null);

  it('chats on an allowed website: launcher, keyboard, a streamed answer rendered as safe Markdown, charged to the wallet', async () => {
    await page.goto(allowed.origin);
    await launcher().click();
    await inWidget(page, '.panel').waitFor({ state: 'visible' });
    expect(await activeId()).toBe('acs-input');
    expect(await inWidget(page, '.msg.assistant').first().innerHTML()).toBe('<p>Hello! Ask me about <strong>shipping</strong>.</p>');
    expect(await page.getByLabel('Your message').getAttribute('placeholder')).toBe('Ask about your order…');

    upstream.script({ kind: 'text', text: ANSWER, usage: { prompt_tokens: 1_000, completion_tokens: 100 }, chunkDelayMs: 250 });
    const before = (await t.app.get(WalletService).balance(workspace.id)).balanceMillicents;
    await page.getByLabel('Your message').fill('Do you ship to Norway?');
    await page.keyboard.press('Enter');
    const answer = inWidget(page, '.msg.assistant').nth(1);
    // Streamed: part of the answer is on screen before the rest has arrived.
    await answer.waitFor();
    const partial = await answer.textContent();
    expect(partial!.length).toBeGreaterThan(0);
    expect(partial!.length).toBeLessThan(ANSWER.length - 20);
    // Announced once, whole, to screen readers (the log itself is not live, so the words are not read one by one).
    await soon('the answer announced', async () => (await inWidget(page, '.sr[aria-live="polite"]').textContent()) === `Assistant: ${ANSWER}`);
    expect(await answer.innerHTML()).toBe(
      '<p>We ship to <strong>Norway</strong> in 3 days:</p><ul><li>standard delivery is free</li>' +
        '<li>express costs €9, see <a href="https://shop.example/prices" rel="noopener noreferrer nofollow" target="_blank">our prices</a></li></ul>',
    );
    expect(await inWidget(page, '.msg.user').textContent()).toBe('Do you ship to Norway?');
    expect(await activeId()).toBe('acs-input');

    for (let i = 0; i < 50 && (await t.app.get(WalletService).balance(workspace.id)).balanceMillicents === before; i++) await page.waitForTimeout(100);
    expect((await t.app.get(WalletService).balance(workspace.id)).balanceMillicents).toBe(before - 21);
    // The visitor token the service issued, kept per widget; its usage record names the visitor it stands for.
    const token: string = await page.evaluate((key) => localStorage.getItem(key), `acs-widget-visitor:${publicId}`);
    expect(token).toMatch(/^vt_[0-9a-f]{32}\./);
    const records = await t.app.get(DataSource).query(`SELECT source, user_id FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
    expect(records).toEqual([{ source: 'widget', user_id: `v_${token.slice(3, 35)}` }]);

    // Escape closes the panel and gives the focus back to the launcher.
    await page.keyboard.press('Escape');
    await inWidget(page, '.panel').waitFor({ state: 'hidden' });
    expect(await page.evaluate(() => document.querySelector('[data-acs-widget]')!.shadowRoot!.activeElement?.className)).toBe('launcher');
    expect(await launcher().getAttribute('aria-expanded')).toBe('false');
  });

  it('keeps the conversation across a reload', async () => {
    await page.reload();
    await launcher().click();
    await soon('three messages', async () => (await inWidget(page, '.msg').count()) === 3);
    expect(await inWidget(page, '.msg').allTextContents()).toEqual([
      'Hello! Ask me about shipping.',
      'Do you ship to Norway?',
      'We ship to Norway in 3 days:standard delivery is freeexpress costs €9, see our prices',
    ]);
  });

  it('shows branding on the free tier, and none once the tier removes it; a downgrade brings it back', async () => {
    const branding = inWidget(page, '.branding a');
    expect(await branding.textContent()).toBe('Powered by Assistant Chat Service');
    expect(await branding.getAttribute('href')).toBe(`${t.baseUrl}/`);
    expect(await branding.getAttribute('rel')).toContain('noopener');

    await t.app.get(WorkspacesService).setTier(workspace.id, 'pro');
    await page.reload();
    await launcher().click();
    await soon('three messages', async () => (await inWidget(page, '.msg').count()) === 3);
    expect(await inWidget(page, '.branding a').count()).toBe(0);
    expect(await page.getByText('Powered by Assistant Chat Service').count()).toBe(0);

    await t.app.get(WorkspacesService).setTier(workspace.id, 'free');
    await page.reload();
    await launcher().click();
    await inWidget(page, '.branding a').waitFor({ state: 'visible' });
  });

  it('has no serious accessibility violations inside the widget, and writes docs/widget.png', async () => {
    await expectAccessible(page, 'the widget, open, on a host page');
    await screenshot(page, 'docs/widget.png');
    expect(problems).toEqual([]);
  });

  it('is not changed by the host page\'s aggressive CSS, nor changes the host page', async () => {
    const plain = await widgetStyles(page);
    const hostHeading = await page.evaluate(() => getComputedStyle(document.querySelector('h1')!).fontSize);
    const aggressive = await context.newPage();
    const aggressiveProblems = collectConsoleErrors(aggressive);
    await aggressive.goto(`${allowed.origin}/aggressive`);
    await aggressive.getByRole('button', { name: 'Open chat: Nordic Shop help' }).click();
    await soon('three messages', async () => (await inWidget(aggressive, '.msg').count()) === 3);
    const styled = await widgetStyles(aggressive);
    expect(styled).toEqual(plain);
    expect(plain['.head h2']['font-size']).toBe('17px');
    expect(plain.host).toEqual({ display: 'block', position: 'fixed', opacity: '1' });
    await aggressive.close();
    expect(aggressiveProblems).toEqual([]);

    // And the widget's styles stay in its shadow root: the host page looks the same without it.
    const without = await context.newPage();
    await without.setContent(hostPage(''));
    expect(await without.evaluate(() => getComputedStyle(document.querySelector('h1')!).fontSize)).toBe(hostHeading);
    await without.close();
  });

  it('works on a page whose CSP allows the service for scripts and connections only (no inline style)', async () => {
    const strict = await context.newPage();
    const strictProblems = collectConsoleErrors(strict);
    await strict.goto(`${allowed.origin}/strict`);
    await strict.getByRole('button', { name: 'Open chat: Nordic Shop help' }).click();
    await soon('the transcript', async () => (await inWidget(strict, '.msg').count()) >= 3);
    // Styled: its stylesheet was not blocked.
    expect(await strict.evaluate(() => getComputedStyle(document.querySelector('[data-acs-widget]')!.shadowRoot!.querySelector('.launcher')).borderRadius)).toBe('50%');
    expect(strictProblems).toEqual([]);
    await strict.close();
  });

  it('refuses a website that is not allowed: nothing usable, a clear message, no error of its own', async () => {
    const other = await context.newPage();
    const otherProblems = collectConsoleErrors(other);
    await other.goto(refused.origin);
    const notice = other.getByText('This chat is not available on this website.');
    await notice.waitFor({ state: 'visible' });
    // In the widget's own font, not the browser's default serif that the host's reset leaves.
    await expect(notice.evaluate((element) => getComputedStyle(element).fontFamily)).resolves.toMatch(/^system-ui,/);
    expect(await inWidget(other, 'button').count()).toBe(0);
    expect(await inWidget(other, 'textarea').count()).toBe(0);
    // Chromium itself reports the refused CORS request on the console; the widget throws nothing and logs nothing.
    const ownProblems = otherProblems.filter((problem) => !/CORS policy|net::ERR_FAILED|Failed to load resource/.test(problem.text));
    expect(ownProblems).toEqual([]);
    expect(otherProblems.filter((problem) => problem.kind === 'page-error')).toEqual([]);
    await other.close();
  });

  it('shows what a model writes as text: no markup of its own, no script, no javascript: link', async () => {
    upstream.script({ kind: 'text', text: HOSTILE_ANSWER, usage: { prompt_tokens: 10, completion_tokens: 10 } });
    await page.getByLabel('Your message').fill('Show me a picture');
    await page.getByRole('button', { name: 'Send' }).click();
    const answer = inWidget(page, '.msg.assistant').nth(2);
    await soon('the hostile answer', async () => (await answer.count()) === 1 && (await answer.textContent()) === HOSTILE_ANSWER);
    expect(await answer.innerHTML()).toBe('<p>Sure: &lt;img src=x onerror="window.pwned=1"&gt; [click](javascript:window.pwned=2)</p>');
    expect(await page.evaluate(() => document.querySelector('[data-acs-widget]')!.shadowRoot!.querySelectorAll('img, script').length)).toBe(0);
    await page.waitForTimeout(300);
    expect(await page.evaluate(() => window.pwned)).toBeUndefined();
    expect(problems).toEqual([]);
  });

  it('starts a new chat on request, and tells the visitor plainly when the workspace cannot pay', async () => {
    await page.getByRole('button', { name: 'New chat' }).click();
    await soon('only the greeting', async () => (await inWidget(page, '.msg').count()) === 1);
    await page.reload();
    await launcher().click();
    await soon('the greeting', async () => (await inWidget(page, '.msg').count()) === 1);
    expect(await inWidget(page, '.msg').textContent()).toBe('Hello! Ask me about shipping.');

    const broke = await context.newPage();
    const brokeProblems = collectConsoleErrors(broke);
    await broke.goto(`${allowed.origin}/broke`);
    await broke.getByRole('button', { name: 'Open chat: Broke shop' }).click();
    await broke.getByLabel('Your message').fill('Hello?');
    await broke.keyboard.press('Enter');
    const status = inWidget(broke, '.status.error');
    await status.waitFor({ state: 'visible' });
    expect(await status.textContent()).toBe('This chat is not available at the moment. Please try again later.');
    expect(await inWidget(broke, '.sr[aria-live="polite"]').textContent()).toBe('This chat is not available at the moment. Please try again later.');
    // The refusal is an HTTP 402 the page reads; Chromium reports the status of that fetch, nothing else is logged.
    expect(brokeProblems.filter((problem) => !/status of 402/.test(problem.text))).toEqual([]);
    await broke.close();
  });

  it('replaces a visitor id of the old widget.js and a token the service refuses, and tells a visitor when the day\'s cap is spent', async () => {
    const capped = await context.newPage();
    const cappedProblems = collectConsoleErrors(capped);
    await capped.goto(`${allowed.origin}/capped`);
    // What an earlier widget.js stored (an id it made up), and a token whose signature is not the service's.
    const forged = `vt_${'0'.repeat(32)}.zzzzzz.AAAAAAAAAAA.${'A'.repeat(22)}`;
    await capped.evaluate(
      ([id, token]) => {
        localStorage.setItem('acs-widget-visitor', `v_${'1'.repeat(32)}`);
        localStorage.setItem(`acs-widget-visitor:${id}`, token);
      },
      [cappedId, forged],
    );
    await capped.getByRole('button', { name: 'Open chat: Capped shop' }).click();
    await capped.getByLabel('Your message').fill('Hello?');
    await capped.keyboard.press('Enter');
    const status = inWidget(capped, '.status.error');
    await status.waitFor({ state: 'visible' });
    expect(await status.textContent()).toBe('This chat is resting for today. Please try again tomorrow.');
    // The refused token was replaced by one the service issued (a new visitor: the forged one names nobody).
    const stored: string = await capped.evaluate((id) => localStorage.getItem(`acs-widget-visitor:${id}`), cappedId);
    expect(stored).toMatch(/^vt_[0-9a-f]{32}\./);
    expect(stored).not.toBe(forged);
    // Chromium reports the statuses of the refused fetches (401 for the forged token, 402 for the cap); nothing else is logged.
    expect(cappedProblems.filter((problem) => !/status of 40[12]/.test(problem.text))).toEqual([]);
    await capped.close();
  });

  it('lists the sources an answer cites under it when the owner shows them, and again after a reload', async () => {
    const visitor = await browser.newContext({ viewport: { width: 1280, height: 800 }, locale: 'en-US' });
    const tab = await visitor.newPage();
    const tabProblems = collectConsoleErrors(tab);
    await tab.goto(`${allowed.origin}/sources`);
    await tab.getByRole('button', { name: 'Open chat: Library' }).click();
    upstream.script(
      { kind: 'tool_calls', calls: [{ id: 'call_fs', name: 'file_search', arguments: '{"query":"Norway"}' }] },
      { kind: 'text', text: 'In 3 days [1].' },
    );
    await tab.getByLabel('Your message').fill('Do you ship to Norway?');
    await tab.keyboard.press('Enter');
    await soon('the sources', async () => (await inWidget(tab, '.sources li').count()) === 1);
    expect(await inWidget(tab, '.sources li').allTextContents()).toEqual(['shipping.md']);
    expect(await inWidget(tab, '.msg.assistant').last().textContent()).toBe('In 3 days [1].');
    await tab.reload();
    await tab.getByRole('button', { name: 'Open chat: Library' }).click();
    await soon('the sources after a reload', async () => (await inWidget(tab, '.sources li').count()) === 1);
    expect(await inWidget(tab, '.sources li').allTextContents()).toEqual(['shipping.md']);
    await expectAccessible(tab, 'the widget with sources');
    expect(tabProblems).toEqual([]);
    await visitor.close();
  });

  it('shows a live preview on the dashboard page, under its CSP, following the form', async () => {
    const accounts = t.app.get(AccountsService);
    const password = 'a long enough passphrase';
    const { user, workspaceId } = await accounts.signUp({ name: 'Wendy', email: 'wendy@example.com', password }, { firstWorkspace: { tier: 'pro' } });
    await accounts.markEmailVerified(user.id);
    const assistant = await t.app.get(AssistantsService).create(workspaceId!, { name: 'Desk', model: 'gpt-4o-mini' });
    const dashboard = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 900 }, locale: 'en-US' });
    const owner = await dashboard.newPage();
    const ownerProblems = collectConsoleErrors(owner);
    await owner.goto('/login');
    await owner.getByLabel('Email').fill('wendy@example.com');
    await owner.getByLabel('Password').fill(password);
    await Promise.all([owner.waitForURL((url) => !url.pathname.startsWith('/login')), owner.getByRole('button', { name: 'Sign in' }).click()]);
    await owner.goto(`/w/${workspaceId}/assistants/${assistant.id}/widget`);
    await soon('the title Desk', async () => /^Desk$/.test((await inWidget(owner, '.head h2').textContent()) ?? ''));
    await owner.getByLabel('Title').fill('Front desk');
    await soon('the title Front desk', async () => /^Front desk$/.test((await inWidget(owner, '.head h2').textContent()) ?? ''));
    await owner.getByLabel('Theme').selectOption('dark');
    await soon('the dark theme', async () => /dark/.test((await inWidget(owner, '.acs').getAttribute('class')) ?? ''));
    // pro removes branding, in the preview too.
    expect(await inWidget(owner, '.branding a').count()).toBe(0);
    await expectAccessible(owner, 'the widget page with its preview');
    expect(ownerProblems).toEqual([]);
    await dashboard.close();
  });
});

