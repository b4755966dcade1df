/**
 * The assistants' pages in a real browser (Debian's Chromium through playwright-core): a
 * person creates an assistant with file_search (the slug follows the name as they type),
 * uploads a PDF and a DOCX made in the test through the progress-bar upload, watches the
 * list turn them ready, and the same assistant then answers through the official `openai`
 * SDK with `assistant_id`, from a fact only the PDF holds. A scanned PDF says it needs OCR;
 * hobby's maxAssistants shows its message; deletion asks first. Every page passes axe and
 * shows no console error or CSP violation. Takes docs/assistant-editor.png.
 */
import * as path from 'node:path';
import OpenAI from 'openai';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { AccountsService } from '../src/accounts/accounts.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, PageProblem } from './support/browser';
import { makeDocx, makePdf, makeScannedPdf } from './support/document-files';
import { startTestApp, TestApp } from './support/test-app';

const SCREENSHOT = path.join(__dirname, '..', 'docs', 'assistant-editor.png');
const PDF_FACT = 'The emergency generator is tested every Tuesday at 06:40 by the night porter.';

describeWithBrowser('assistants and documents in the browser', () => {
  jest.setTimeout(120_000);
  let t: TestApp;
  let browser: Browser;
  const checked: string[] = [];

  beforeAll(async () => {
    [t, browser] = await Promise.all([startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } }), launchChromium()]);
  });
  afterAll(async () => {
    console.log(`assistant pages checked with axe (${checked.length}): ${checked.join('; ')}`);
    await t?.app.get(DocumentIngestion).idle();
    await browser?.close();
    await t?.close();
  });

  /** axe once per page and state, and no console error or CSP violation (but the expected status line). */
  async function check(page: Page, problems: PageProblem[], expectedStatus = 200): Promise<void> {
    await page.waitForLoadState('load');
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    const pattern = new URL(page.url()).pathname.replace(/[0-9a-f-]{36}/g, ':id');
    const state = await page.evaluate<string>(
      "['.flash', '.banner', '[aria-invalid=\"true\"]', 'table', '#documents-table tr', 'fieldset[disabled]'].map((s) => document.querySelectorAll(s).length).join()",
    );
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

  let people = 0;
  /** A verified person owning a workspace of `tier`, signed in in a fresh browser context. */
  async function signedIn(tier: 'pro' | 'hobby', role?: { memberOf: string }, name = `Person ${people + 1}`) {
    const email = `person-${++people}-${Date.now().toString(36)}@example.com`;
    const password = 'a long enough passphrase';
    const accounts = t.app.get(AccountsService);
    const { user, workspaceId } = await accounts.signUp({ name, email, password }, { firstWorkspace: { tier } });
    await accounts.markEmailVerified(user.id);
    if (role) {
      const { MembersService } = await import('../src/accounts/members.service');
      const members = t.app.get(MembersService);
      const owner = (await members.members(role.memberOf)).find((m) => m.role === 'owner')!;
      const invitation = await members.invite(role.memberOf, email, 'member', owner.userId);
      await members.acceptInvitation(invitation.token, user.id);
    }
    const context: BrowserContext = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 900 }, locale: 'en-US' });
    const page = await context.newPage();
    const problems = collectConsoleErrors(page);
    await page.goto('/login');
    await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(password);
    await Promise.all([page.waitForURL((url) => !url.pathname.startsWith('/login')), page.getByRole('button', { name: 'Sign in' }).click()]);
    return { context, page, problems, workspaceId: role ? role.memberOf : workspaceId! };
  }

  /** Waits until the list has `count` documents, none processing (htmx polls the list every 2 s). */
  async function waitUntilRead(page: Page, count: number): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const statuses = await page.locator('#documents-table tbody tr').evaluateAll((rows) => rows.map((row) => row.getAttribute('data-status')));
      if (statuses.length === count && !statuses.includes('processing')) return;
      if (Date.now() > deadline) throw new Error(`documents after 30 s: ${statuses.join(', ')}`);
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }

  let workspaceId = '';
  let assistantId = '';

  it('creates an assistant with file_search, uploads a PDF and a DOCX, and the SDK answers from the PDF', async () => {
    const { context, page, problems, workspaceId: id } = await signedIn('pro', undefined, 'Grace Hopper');
    workspaceId = id;
    try {
      await page.goto(`/w/${workspaceId}/assistants`);
      await check(page, problems);
      await expect(page.locator('#no-assistants').textContent()).resolves.toContain('No assistants yet');
      await page.getByRole('button', { name: 'Create your first assistant' }).click();
      await page.waitForURL('**/assistants/new');
      await check(page, problems);

      // A slug the service refuses comes back as the field's error, tied to it for screen readers.
      await page.getByLabel('Name', { exact: true }).fill('Facilities');
      await page.getByLabel('Slug').fill('Not A Slug');
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Create assistant' }).click()]);
      await check(page, problems, 400);
      await expect(page.getByLabel('Slug').getAttribute('aria-invalid')).resolves.toBe('true');
      await expect(page.locator('#assistant-slug-error').textContent()).resolves.toContain('slug must be lowercase letters and digits');

      // The slug follows the name until one is typed (emptied, it follows again).
      await page.getByLabel('Slug').fill('');
      await page.getByLabel('Name', { exact: true }).fill('Facilities Desk (HQ)');
      await expect(page.getByLabel('Slug').inputValue()).resolves.toBe('facilities-desk-hq');
      await page.getByLabel('Description').fill('Answers staff questions about the building.');
      await page.getByLabel('System prompt').fill(
        'You are the facilities desk of our headquarters.\nAnswer from the building handbook (use file_search) and say which document you used.\nBe brief and friendly.',
      );
      await page.getByLabel('Model', { exact: true }).selectOption('gpt-4o-mini');
      await page.getByLabel('Temperature').fill('0.2');
      await expect(page.getByRole('switch', { name: /file_search/ }).isChecked()).resolves.toBe(true);
      await Promise.all([page.waitForURL(/\/assistants\/[0-9a-f-]{36}$/), page.getByRole('button', { name: 'Create assistant' }).click()]);
      await check(page, problems);
      assistantId = new URL(page.url()).pathname.split('/').pop()!;
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('assistant_id "facilities-desk-hq"');
      await expect(page.locator('#assistant-uuid').textContent()).resolves.toBe(assistantId);
      await expect(page.locator('#snippet-node').textContent()).resolves.toContain(`baseURL: '${t.baseUrl}/v1'`);

      // Two files at once, through assistants.js (XHR with a progress bar): the panel comes back without a page load.
      await page.getByLabel('Upload documents').setInputFiles([
        { name: 'building-handbook.pdf', mimeType: 'application/pdf', buffer: await makePdf([['Building handbook of the headquarters.', PDF_FACT]]) },
        {
          name: 'visitors.docx',
          mimeType: 'application/vnd.openxmlformats-officedocument.wordprocessingml.document',
          buffer: await makeDocx(['Visitors sign in at the front desk and wear a badge.']),
        },
      ]);
      const uploaded = page.waitForResponse((response) => response.url().endsWith('/documents') && response.request().method() === 'POST');
      await page.getByRole('button', { name: 'Upload', exact: true }).click();
      expect((await uploaded).status()).toBe(200);
      await page.locator('#upload-status', { hasText: 'Uploaded: the list below shows each file being read.' }).waitFor();
      await expect(page.locator('#upload-progress').isHidden()).resolves.toBe(true);
      await waitUntilRead(page, 2);
      const statuses = await page.locator('#documents-table tbody tr').evaluateAll((rows) => rows.map((row) => row.textContent!.replace(/\s+/g, ' ').trim()));
      expect(statuses[0]).toMatch(/^building-handbook\.pdf \d+(\.\d)? (KB|bytes) 1 \(800 \/ 400\) [a-z]+ Ready/);
      expect(statuses[1]).toMatch(/^visitors\.docx \d+(\.\d)? (KB|bytes) 1 \(800 \/ 400\) [a-z]+ Ready/);
      await check(page, problems);

      // The README's screenshot: the filled editor (opened again, without the message), 1280 x 900 from its heading.
      await page.reload();
      await check(page, problems);
      const heading = await page.locator('h1').boundingBox();
      await page.screenshot({ path: SCREENSHOT, type: 'png', fullPage: true, clip: { x: 0, y: Math.max(0, heading!.y - 24), width: 1280, height: 900 } });

      // The same assistant through the official SDK, with a key of the workspace and some credit.
      const { apiKey } = await t.app.get(ApiKeysService).create(workspaceId, 'browser test');
      await t.app.get(WalletService).credit({ workspaceId, amountMillicents: 1_000_000, type: 'topup', idempotencyKey: `browser-assistants-${workspaceId}` });
      const client = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 20_000 });
      const completion = (await client.chat.completions.create({
        assistant_id: 'facilities-desk-hq',
        messages: [{ role: 'user', content: 'Use file_search: when is the emergency generator tested?' }],
      } as never)) as OpenAI.Chat.ChatCompletion & { x_service: { tools_used: string[]; iterations: number } };
      expect(completion.x_service).toMatchObject({ tools_used: ['file_search'], iterations: 2 });
      expect(completion.choices[0].message.content).toContain('every Tuesday at 06:40');
      expect(completion.choices[0].message.content).toContain('building-handbook.pdf');
    } finally {
      await context.close();
    }
  });

  it('a scanned PDF fails with the reason, and a document is deleted after confirming', async () => {
    const { context, page, problems } = await ownerPage();
    try {
      await page.getByLabel('Upload documents').setInputFiles([{ name: 'scan.pdf', mimeType: 'application/pdf', buffer: await makeScannedPdf() }]);
      await page.getByRole('button', { name: 'Upload', exact: true }).click();
      await waitUntilRead(page, 3);
      const scanRow = page.locator('#documents-table tbody tr', { hasText: 'scan.pdf' });
      await expect(scanRow.getAttribute('data-status')).resolves.toBe('failed');
      await expect(scanRow.textContent()).resolves.toContain('it looks like a scanned PDF');
      await expect(scanRow.textContent()).resolves.toContain('Scanned PDFs need OCR');
      await check(page, problems);

      page.once('dialog', (dialog) => void dialog.accept());
      await scanRow.getByRole('button', { name: 'Delete scan.pdf' }).click();
      await page.locator('#documents-panel .flash.success', { hasText: 'Deleted scan.pdf' }).waitFor();
      await expect(page.locator('#documents-panel .flash.success').textContent()).resolves.toContain('Deleted scan.pdf');
      expect(await page.locator('#documents-table tbody tr').count()).toBe(2);
      await check(page, problems);
    } finally {
      await context.close();
    }
  });

  it('a member sees the settings read-only', async () => {
    const { context, page, problems } = await signedIn('pro', { memberOf: workspaceId });
    try {
      await page.goto(`/w/${workspaceId}/assistants/${assistantId}`);
      await check(page, problems);
      await expect(page.getByLabel('Name', { exact: true }).isDisabled()).resolves.toBe(true);
      expect(await page.locator('#upload-form').count()).toBe(0);
    } finally {
      await context.close();
    }
  });

  it("hobby's maxAssistants: the third assistant is refused with the message", async () => {
    const { context, page, problems, workspaceId: hobby } = await signedIn('hobby');
    try {
      for (const name of ['First', 'Second']) await t.app.get(AssistantsService).create(hobby, { name, model: 'gpt-4o-mini' });
      await page.goto(`/w/${hobby}/assistants`);
      await check(page, problems);
      await expect(page.locator('#assistant-count').textContent()).resolves.toContain('2 of 2');
      await page.goto(`/w/${hobby}/assistants/new`);
      await check(page, problems);
      await page.getByLabel('Name', { exact: true }).fill('Third');
      await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Create assistant' }).click()]);
      await check(page, problems, 403);
      await expect(page.locator('.flash.error').textContent()).resolves.toContain('The hobby tier allows 2 assistants per workspace');
      expect(await t.app.get(AssistantsService).list(hobby)).toHaveLength(2);
    } finally {
      await context.close();
    }
  });

  it('deletes the assistant after its confirmation page', async () => {
    const { context, page, problems } = await ownerPage();
    try {
      await page.getByRole('button', { name: 'Delete this assistant…' }).click();
      await page.waitForURL('**/delete');
      await check(page, problems);
      await Promise.all([page.waitForURL(/\/assistants$/), page.getByRole('button', { name: /^Delete “/ }).click()]);
      await check(page, problems);
      await expect(page.locator('.flash.success').textContent()).resolves.toContain('and its documents are deleted');
      await expect(page.locator('#no-assistants').count()).resolves.toBe(1);
    } finally {
      await context.close();
    }
  });

  /** The first test's owner, signed in again, on the assistant's editor. */
  async function ownerPage() {
    const owner = await ownerEmail();
    const context = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 900 }, locale: 'en-US' });
    const page = await context.newPage();
    const problems = collectConsoleErrors(page);
    await page.goto('/login');
    await page.getByLabel('Email').fill(owner);
    await page.getByLabel('Password').fill('a long enough passphrase');
    await Promise.all([page.waitForURL((url) => !url.pathname.startsWith('/login')), page.getByRole('button', { name: 'Sign in' }).click()]);
    await page.goto(`/w/${workspaceId}/assistants/${assistantId}`);
    await check(page, problems);
    return { context, page, problems };
  }

  async function ownerEmail(): Promise<string> {
    const { MembersService } = await import('../src/accounts/members.service');
    const members = await t.app.get(MembersService).members(workspaceId);
    return members.find((m) => m.role === 'owner')!.email;
  }
});
