import * as path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { formatMillicents } from '../src/dashboard/format';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, PageProblem } from './support/browser';
import { DashboardClient, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { makeDocx, makePdf } from './support/document-files';
import { startTestApp, TestApp } from './support/test-app';

/** gpt-4o-mini: 15,000 millicents per million input tokens, 60,000 per million output tokens. */
const USAGE = { prompt_tokens: 1_000, completion_tokens: 100 };
const COST = 15 + 6;

interface StreamAnswer {
  status: number;
  headers: Headers;
  /** The parsed `data:` events before `[DONE]` (for an error answer: empty). */
  events: Array<Record<string, any>>;
  /** The streamed text, put together from the deltas. */
  text: string;
  /** The JSON body of an answer that is not a stream. */
  json: any;
  done: boolean;
}

/**
 * The playground against the database and a fake OpenAI upstream: the page, and its streaming
 * endpoint, which runs requests through the same ChatService as the API, charged to the
 * workspace's wallet with usage records that say `dashboard`.
 */
describe('dashboard: playground', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let owner: SignedUpPerson;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
    });
    db = t.app.get(DataSource);
    owner = await signUp(t.baseUrl, { email: 'pat@example.com', name: 'Pat Player' });
    // Sign-up's tier allows 5 requests a minute; this workspace makes more (the rate limit has its own test).
    await db.query(`UPDATE workspaces SET tier = 'team' WHERE id = $1`, [owner.workspaceId]);
    await fund(owner.workspaceId, 100_000);
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  async function fund(workspaceId: string, amountMillicents: number) {
    await t.app.get(WalletService).credit({ workspaceId, amountMillicents, type: 'topup', idempotencyKey: `fund-${workspaceId}-${Date.now()}-${Math.random()}` });
  }

  const balance = async (workspaceId: string) => (await t.app.get(WalletService).balance(workspaceId)).balanceMillicents;

  /** The balance once it differs from `before` (settlements may be written a moment after the stream ends). */
  async function balanceAfter(workspaceId: string, before: number): Promise<number> {
    for (let i = 0; i < 50; i++) {
      const now = await balance(workspaceId);
      if (now !== before) return now;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    return balance(workspaceId);
  }

  /** POSTs to the streaming endpoint as the page's script does (JSON, X-CSRF-Token, the session cookie). */
  async function stream(client: DashboardClient, workspaceId: string, body: unknown, options: { csrf?: string | false } = {}): Promise<StreamAnswer> {
    // As a person would: the page first (its CSRF token belongs to the session, which changes at sign-in).
    await client.get(`/w/${workspaceId}/playground`);
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      accept: 'text/event-stream',
      cookie: [...client.cookies].map(([name, value]) => `${name}=${value}`).join('; '),
    };
    const csrf = options.csrf === undefined ? client.csrfToken : options.csrf;
    if (csrf) headers['x-csrf-token'] = csrf;
    const response = await fetch(`${t.baseUrl}/w/${workspaceId}/playground/stream`, { method: 'POST', headers, body: JSON.stringify(body) });
    const raw = await response.text();
    const answer: StreamAnswer = { status: response.status, headers: response.headers, events: [], text: '', json: null, done: false };
    if (!response.headers.get('content-type')?.includes('text/event-stream')) {
      answer.json = raw ? JSON.parse(raw) : null;
      return answer;
    }
    for (const frame of raw.split('\n\n')) {
      const data = frame.startsWith('data: ') ? frame.slice(6) : null;
      if (data === null) continue;
      if (data === '[DONE]') {
        answer.done = true;
        continue;
      }
      const event = JSON.parse(data) as Record<string, any>;
      answer.events.push(event);
      answer.text += event.choices?.[0]?.delta?.content ?? '';
    }
    return answer;
  }

  it('shows an empty playground that says what to do: no assistants yet, the models, no conversation', async () => {
    const page = await owner.client.get(`/w/${owner.workspaceId}/playground`);
    expect(page.status).toBe(200);
    expect(page.html).toContain('<h1>Playground</h1>');
    expect(page.html).toContain('id="no-assistants"');
    expect(textOf(page.html)).toContain('This workspace has no assistants yet.');
    expect(page.html).toContain('id="playground-empty"');
    expect(page.html).toMatch(/<option value="model:gpt-4o-mini" data-label="gpt-4o-mini" selected>gpt-4o-mini: \$0\.15 in, \$0\.60 out per million tokens/);
    expect(page.html).toContain('<option value="">New conversation</option>');
  });

  it('streams an answer through the chat service, charges the wallet its x_service cost, and records it as from the dashboard', async () => {
    const before = await balance(owner.workspaceId);
    const requestsBefore = upstream.requests.length;
    upstream.script({ kind: 'text', text: 'Hello **there**, from the fake.', usage: USAGE });

    const answer = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Say hello' });
    expect(answer.status).toBe(200);
    expect(answer.done).toBe(true);
    expect(answer.text).toBe('Hello **there**, from the fake.');
    const xService = answer.events.at(-1)?.x_service;
    expect(xService).toEqual({ cost_millicents: COST, iterations: 1, tools_used: [], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 1 });
    // The same upstream request as the API makes: the message, the model, streamed.
    expect(upstream.requests.length).toBe(requestsBefore + 1);
    expect(upstream.requests.at(-1)!.body).toMatchObject({ model: 'gpt-4o-mini', stream: true, messages: [{ role: 'user', content: 'Say hello' }] });

    expect(await balanceAfter(owner.workspaceId, before)).toBe(before - COST);
    const records = await db.query(
      `SELECT source, api_key_id, model, status, charged_millicents::int AS charged, total_cost_millicents::float8 AS cost
         FROM usage_records WHERE workspace_id = $1`,
      [owner.workspaceId],
    );
    expect(records).toEqual([{ source: 'dashboard', api_key_id: null, model: 'gpt-4o-mini', status: 'success', charged: COST, cost: COST }]);

    // The chat is kept as a conversation of the dashboard, its reply carrying the turn's cost.
    const conversationId = answer.headers.get('x-conversation-id');
    expect(conversationId).toMatch(/^[0-9a-f-]{36}$/);
    const [conversation] = await db.query('SELECT title, source, message_count FROM conversations WHERE id = $1 AND workspace_id = $2', [
      conversationId,
      owner.workspaceId,
    ]);
    expect(conversation).toEqual({ title: 'Say hello', source: 'dashboard', message_count: 2 });
    const messages = await db.query(
      'SELECT role, content, cost_millicents::float8 AS cost FROM conversation_messages WHERE conversation_id = $1 ORDER BY position',
      [conversationId],
    );
    expect(messages).toEqual([
      { role: 'user', content: 'Say hello', cost: null },
      { role: 'assistant', content: 'Hello **there**, from the fake.', cost: COST },
    ]);

    // Continuing it sends the stored messages first, and the page shows the transcript with the turn's cost.
    upstream.script({ kind: 'text', text: 'Again.', usage: USAGE });
    const next = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Once more', conversation_id: conversationId });
    expect(next.status).toBe(200);
    expect(next.headers.get('x-conversation-id')).toBe(conversationId);
    expect(upstream.requests.at(-1)!.body.messages).toEqual([
      { role: 'user', content: 'Say hello' },
      { role: 'assistant', content: 'Hello **there**, from the fake.' },
      { role: 'user', content: 'Once more' },
    ]);
    const page = await owner.client.get(`/w/${owner.workspaceId}/playground?conversation=${conversationId}`);
    expect(page.status).toBe(200);
    expect(page.html).toContain(`<option value="${conversationId}" selected>Say hello (4 messages)</option>`);
    expect(page.html).toContain('<div class="md" data-markdown>Hello **there**, from the fake.</div>');
    expect(textOf(page.html)).toContain('Cost $0.00021 (21 millicents)');
  });

  it('answers with an assistant of the workspace, its conversation remembering the assistant', async () => {
    const bot = await t.app.get(AssistantsService).create(owner.workspaceId, { name: 'Greeter', model: 'gpt-4o-mini', systemPrompt: 'You greet.' });
    const page = await owner.client.get(`/w/${owner.workspaceId}/playground`);
    expect(page.html).toContain(`<option value="assistant:${bot.id}" data-label="Greeter" selected>Greeter (gpt-4o-mini)</option>`);
    expect(page.html).not.toContain('id="no-assistants"');
    upstream.script({ kind: 'text', text: 'Hi!', usage: USAGE });
    const answer = await stream(owner.client, owner.workspaceId, { target: `assistant:${bot.id}`, message: 'Hello' });
    expect(answer.status).toBe(200);
    expect(upstream.requests.at(-1)!.body.messages).toEqual([
      { role: 'system', content: 'You greet.' },
      { role: 'user', content: 'Hello' },
    ]);
    const [conversation] = await db.query('SELECT assistant_id FROM conversations WHERE id = $1', [answer.headers.get('x-conversation-id')]);
    expect(conversation.assistant_id).toBe(bot.id);
    await t.app.get(AssistantsService).delete(bot.id);
  });

  it('needs the CSRF token: without it, or with a wrong one, 403 and nothing is sent upstream or charged', async () => {
    const before = await balance(owner.workspaceId);
    const requestsBefore = upstream.requests.length;
    for (const csrf of [false, 'not-the-token'] as const) {
      const answer = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Sneaky' }, { csrf });
      expect(answer.status).toBe(403);
      expect(answer.json.error.message).toBe('This form has expired. Reload the page and try again.');
    }
    expect(upstream.requests.length).toBe(requestsBefore);
    expect(await balance(owner.workspaceId)).toBe(before);
  });

  it('is a 404 for someone who is not a member, and works for a member', async () => {
    const stranger = await signUp(t.baseUrl, { email: 'stranger@example.com', name: 'Stranger' });
    expect((await stranger.client.get(`/w/${owner.workspaceId}/playground`)).status).toBe(404);
    const refused = await stream(stranger.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Let me in' });
    expect(refused.status).toBe(404);

    const [user] = await db.query('SELECT id FROM users WHERE email = $1', ['pat@example.com']);
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'mo@example.com', 'member', user.id);
    const member = await signUp(t.baseUrl, { email: 'mo@example.com', name: 'Mo Member', invitation: invitation.token });
    expect(member.workspaceId).toBe(owner.workspaceId);
    upstream.script({ kind: 'text', text: 'Welcome, member.', usage: USAGE });
    const answer = await stream(member.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Hi as a member' });
    expect(answer.status).toBe(200);
    expect(answer.text).toBe('Welcome, member.');
  });

  it('refuses with readable JSON errors, never a stack, and leaves no empty conversation behind', async () => {
    const count = async (workspaceId: string) => (await db.query('SELECT count(*)::int AS n FROM conversations WHERE workspace_id = $1', [workspaceId]))[0].n;

    const bad = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: '   ' });
    expect(bad.status).toBe(400);
    expect(bad.json.error).toMatchObject({ message: 'Write a message first.', param: 'message' });
    const noTarget = await stream(owner.client, owner.workspaceId, { message: 'Hi' });
    expect(noTarget.json.error).toMatchObject({ message: 'Choose an assistant or a model to answer.', param: 'target' });
    const unknownModel = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-9', message: 'Hi' });
    expect(unknownModel.status).toBe(404);
    expect(unknownModel.json.error.code).toBe('model_not_found');

    // An empty wallet: 402 with the API's message.
    const broke = await signUp(t.baseUrl, { email: 'broke@example.com', name: 'Broke' });
    const requestsBefore = upstream.requests.length;
    const refused = await stream(broke.client, broke.workspaceId, { target: 'model:gpt-4o-mini', message: 'Hi' });
    expect(refused.status).toBe(402);
    expect(refused.json.error.type).toBe('insufficient_balance');
    expect(refused.json.error.message).not.toMatch(/\bat \w+ \(|\.ts:\d+/);
    expect(upstream.requests.length).toBe(requestsBefore);
    expect(await count(broke.workspaceId)).toBe(0);

    // The upstream failing before the first chunk: the API's upstream error, nothing charged.
    const before = await balance(owner.workspaceId);
    const conversations = await count(owner.workspaceId);
    upstream.script({ kind: 'http_error', status: 500, body: { error: { message: 'boom' } } });
    const failed = await stream(owner.client, owner.workspaceId, { target: 'model:gpt-4o-mini', message: 'Fail please' });
    expect(failed.status).toBeGreaterThanOrEqual(500);
    expect(failed.status).not.toBe(500);
    expect(typeof failed.json.error.message).toBe('string');
    expect(failed.json.error.message).not.toMatch(/\bat \w+ \(|\.ts:\d+/);
    expect(await count(owner.workspaceId)).toBe(conversations);
    expect(await balance(owner.workspaceId)).toBe(before);
  });

  it("counts against the workspace's rate limit, as its API keys do", async () => {
    const hobbyist = await signUp(t.baseUrl, { email: 'hobby@example.com', name: 'Hobbyist' });
    await db.query(`UPDATE workspaces SET tier = 'free' WHERE id = $1`, [hobbyist.workspaceId]);
    await fund(hobbyist.workspaceId, 100_000);
    upstream.setDefault({ kind: 'text', text: 'ok', usage: USAGE });
    const statuses: number[] = [];
    // The free tier allows 5 requests a minute.
    for (let i = 0; i < 6; i++) statuses.push((await stream(hobbyist.client, hobbyist.workspaceId, { target: 'model:gpt-4o-mini', message: `n${i}` })).status);
    expect(statuses).toEqual([200, 200, 200, 200, 200, 429]);
    const limited = await stream(hobbyist.client, hobbyist.workspaceId, { target: 'model:gpt-4o-mini', message: 'again' });
    expect(limited.json.error.type).toBe('rate_limit_exceeded');
    expect(limited.json.error.message).toMatch(/^Rate limit reached: 5 requests per minute\. Try again in \d+ seconds\.$/);
  });

  it('leaves API requests recorded as from the API', async () => {
    const workspace = await t.createWorkspace();
    upstream.script({ kind: 'text', text: 'api', usage: USAGE });
    await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'hi' }] });
    await t.settled(workspace.id);
    const records = await db.query('SELECT source, api_key_id FROM usage_records WHERE workspace_id = $1', [workspace.id]);
    expect(records).toEqual([{ source: 'api', api_key_id: workspace.apiKeyId }]);
    // /v1/usage/recent says where each request came from.
    const recent = (await workspace.client.get('/usage/recent')) as { data: Array<{ source: string }> };
    expect(recent.data.map((record) => record.source)).toEqual(['api']);
  });
});

/**
 * The playground in Chromium: an assistant with file_search and a document that carries a
 * fact; the question's answer streams in word by word (the fake upstream is slowed so the
 * screenshot catches it mid-answer), then its cost; the conversation is found by search and
 * opened. Every page passes axe and shows no console error or CSP violation.
 */
describeWithBrowser('dashboard: playground in the browser', () => {
  jest.setTimeout(120_000);
  const SCREENSHOT = path.join(__dirname, '..', 'docs', 'playground.png');
  const FACT = 'Damaged goods are replaced free of charge; send a photo of the damage to support.';
  const ANSWER =
    'Good news: **damaged goods are replaced free of charge** [1].\n\nWhat to do:\n\n1. Take a photo of the damage.\n2. Send it to `support@example.com`.\n\nNo need to return the item first.';
  let upstream: FakeOpenAi;
  let t: TestApp;
  let browser: Browser;
  let person: SignedUpPerson;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    [t, browser] = await Promise.all([
      startTestApp({ config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 } }),
      launchChromium(),
    ]);
    person = await signUp(t.baseUrl, { email: 'bea@example.com', name: 'Bea Browser' });
    await t.app.get(DataSource).query(`UPDATE workspaces SET tier = 'team' WHERE id = $1`, [person.workspaceId]);
    // A verified address: the screenshot shows the playground, not the verification banner.
    await t.app.get(DataSource).query(`UPDATE users SET email_verified_at = now() WHERE email = 'bea@example.com'`);
    // Sign-up's message (the verification link) is shown once, here, not in the browser.
    await person.client.get(`/w/${person.workspaceId}`);
    await t.app.get(WalletService).credit({ workspaceId: person.workspaceId, amountMillicents: 500_000, type: 'topup', idempotencyKey: 'browser-fund' });
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
    await upstream?.close();
  });

  /** A browser page signed in as the person (their session cookie from sign-up). */
  async function signedInPage(): Promise<{ context: BrowserContext; page: Page; problems: PageProblem[] }> {
    const context = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 900 }, locale: 'en-US' });
    await context.addCookies([{ name: 'acs.sid', value: person.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    return { context, page, problems: collectConsoleErrors(page) };
  }

  async function settled(page: Page, problems: PageProblem[]) {
    await page.waitForLoadState('load');
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    await expectAccessible(page);
    expect(problems).toEqual([]);
  }

  it('asks an assistant with file_search, sees the answer stream in with its cost, then finds the conversation and opens it', async () => {
    const bot = await t.app.get(AssistantsService).create(person.workspaceId, { name: 'Policy bot', model: 'gpt-4o-mini', tools: ['file_search'] });
    // The fact is only in the PDF; the DOCX beside it is about something else.
    const documents = t.app.get(DocumentsService);
    await documents.add({
      workspaceId: person.workspaceId,
      assistantId: bot.id,
      fileName: 'policy.pdf',
      data: await makePdf([['Returns', 'Customers may return any item within 30 days.', FACT]]),
    });
    await documents.add({
      workspaceId: person.workspaceId,
      assistantId: bot.id,
      fileName: 'opening-hours.docx',
      data: await makeDocx(['Opening hours', 'The support desk is open from nine to five on weekdays.']),
    });
    upstream.script(
      { kind: 'tool_calls', calls: [{ id: 'call_fs', name: 'file_search', arguments: '{"query":"damaged goods"}' }], usage: { prompt_tokens: 200, completion_tokens: 10 } },
      { kind: 'text', text: ANSWER, usage: { prompt_tokens: 400, completion_tokens: 40 }, chunkDelayMs: 120 },
    );
    const balanceBefore = (await t.app.get(WalletService).balance(person.workspaceId)).balanceMillicents;

    const { context, page, problems } = await signedInPage();
    await page.goto(`/w/${person.workspaceId}/playground`);
    await settled(page, problems);
    expect(await page.locator('#playground-empty').textContent()).toContain('Nothing said yet.');
    await page.selectOption('#playground-target', `assistant:${bot.id}`);
    await page.fill('#playground-message', 'What happens if my parcel arrives damaged?');
    await page.click('#playground-send');

    // Mid-answer: some words shown, not all, no cost yet.
    const answer = page.locator('#streaming-answer .md');
    await page.locator('#streaming-answer .md', { hasText: 'What to do' }).waitFor();
    const partial = (await answer.textContent()) ?? '';
    expect(partial.length).toBeGreaterThan(0);
    expect(partial).not.toContain('No need to return the item first.');
    expect(await page.locator('#streaming-answer .turn-meta').count()).toBe(0);
    // The Markdown is rendered as it arrives: bold and a list, never the asterisks.
    expect(await answer.locator('strong').first().textContent()).toBe('damaged goods are replaced free of charge');
    await page.locator('#streaming-answer').scrollIntoViewIfNeeded();
    await page.screenshot({ path: SCREENSHOT, type: 'png' });

    // The end: the whole answer, then its x_service.
    const meta = page.locator('#playground-transcript .message-assistant .turn-meta').last();
    await meta.waitFor({ timeout: 30_000 });
    const finalText = (await page.locator('#playground-transcript .message-assistant .md').last().textContent()) ?? '';
    expect(finalText).toContain('No need to return the item first.');
    expect(finalText.startsWith(partial)).toBe(true);
    expect(await page.locator('#playground-transcript .message-assistant .md').last().locator('ol li').count()).toBe(2);
    // The passage the answer cites ([1]) is shown under it, by its document's name.
    expect(await page.locator('#playground-transcript .message-assistant .sources li').allTextContents()).toEqual(['policy.pdf']);

    // The fact reached the model through file_search, from the document.
    const toolMessage = (upstream.requests.at(-1)!.body.messages as Array<{ role: string; content: string }>).at(-1)!;
    expect(toolMessage.role).toBe('tool');
    expect(toolMessage.content).toContain(FACT);

    // The cost shown is the request's: its usage record (from the dashboard) and what the wallet lost.
    await t.settled(person.workspaceId);
    const [record] = await t.app.get(DataSource).query(
      `SELECT total_cost_millicents::float8 AS cost, charged_millicents::int AS charged, tools_used, iterations, source
         FROM usage_records WHERE workspace_id = $1`,
      [person.workspaceId],
    );
    expect(record).toMatchObject({ source: 'dashboard', tools_used: ['file_search'], iterations: 2 });
    const metaText = (await meta.textContent()) ?? '';
    expect(metaText).toBe(`Cost ${formatMillicents(record.cost)} (${record.cost} millicents) · 2 iterations · tools used: file_search`);
    let balance = balanceBefore;
    // The settlement may be written a moment after the stream ended.
    for (let i = 0; i < 50 && balance === balanceBefore; i++) {
      balance = (await t.app.get(WalletService).balance(person.workspaceId)).balanceMillicents;
      if (balance === balanceBefore) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(record.charged).toBeGreaterThan(0);
    expect(balance).toBe(balanceBefore - record.charged);
    expect(page.url()).toMatch(/\/playground\?conversation=[0-9a-f-]{36}$/);
    expect(await page.locator('#transcript-heading').textContent()).toBe('What happens if my parcel arrives damaged?');
    await settled(page, problems);

    // Conversations: search, then open the result.
    await page.goto(`/w/${person.workspaceId}/conversations`);
    await settled(page, problems);
    await page.fill('#search-q', 'damaged parcel');
    await Promise.all([page.waitForEvent('load'), page.click('#search-form button[type="submit"]')]);
    await settled(page, problems);
    const hit = page.locator('#search-results .search-hit').first();
    expect(await hit.locator('mark').count()).toBeGreaterThan(0);
    await Promise.all([page.waitForEvent('load'), hit.locator('a').click()]);
    await settled(page, problems);
    expect(await page.locator('h1').textContent()).toBe('What happens if my parcel arrives damaged?');
    expect(await page.locator('.message-assistant .md strong').first().textContent()).toBe('damaged goods are replaced free of charge');
    expect(await page.locator('.message-assistant .turn-cost').textContent()).toBe(`${formatMillicents(record.cost)} (${record.cost} millicents)`);
    // The conversation keeps the answer's sources.
    expect(await page.locator('.message-assistant .sources li').allTextContents()).toEqual(['policy.pdf']);
    await context.close();
  });

  it('shows a refusal as a message in the page (an empty wallet: 402)', async () => {
    const broke = await signUp(t.baseUrl, { email: 'broke-browser@example.com', name: 'Broke Browser' });
    const context = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 900 } });
    await context.addCookies([{ name: 'acs.sid', value: broke.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    const problems = collectConsoleErrors(page);
    await page.goto(`/w/${broke.workspaceId}/playground`);
    await page.fill('#playground-message', 'Hello?');
    await page.click('#playground-send');
    const error = page.locator('#playground-error');
    await error.waitFor({ state: 'visible' });
    expect(await error.textContent()).toMatch(/balance.*Add credit to the workspace on the Billing page, or ask an admin\.$/s);
    expect(await page.locator('#playground-transcript .message-assistant').count()).toBe(0);
    await expectAccessible(page);
    // Chromium logs the refused fetch itself; nothing else may appear.
    expect(problems.filter((problem) => !problem.text.includes('status of 402'))).toEqual([]);
    await context.close();
  });
});
