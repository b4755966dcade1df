/**
 * The first hour of a newcomer, in Debian's Chromium: the first-start sign-in link lands on
 * the Demo workspace's Overview, which asks for a password; the header's workspace switcher
 * is a button that opens from the keyboard; a document uploaded to the demo assistant answers
 * a plain question through the official `openai` SDK, the simulator (no provider key) having
 * called `file_search` for it. The steps build on each other and run in order.
 */
import OpenAI from 'openai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { createDemoWorkspaceOnFirstStart } from '../src/first-start';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { startTestApp, TestApp } from './support/test-app';

const FACT = 'The emergency generator is tested every Tuesday at 06:40 by the night porter.';
const HANDBOOK = [
  'Building handbook of the headquarters.',
  'The front desk opens at 07:30 and closes at 19:00.',
  FACT,
  'Bicycles are parked in the courtyard, never in the lobby.',
].join('\n');

describeWithBrowser('the first hour (first-start link, workspace switcher, a document answered by the simulator)', () => {
  jest.setTimeout(90_000);
  let t: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let problems: PageProblem[];
  /** From the first-start banner. */
  let banner = '';
  let demoKey = '';
  let signInLink = '';
  let workspaceId = '';
  let assistantId = '';

  beforeAll(async () => {
    // The simulator answers: the test configuration sets no provider key.
    [t, browser] = await Promise.all([startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } }), launchChromium()]);
    // The first start on this empty database, as main.ts runs it; its banner is read, not printed.
    const printed: string[] = [];
    const write = jest.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array) => {
      printed.push(String(chunk));
      return true;
    });
    try {
      await createDemoWorkspaceOnFirstStart(t.app, t.baseUrl);
    } finally {
      write.mockRestore();
    }
    banner = printed.join('');
    demoKey = banner.match(/^ {3}(sk-[A-Za-z0-9_-]+)$/m)![1];
    signInLink = banner.match(/sign in once with: (\S+)$/m)![1];
    workspaceId = banner.match(/--workspace ([0-9a-f-]{36})/)![1];
    assistantId = banner.match(/--assistant ([0-9a-f-]{36})/)![1];
    context = await newContext(browser, t.baseUrl);
    page = await context.newPage();
    problems = collectConsoleErrors(page);
  });

  afterAll(async () => {
    await t?.app.get(DocumentIngestion).idle();
    await context?.close();
    await browser?.close();
    await t?.close();
  });

  /** axe (no serious or critical violation), and no console error or CSP violation. */
  async function check(): Promise<void> {
    await page.waitForLoadState('load');
    // dashboard.js and htmx run deferred: give them their turn before judging.
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    await expectAccessible(page);
    expect(problems).toEqual([]);
  }

  it("lands the first-start link on the Demo workspace's Overview, which asks for a password", async () => {
    await page.goto(signInLink);
    await check();
    await Promise.all([page.waitForURL(`**/w/${workspaceId}`), page.getByRole('button', { name: 'Continue to the dashboard' }).click()]);
    await check();
    await expect(page.getByRole('heading', { level: 1 }).textContent()).resolves.toBe('Demo');
    await expect(page.locator('.flash.info').textContent()).resolves.toContain('You are signed in.');
    // The workspace's pages are one click away, in its navigation.
    const workspaceNav = page.getByRole('navigation', { name: 'Workspace' });
    await expect(workspaceNav.getByRole('link', { name: 'Overview' }).getAttribute('aria-current')).resolves.toBe('page');
    await expect(workspaceNav.getByRole('link', { name: 'Settings' }).getAttribute('href')).resolves.toBe(`/w/${workspaceId}/settings`);

    // The password is asked for here, and set here: the overview comes back without the prompt.
    const prompt = page.getByRole('article', { name: 'Set a password' });
    await expect(prompt.isVisible()).resolves.toBe(true);
    await expect(prompt.textContent()).resolves.toContain('owner@localhost');
    await prompt.getByLabel('New password').fill('a demo passphrase');
    await Promise.all([page.waitForEvent('load'), prompt.getByRole('button', { name: 'Set password' }).click()]);
    expect(new URL(page.url()).pathname).toBe(`/w/${workspaceId}`);
    await check();
    await expect(page.locator('.flash.success').textContent()).resolves.toContain('Your password is changed');
    await expect(page.locator('#set-password').count()).resolves.toBe(0);
  });

  it('has a workspace switcher that is a button with a name, and opens and closes from the keyboard', async () => {
    const switcher = page.getByRole('button', { name: 'Workspace: Demo' });
    const menu = page.locator('#workspace-menu');
    const demoLink = menu.getByRole('link', { name: 'Demo (owner)' });
    await expect(switcher.getAttribute('aria-expanded')).resolves.toBe('false');
    await expect(demoLink.isVisible()).resolves.toBe(false);

    // Tab order from the brand link reaches the switcher; Enter opens it, and Tab goes into the list.
    await page.getByRole('link', { name: 'Assistant Chat Service' }).focus();
    await page.keyboard.press('Tab');
    await expect(switcher.evaluate((element) => element === element.ownerDocument.activeElement)).resolves.toBe(true);
    await page.keyboard.press('Enter');
    await expect(switcher.getAttribute('aria-expanded')).resolves.toBe('true');
    await expect(demoLink.isVisible()).resolves.toBe(true);
    await expect(demoLink.getAttribute('aria-current')).resolves.toBe('page');
    await expectAccessible(page);
    await page.keyboard.press('Tab');
    await expect(demoLink.evaluate((element) => element === element.ownerDocument.activeElement)).resolves.toBe(true);

    // Escape closes it and gives the focus back to the button; Space opens it again.
    await page.keyboard.press('Escape');
    await expect(switcher.getAttribute('aria-expanded')).resolves.toBe('false');
    await expect(demoLink.isVisible()).resolves.toBe(false);
    await expect(switcher.evaluate((element) => element === element.ownerDocument.activeElement)).resolves.toBe(true);
    await page.keyboard.press(' ');
    await expect(menu.getByRole('link', { name: 'New workspace…' }).isVisible()).resolves.toBe(true);
    // A click elsewhere closes it.
    await page.getByRole('heading', { level: 1 }).click();
    await expect(switcher.getAttribute('aria-expanded')).resolves.toBe('false');
    expect(problems).toEqual([]);
  });

  it('answers a plain question from a document uploaded to the demo assistant, through the SDK, with file_search', async () => {
    await page.goto(`/w/${workspaceId}/assistants/${assistantId}`);
    await check();
    await page.getByLabel('Upload documents').setInputFiles([{ name: 'building-handbook.txt', mimeType: 'text/plain', buffer: Buffer.from(HANDBOOK) }]);
    await page.getByRole('button', { name: 'Upload', exact: true }).click();
    await page.locator('#upload-status', { hasText: 'Uploaded' }).waitFor();
    await t.app.get(DocumentIngestion).idle();

    // The demo key of the banner, the demo assistant, a question that does not name any tool.
    const client = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey: demoKey, maxRetries: 0, timeout: 20_000 });
    const completion = (await client.chat.completions.create({
      assistant_id: 'demo',
      messages: [{ role: 'user', content: 'When is the emergency generator tested?' }],
    } as never)) as OpenAI.Chat.ChatCompletion & { x_service: { tools_used: string[]; iterations: number } };
    expect(completion.x_service).toMatchObject({ tools_used: ['file_search'], iterations: 2 });
    const answer = completion.choices[0].message.content!;
    expect(answer).toContain(FACT);
    expect(answer).toContain('building-handbook.txt');
    expect(answer).not.toContain('You said');

    // Small talk is not searched: the simulator's usual answer, one iteration, no tool.
    const hello = (await client.chat.completions.create({
      assistant_id: 'demo',
      messages: [{ role: 'user', content: 'Hello!' }],
    } as never)) as OpenAI.Chat.ChatCompletion & { x_service: { tools_used: string[]; iterations: number } };
    expect(hello.x_service).toMatchObject({ tools_used: [], iterations: 1 });
    expect(hello.choices[0].message.content).toContain('simulator');
  });

  it('says on the usage and billing pages why the ledger shows whole millicents, with a link to the docs', async () => {
    for (const path of [`/w/${workspaceId}/usage`, `/w/${workspaceId}/billing`]) {
      await page.goto(path);
      await check();
      const note = page.locator('#cost-rounding');
      await expect(note.textContent()).resolves.toMatch(/charged whole millicents .* carries the rest to the next request:\s+a request that cost 259\.6 millicents shows as \$0\.0026 in usage and as \$0\.00259 in the ledger/);
      await expect(note.getByRole('link', { name: 'How requests are charged' }).getAttribute('href')).resolves.toBe('/docs#/Wallet');
    }
    // The link's target says it too.
    const openapi = (await (await page.request.get('/docs/openapi.json')).json()) as { tags: { name: string; description: string }[] };
    expect(openapi.tags.find((tag) => tag.name === 'Wallet')?.description).toContain('carries the fraction of a cost to the next request');
  });

  it("shows the widget settings' preview below its heading and text, not over them", async () => {
    await page.goto(`/w/${workspaceId}/assistants/${assistantId}/widget`);
    await check();
    const panel = page.locator('#widget-preview [data-acs-widget] .panel');
    await panel.waitFor({ state: 'visible' });
    const intro = await page.locator('#widget-preview').locator('xpath=preceding-sibling::p').boundingBox();
    const preview = (await page.locator('#widget-preview').boundingBox())!;
    const drawn = (await panel.boundingBox())!;
    expect(drawn.y).toBeGreaterThanOrEqual(intro!.y + intro!.height);
    // Inside the preview's frame, both ways.
    expect(drawn.y).toBeGreaterThanOrEqual(preview.y);
    expect(drawn.y + drawn.height).toBeLessThanOrEqual(preview.y + preview.height);
    expect(drawn.x).toBeGreaterThanOrEqual(preview.x);
    expect(drawn.x + drawn.width).toBeLessThanOrEqual(preview.x + preview.width);
  });
});
