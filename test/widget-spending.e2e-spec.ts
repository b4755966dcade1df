import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { formatMillicents } from '../src/dashboard/format';
import { MailService } from '../src/mail/mail.service';
import { WalletService } from '../src/wallet/wallet.service';
import { NEW_VISITORS_PER_HOUR } from '../src/widget/widget.controller';
import { defaultWidgetSettings } from '../src/widget/widget-settings';
import { RESTING_MESSAGE } from '../src/widget/widget-spending.service';
import { WidgetsService } from '../src/widget/widgets.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeOpenAi, OpenAiScenario, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, resultsScenario, startFakeSearch } from './fakes/fake-search';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { startTestApp, TestApp } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

const SITE = 'https://shop.example.com';
/** A 4,000-word answer, as in the measurement: the fake ignores max_tokens, the service bills at most that many output tokens. */
const LONG_ANSWER = Array.from({ length: 4_000 }, (_, i) => `word${i % 97}`).join(' ');
/** gpt-4o: 250,000 millicents per million input tokens, 1,000,000 per million output tokens. */
const MODEL = 'gpt-4o';
const CAP_MILLICENTS = 5_000;
const ANSWER_TOKENS = 1_024;
/** The default price of a web search: $0.01. */
const SEARCH_PRICE = 1_000;
/** What the upstream asks for on every call of the search widgets' tests: this many searches at once. */
const SEARCHES_PER_CALL = 4;
const SEARCHING: OpenAiScenario = {
  kind: 'tool_calls',
  calls: Array.from({ length: SEARCHES_PER_CALL }, (_, i) => ({ id: `call_search_${i}`, name: 'web_search', arguments: JSON.stringify({ query: `product ${i} reviews` }) })),
};
/** 20 long results a search: each tool result is longer than the 1,500 tokens a hold assumes before the search runs. */
const LONG_HITS = Array.from({ length: 20 }, (_, i) => ({
  title: `Review ${i} of the product, with all the details a shopper may ask about`,
  url: `https://reviews.example.com/${i}`,
  snippet: Array.from({ length: 90 }, (_, w) => `detail${(i * 7 + w) % 53}`).join(' '),
}));

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/**
 * A script driving the widget as an attacker would: a forged `Origin` equal to the allowed
 * one, a fresh visitor token for every message (each from another address, as from many
 * machines), long answers from the upstream. It spends at most the widget's daily cap, then
 * gets the visitor's "resting" message; each message replays a bounded history with the
 * answer capped; made-up visitor ids are refused; tokens are rate-limited per address; the
 * owner sees the day's spending and is mailed once near the cap.
 */
describe('widget: spending bounded', () => {
  let upstream: FakeOpenAi;
  let search: FakeSearch;
  let t: TestApp;
  let db: DataSource;
  let owner: SignedUpPerson;
  let widgetId: string;
  let widgetUuid: string;
  let assistantId: string;
  let chattyId: string;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    search = await startFakeSearch({ apiKey: 'tvly-test' });
    search.setDefault(resultsScenario(LONG_HITS));
    // No usage in the answers: the service counts the prompt itself and bills at most max_tokens of output.
    upstream.setDefault({ kind: 'text', text: LONG_ANSWER, usage: null });
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream-secret-key-000000000000', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        webSearch: { provider: 'tavily', apiKey: 'tvly-test', baseUrl: search.url },
        toolPrices: { web_search: SEARCH_PRICE, file_search: 100 },
      },
    });
    db = t.app.get(DataSource);
    owner = await signUp(t.baseUrl, { email: 'olga@example.com', name: 'Olga Owner' });
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'team');
    await t.app.get(WalletService).credit({ workspaceId: owner.workspaceId, type: 'topup', amountMillicents: 10_000_000, idempotencyKey: 'spending-test' });
    const assistants = t.app.get(AssistantsService);
    const widgets = t.app.get(WidgetsService);
    const assistant = await assistants.create(owner.workspaceId, { name: 'Shop helper', model: MODEL, systemPrompt: 'You help shoppers.' });
    assistantId = assistant.id;
    const widget = await widgets.save(owner.workspaceId, assistant.id, {
      ...defaultWidgetSettings('Shop helper'),
      enabled: true,
      allowedOrigins: [SITE],
      dailyCapMillicents: CAP_MILLICENTS,
      historyMessages: 2,
      maxAnswerTokens: ANSWER_TOKENS,
    });
    widgetId = widget.publicId;
    widgetUuid = widget.id;
    // A second widget, with room to spare, for the history and token tests.
    const chatty = await assistants.create(owner.workspaceId, { name: 'Chatty', model: 'gpt-4o-mini', systemPrompt: 'Be brief.' });
    chattyId = (
      await widgets.save(owner.workspaceId, chatty.id, { ...defaultWidgetSettings('Chatty'), enabled: true, allowedOrigins: [SITE], historyMessages: 2, maxAnswerTokens: 300 })
    ).publicId;
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
    await search?.close();
  });

  /** A request as a script makes it: any Origin it likes, and (behind the trusted loopback proxy) any client address. */
  async function call(method: string, path: string, options: { address: string; body?: unknown; origin?: string }): Promise<Answer> {
    const headers: Record<string, string> = { origin: options.origin ?? SITE, 'x-forwarded-for': options.address };
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${t.baseUrl}${path}`, { method, headers, body: options.body === undefined ? undefined : JSON.stringify(options.body) });
    const text = await response.text();
    let json: any = null;
    try {
      json = JSON.parse(text);
    } catch {
      /* a stream or an empty body */
    }
    return { status: response.status, headers: response.headers, text, json };
  }

  const mint = (widget: string, address: string, earlier?: string) =>
    call('POST', `/widget/v1/${widget}/visitors`, { address, body: earlier ? { visitor: earlier } : {} });
  const send = (widget: string, address: string, visitor: string, message: string) =>
    call('POST', `/widget/v1/${widget}/messages`, { address, body: { visitor, message } });

  async function token(widget: string, address: string): Promise<string> {
    const minted = await mint(widget, address);
    expect(minted.status).toBe(201);
    return minted.json.visitor as string;
  }

  /** Waits until no message of the widget is in flight in its daily counter (settlements run just after the answer). */
  async function settledDay(): Promise<{ spent: number; reserved: number; refused: number }> {
    for (let i = 0; i < 100; i++) {
      const [row] = await db.query(
        `SELECT spent_millicents::float8 AS spent, reserved_millicents::float8 AS reserved, refused FROM widget_spending WHERE widget_id = $1`,
        [widgetUuid],
      );
      if (row && row.reserved === 0) return row;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    throw new Error('the widget still has messages in flight');
  }

  it('refuses made-up visitor ids, forged tokens, and tokens of another address or widget; nothing reaches the upstream', async () => {
    const before = upstream.requests.length;
    const madeUp = await send(chattyId, '10.0.0.1', `v_${'ab'.repeat(16)}`, 'Hello?');
    expect(madeUp.status).toBe(400);
    expect(madeUp.json.error).toMatchObject({ type: 'bad_request', code: 'invalid_visitor_id', param: 'visitor' });

    const real = await token(chattyId, '10.0.0.1');
    expect(real).toMatch(/^vt_[0-9a-f]{32}\./);
    const [, hex, expiry, tag] = /^vt_([0-9a-f]{32})\.([0-9a-z]+)\.([\w-]{11})\./.exec(real)!;
    const forged = `vt_${hex.replace(/^./, hex[0] === 'a' ? 'b' : 'a')}.${expiry}.${tag}.${'A'.repeat(22)}`;
    const longer = `vt_${hex}.${(parseInt(expiry, 36) + 86_400 * 365).toString(36)}.${tag}.${real.split('.').at(-1)}`;
    for (const [visitor, address] of [
      [forged, '10.0.0.1'],
      [longer, '10.0.0.1'],
      [real, '10.0.0.2'],
    ]) {
      const refused = await send(chattyId, address, visitor, 'Hello?');
      expect(refused.status).toBe(401);
      expect(refused.json.error).toMatchObject({ type: 'authentication_error', code: 'invalid_visitor_token' });
      expect(refused.json.error.message).toBe('Your chat session has expired. Please reload the page.');
      expect(refused.headers.get('access-control-allow-origin')).toBe(SITE);
    }
    // A token of one widget is no token of another.
    expect((await send(widgetId, '10.0.0.1', real, 'Hello?')).status).toBe(401);
    expect((await call('GET', `/widget/v1/${chattyId}/conversation?visitor=${encodeURIComponent(real)}`, { address: '10.0.0.2' })).status).toBe(401);
    expect(upstream.requests.length).toBe(before);
    // The real token, from its own address, is answered.
    expect((await send(chattyId, '10.0.0.1', real, 'Hello?')).status).toBe(200);
  });

  it('issues at most the hourly number of visitor tokens per address and widget, with a visitor\'s wording; a renewal keeps the visitor', async () => {
    const address = '10.0.1.1';
    const first = await token(chattyId, address);
    for (let i = 1; i < NEW_VISITORS_PER_HOUR; i++) expect((await mint(chattyId, address)).status).toBe(201);
    const refused = await mint(chattyId, address);
    expect(refused.status).toBe(429);
    expect(refused.json.error).toMatchObject({ type: 'rate_limit_exceeded', message: 'Too many new chats from your network just now. Please try again later.' });
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    // Another address still gets one; a visitor whose address changed renews, keeping their id (and conversation).
    const renewed = await mint(chattyId, '10.0.1.2', first);
    expect(renewed.status).toBe(201);
    expect(renewed.json.visitor.slice(0, 35)).toBe(first.slice(0, 35));
    expect(renewed.json.visitor).not.toBe(first);
    expect(renewed.json.expires_at * 1000).toBeGreaterThan(Date.now() + 86_400_000);
  });

  it('sends at most the set number of earlier messages upstream, and the set max_tokens', async () => {
    const address = '10.0.2.1';
    const visitor = await token(chattyId, address);
    for (let i = 1; i <= 5; i++) {
      upstream.script({ kind: 'text', text: `answer ${i}`, usage: null });
      const answer = await send(chattyId, address, visitor, `question ${i}`);
      expect(answer.status).toBe(200);
      const sent = upstream.requests.at(-1)!.body;
      const contents = (sent.messages as Array<{ content: string }>).map((m) => m.content);
      // The system prompt, at most 2 earlier messages (the setting), and the new one.
      expect(contents).toEqual(['Be brief.', ...(i === 1 ? [] : [`question ${i - 1}`, `answer ${i - 1}`]), `question ${i}`]);
      expect(sent.max_completion_tokens ?? sent.max_tokens).toBe(300);
    }
    // The visitor's transcript still has the whole conversation.
    const transcript = await call('GET', `/widget/v1/${chattyId}/conversation?visitor=${encodeURIComponent(visitor)}`, { address });
    expect(transcript.json.messages).toHaveLength(10);
  });

  it('spends at most the daily cap under a script with a forged Origin and a fresh visitor on every message, then tells visitors the chat is resting', async () => {
    const wallet = t.app.get(WalletService);
    await t.settled(owner.workspaceId);
    const balanceBefore = (await wallet.balance(owner.workspaceId)).balanceMillicents;
    const upstreamBefore = upstream.requests.length;
    const statuses: number[] = [];
    const refusals: Answer[] = [];
    const started = Date.now();
    // Five at a time, as fast as the service answers, each message from a fresh address with a fresh token.
    for (let batch = 0; refusals.length < 10 && batch < 12; batch++) {
      const answers = await Promise.all(
        Array.from({ length: 5 }, async (_, i) => {
          const address = `10.1.${batch}.${i + 1}`;
          return send(widgetId, address, await token(widgetId, address), `Tell me everything about product ${batch * 5 + i}, at length.`);
        }),
      );
      for (const answer of answers) {
        statuses.push(answer.status);
        if (answer.status !== 200) refusals.push(answer);
      }
    }
    const elapsedMs = Date.now() - started;
    const answered = statuses.filter((status) => status === 200).length;
    expect(answered).toBeGreaterThan(1);
    expect(refusals.length).toBeGreaterThanOrEqual(10);
    for (const refusal of refusals) {
      expect(refusal.status).toBe(402);
      expect(refusal.json.error).toMatchObject({ code: 'widget_daily_cap', message: 'This chat is resting for today. Please try again tomorrow.' });
      expect(refusal.json.error.message).not.toMatch(/balance|millicent|wallet|cap/i);
    }
    // With nothing in flight any more, what is left of the day cannot pay for another message: the next one is refused too.
    await settledDay();
    const after = await send(widgetId, '10.1.99.1', await token(widgetId, '10.1.99.1'), 'One more?');
    expect(after.status).toBe(402);
    refusals.push(after);
    // Refused messages never reached the upstream.
    expect(upstream.requests.length - upstreamBefore).toBe(answered);

    const day = await settledDay();
    await t.settled(owner.workspaceId);
    const [{ charged, records }] = await db.query(
      `SELECT coalesce(sum(u.total_cost_millicents), 0)::float8 AS charged, count(*) FILTER (WHERE u.status = 'success')::int AS records
         FROM usage_records u JOIN conversations c ON c.user_id = u.user_id AND c.workspace_id = u.workspace_id
        WHERE u.workspace_id = $1 AND u.source = 'widget' AND c.metadata->>'widget' = $2`,
      [owner.workspaceId, widgetId],
    );
    const ledger = balanceBefore - (await wallet.balance(owner.workspaceId)).balanceMillicents;
    // Each message's charge is at most its reservation (no tools, counts within the hold), so the bound is the cap itself.
    expect(records).toBe(answered);
    expect(charged).toBeLessThanOrEqual(CAP_MILLICENTS);
    expect(ledger).toBeLessThanOrEqual(CAP_MILLICENTS);
    expect(day.spent).toBeGreaterThanOrEqual(Math.floor(charged));
    expect(day.spent).toBeLessThanOrEqual(CAP_MILLICENTS);
    expect(day.refused).toBe(refusals.length);
    // Most of the cap is used: what is left is less than one more message's reservation.
    const perMessage = charged / answered;
    expect(CAP_MILLICENTS - day.spent).toBeLessThan(2 * perMessage);
    console.log(
      `statuses ${statuses.join(' ')}; widget under a script: ${answered} answered messages, ${refusals.length} refused, charged ${charged} millicents ` +
        `(${(perMessage / 100_000).toFixed(4)} $/message at ${ANSWER_TOKENS} answer tokens on ${MODEL}) against a cap of ${CAP_MILLICENTS}, in ${elapsedMs} ms`,
    );
  });

  it('mails the owner once when the day\'s spending nears the cap, and shows spent today and a banner on the settings page', async () => {
    const mails = t.app.get(MailService).logged.filter((mail) => mail.subject.includes('Chat widget "Shop helper"'));
    expect(mails).toHaveLength(1);
    expect(mails[0]).toMatchObject({ to: 'olga@example.com' });
    expect(mails[0].text).toMatch(/daily cap of \$0\.05/);

    const page = await owner.client.get(`/w/${owner.workspaceId}/assistants/${assistantId}/widget`);
    expect(page.status).toBe(200);
    const [{ spent }] = await db.query(`SELECT spent_millicents::int AS spent FROM widget_spending WHERE widget_id = $1`, [widgetUuid]);
    expect(textOf(page.html)).toContain(`Spent today (UTC): ${formatMillicents(spent)} of $0.05`);
    expect(page.html).toContain('id="widget-cap-reached"');
    expect(page.html).toContain('name="daily_cap" inputmode="decimal" required value="0.05"');
    // And the workspace's overview says which widget it is, linking its settings.
    const overview = await owner.client.get(`/w/${owner.workspaceId}`);
    expect(overview.html).toContain('id="widgets-near-cap"');
    expect(overview.html).toContain(`href="/w/${owner.workspaceId}/assistants/${assistantId}/widget"`);
    expect(textOf(overview.html)).toContain(`Shop helper has spent ${formatMillicents(spent)} of its $0.05 daily cap today (reached`);
  });

  it('refuses a cap above the bound (or none) in the settings form, and saves one within it', async () => {
    const page = `/w/${owner.workspaceId}/assistants/${assistantId}/widget`;
    const form = (fields: Record<string, string>) => ({
      enabled: 'on',
      allowed_origins: SITE,
      title: 'Shop helper',
      greeting: '',
      placeholder: 'Ask',
      accent_color: '#1e66f5',
      theme: 'light',
      position: 'bottom-right',
      daily_cap: '0.05',
      history_messages: '2',
      max_answer_tokens: String(ANSWER_TOKENS),
      ...fields,
    });
    const refusedForms: Record<string, string>[] = [{ daily_cap: '1000.01' }, { daily_cap: '' }, { daily_cap: '0' }, { max_answer_tokens: '4097' }, { history_messages: '21' }];
    for (const fields of refusedForms) {
      const refused = await owner.client.post(page, form(fields));
      expect(refused.status).toBe(400);
      expect(refused.html).toMatch(/id="widget-(dailyCapMillicents|maxAnswerTokens|historyMessages)-error"/);
    }
    const [{ cap }] = await db.query(`SELECT daily_cap_millicents::int AS cap FROM widgets WHERE id = $1`, [widgetUuid]);
    expect(cap).toBe(CAP_MILLICENTS);

    // Raising the cap lets visitors in again today.
    expect((await owner.client.post(page, form({ daily_cap: '1,000' }))).status).toBe(303);
    const [row] = await db.query(`SELECT daily_cap_millicents::int AS cap, history_messages, max_answer_tokens FROM widgets WHERE id = $1`, [widgetUuid]);
    expect(row).toEqual({ cap: 100_000_000, history_messages: 2, max_answer_tokens: ANSWER_TOKENS });
    const address = '10.2.0.1';
    expect((await send(widgetId, address, await token(widgetId, address), 'Still there?')).status).toBe(200);
  });

  describe('with a web-search assistant whose model keeps asking for searches', () => {
    /** A workspace of its own (its own rate window and wallet), an assistant with web search, and its widget capped at `capMillicents`. */
    async function searchWidget(capMillicents: number) {
      const workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
      const assistant = await t.app.get(AssistantsService).create(workspace.id, {
        name: 'Researcher',
        model: 'gpt-4o-mini',
        systemPrompt: 'Search before you answer.',
        tools: [{ type: 'web_search', max_results: 20 }],
        maxToolIterations: 5,
      });
      const widget = await t.app.get(WidgetsService).save(workspace.id, assistant.id, {
        ...defaultWidgetSettings('Researcher'),
        enabled: true,
        allowedOrigins: [SITE],
        dailyCapMillicents: capMillicents,
      });
      return { workspaceId: workspace.id, widget };
    }

    /** What the widget's day and the workspace's wallet say once nothing is in flight. */
    async function spendingOf(workspaceId: string, widgetUuid: string) {
      await t.quiet(workspaceId);
      const [day] = await db.query(`SELECT spent_millicents::float8 AS spent, reserved_millicents::float8 AS reserved FROM widget_spending WHERE widget_id = $1`, [widgetUuid]);
      const [usage] = await db.query(
        `SELECT coalesce(sum(total_cost_millicents), 0)::float8 AS charged, coalesce(sum(tool_cost_millicents), 0)::float8 AS tools, count(*)::int AS records
           FROM usage_records WHERE workspace_id = $1 AND source = 'widget'`,
        [workspaceId],
      );
      const wallet = await walletInvariants(db, workspaceId);
      return { day, usage, wallet, ledgerSpent: 10_000_000 - wallet.ledger };
    }

    beforeEach(() => upstream.setDefault(SEARCHING));
    afterEach(() => upstream.setDefault({ kind: 'text', text: LONG_ANSWER, usage: null }));

    it('cuts one visitor\'s message short at the cap, rather than charging past it for the searches', async () => {
      const cap = 5_000;
      const { workspaceId, widget } = await searchWidget(cap);
      const searchesBefore = search.requests.length;
      const address = '10.3.0.1';
      const answer = await send(widget.publicId, address, await token(widget.publicId, address), 'Which of your products has the best reviews?');
      expect(answer.status).toBe(200);
      expect(answer.text).toContain('[DONE]');
      // One round of searches fits in the cap ($0.04 and the model calls); a second would not: the loop ends there.
      expect(search.requests.length - searchesBefore).toBe(SEARCHES_PER_CALL);

      const { day, usage, wallet, ledgerSpent } = await spendingOf(workspaceId, widget.id);
      expect(usage.records).toBe(1);
      expect(usage.tools).toBe(SEARCHES_PER_CALL * SEARCH_PRICE);
      expect(usage.charged).toBeLessThanOrEqual(cap);
      expect(ledgerSpent).toBeLessThanOrEqual(cap);
      expect(day).toEqual({ spent: Math.ceil(usage.charged), reserved: 0 });
      expect(wallet.balance).toBe(wallet.ledger);
      expect(wallet).toMatchObject({ reserved: 0, holds: 0 });
      console.log(`one visitor of a web-search widget: charged ${usage.charged} millicents (${usage.tools} for searches) against a cap of ${cap}`);
    });

    it('charges 12 concurrent fresh visitors at most the cap in all', async () => {
      const cap = 30_000;
      const { workspaceId, widget } = await searchWidget(cap);
      const answers = await Promise.all(
        Array.from({ length: 12 }, async (_, i) => {
          const address = `10.4.0.${i + 1}`;
          return send(widget.publicId, address, await token(widget.publicId, address), `Compare product ${i} with its rivals, searching as much as you like.`);
        }),
      );
      for (const answer of answers) {
        expect([200, 402]).toContain(answer.status);
        if (answer.status === 402) expect(answer.json.error).toMatchObject({ code: 'widget_daily_cap', message: RESTING_MESSAGE });
      }
      expect(answers.filter((answer) => answer.status === 200).length).toBeGreaterThan(1);

      const { day, usage, wallet, ledgerSpent } = await spendingOf(workspaceId, widget.id);
      // Each message's estimates are upper bounds of what it can cost (the fake reports no more tokens than the service counts): no overshoot at all.
      expect(usage.tools).toBeGreaterThan(0);
      expect(usage.charged).toBeLessThanOrEqual(cap);
      expect(ledgerSpent).toBeLessThanOrEqual(cap);
      expect(day.reserved).toBe(0);
      expect(day.spent).toBeLessThanOrEqual(cap);
      expect(day.spent).toBeGreaterThanOrEqual(Math.floor(usage.charged));
      expect(wallet.balance).toBe(wallet.ledger);
      expect(wallet).toMatchObject({ reserved: 0, holds: 0 });
      console.log(
        `12 concurrent visitors of a web-search widget: statuses ${answers.map((answer) => answer.status).join(' ')}; ` +
          `charged ${usage.charged} millicents (${usage.tools} for searches) against a cap of ${cap}`,
      );
    });
  });
});
