import { gunzipSync } from 'node:zlib';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ADDRESS_REQUEST_RATE_LIMIT_RPM, READ_RATE_LIMIT_RPM, VISITOR_RATE_LIMIT_RPM } from '../src/widget/widget.controller';
import { WidgetsService } from '../src/widget/widgets.service';
import { defaultWidgetSettings } from '../src/widget/widget-settings';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/** gpt-4o-mini: 15,000 millicents per million input tokens, 60,000 per million output tokens. */
const USAGE = { prompt_tokens: 1_000, completion_tokens: 100 };
const COST = 15 + 6;
const SITE = 'https://shop.example.com';
const OTHER_SITE = 'https://evil.example.net';

/** An API key as this service makes them (`sk-` and base64url), anywhere in a text. */
const API_KEY_PATTERN = /sk-[A-Za-z0-9_-]{20,}/;

interface Answer {
  status: number;
  headers: Headers;
  text: string;
  json: any;
}

/** The visitor id a token stands for (`v_` and its 32 hex digits): the user_id of its usage records and conversation. */
function visitorIdOf(token: string): string {
  return `v_${token.slice(3, 35)}`;
}

/**
 * The widget's public endpoints against the database and a fake OpenAI upstream: origin
 * checks and CORS, unknown and disabled widgets, visitors' input, rate limits, the wallet and
 * usage records, branding by tier, and that no API key ever reaches the page.
 */
describe('widget: public endpoints', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let workspace: TestWorkspace;
  let publicId: string;
  let disabledId: string;
  /** Every body answered in this file, searched for API keys at the end. */
  const bodies: string[] = [];

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: { providers: { openai: { apiKey: 'sk-upstream-secret-key-000000000000', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
    });
    db = t.app.get(DataSource);
    workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 100_000 });
    const assistants = t.app.get(AssistantsService);
    const widgets = t.app.get(WidgetsService);
    const assistant = await assistants.create(workspace.id, { name: 'Shop helper', model: 'gpt-4o-mini', systemPrompt: 'You help shoppers.' });
    const widget = await widgets.save(workspace.id, assistant.id, { ...defaultWidgetSettings('Shop helper'), enabled: true, allowedOrigins: [SITE] });
    publicId = widget.publicId;
    const quiet = await assistants.create(workspace.id, { name: 'Quiet', model: 'gpt-4o-mini' });
    disabledId = (await widgets.save(workspace.id, quiet.id, { ...defaultWidgetSettings('Quiet'), enabled: false, allowedOrigins: [SITE] })).publicId;
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  async function call(method: string, path: string, options: { origin?: string | null; body?: unknown } = {}): Promise<Answer> {
    const headers: Record<string, string> = {};
    const origin = options.origin === undefined ? SITE : options.origin;
    if (origin) headers.origin = origin;
    if (options.body !== undefined) headers['content-type'] = 'application/json';
    const response = await fetch(`${t.baseUrl}${path}`, {
      method,
      headers,
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
    const text = await response.text();
    bodies.push(text, JSON.stringify([...response.headers]));
    let json: any = null;
    try {
      json = JSON.parse(text);
    } catch {
      /* a stream or an empty body */
    }
    return { status: response.status, headers: response.headers, text, json };
  }

  const send = (id: string, visitor: string, message: string, origin?: string) =>
    call('POST', `/widget/v1/${id}/messages`, { origin, body: { visitor, message } });

  /** A new visitor of a widget, as widget.js gets one: a token issued by the service. */
  async function newVisitor(id = publicId): Promise<string> {
    const issued = await call('POST', `/widget/v1/${id}/visitors`, { body: {} });
    expect(issued.status).toBe(201);
    expect(issued.headers.get('access-control-allow-origin')).toBe(SITE);
    return issued.json.visitor as string;
  }
  const conversationPath = (id: string, visitor: string) => `/widget/v1/${id}/conversation?visitor=${encodeURIComponent(visitor)}`;

  /** The `{"delta"}` events of a streamed answer, put together. */
  function streamedText(answer: Answer): string {
    return answer.text
      .split('\n')
      .filter((line) => line.startsWith('data: {'))
      .map((line) => JSON.parse(line.slice(6)) as { delta?: string })
      .map((event) => event.delta ?? '')
      .join('');
  }

  const balance = async () => (await t.app.get(WalletService).balance(workspace.id)).balanceMillicents;

  async function balanceAfter(before: number): Promise<number> {
    for (let i = 0; i < 50 && (await balance()) === before; i++) await new Promise((resolve) => setTimeout(resolve, 100));
    return balance();
  }

  it('serves widget.js to any website: JavaScript, cacheable, cross-origin, gzipped, small', async () => {
    const plain = await fetch(`${t.baseUrl}/widget.js`, { headers: { origin: OTHER_SITE, 'accept-encoding': 'identity' } });
    const text = await plain.text();
    expect(plain.status).toBe(200);
    expect(plain.headers.get('content-type')).toMatch(/^text\/javascript/);
    expect(plain.headers.get('cross-origin-resource-policy')).toBe('cross-origin');
    expect(plain.headers.get('access-control-allow-origin')).toBe('*');
    expect(plain.headers.get('cache-control')).toMatch(/public, max-age=\d+/);
    expect(plain.headers.get('content-security-policy')).toBeNull();
    expect(text).toContain('attachShadow');
    expect(text).toContain('SafeMarkdown');
    // One function scope: nothing leaks to the host page's globals.
    expect(text.trim().endsWith('})();')).toBe(true);

    const zipped = await fetch(`${t.baseUrl}/widget.js`, { headers: { 'accept-encoding': 'gzip' }, decompress: false } as RequestInit);
    const gzipped = Buffer.from(await zipped.arrayBuffer());
    // fetch (undici) may have decompressed it anyway: compare with what the server says it sent.
    if (zipped.headers.get('content-encoding') === 'gzip' && gzipped[0] === 0x1f) expect(gunzipSync(gzipped).toString('utf8')).toBe(text);
    const revalidated = await fetch(`${t.baseUrl}/widget.js`, { headers: { 'if-none-match': plain.headers.get('etag')! } });
    expect(revalidated.status).toBe(304);
    const { gzipSync } = await import('node:zlib');
    const size = gzipSync(Buffer.from(text), { level: 9 }).length;
    console.log(`widget.js: ${Buffer.byteLength(text)} bytes, ${size} bytes gzipped`);
    expect(size).toBeLessThan(10_000);
  });

  it('answers the configuration to an allowed origin only, with CORS headers for that origin only', async () => {
    const allowed = await call('GET', `/widget/v1/${publicId}/config`);
    expect(allowed.status).toBe(200);
    expect(allowed.headers.get('access-control-allow-origin')).toBe(SITE);
    expect(allowed.headers.get('vary')).toMatch(/Origin/);
    expect(allowed.json).toMatchObject({ title: 'Shop helper', theme: 'light', position: 'bottom-right', accent_color: '#1e66f5', branding: null });
    expect(JSON.stringify(allowed.json)).not.toContain(workspace.id);

    for (const origin of [OTHER_SITE, 'https://shop.example.com.evil.net', 'http://shop.example.com', 'null', `${SITE}:8443`]) {
      const forged = await call('GET', `/widget/v1/${publicId}/config`, { origin });
      expect(forged.status).toBe(403);
      expect(forged.json.error).toMatchObject({ type: 'permission_denied', code: 'origin_not_allowed' });
      expect(forged.headers.get('access-control-allow-origin')).toBeNull();
    }
    const withoutOrigin = await call('GET', `/widget/v1/${publicId}/config`, { origin: null });
    expect(withoutOrigin.status).toBe(403);
    expect(withoutOrigin.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('answers preflights for allowed origins only', async () => {
    const ok = await fetch(`${t.baseUrl}/widget/v1/${publicId}/messages`, {
      method: 'OPTIONS',
      headers: { origin: SITE, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type' },
    });
    expect(ok.status).toBe(204);
    expect(ok.headers.get('access-control-allow-origin')).toBe(SITE);
    expect(ok.headers.get('access-control-allow-methods')).toContain('POST');
    expect(ok.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('content-type');
    const refused = await fetch(`${t.baseUrl}/widget/v1/${publicId}/messages`, {
      method: 'OPTIONS',
      headers: { origin: OTHER_SITE, 'access-control-request-method': 'POST' },
    });
    expect(refused.status).toBe(403);
    expect(refused.headers.get('access-control-allow-origin')).toBeNull();
  });

  it('refuses an unknown or malformed widget id with 404, and a disabled widget with 403', async () => {
    for (const id of ['wgt_AAAAAAAAAAAAAAAAAAAA', 'nope', encodeURIComponent("wgt_' OR 1=1 --")]) {
      const unknown = await call('GET', `/widget/v1/${id}/config`);
      expect(unknown.status).toBe(404);
      expect(unknown.json.error).toMatchObject({ type: 'not_found', code: 'widget_not_found' });
    }
    const disabled = await call('GET', `/widget/v1/${disabledId}/config`);
    expect(disabled.status).toBe(403);
    expect(disabled.json.error.code).toBe('widget_disabled');
    const message = await send(disabledId, 'vt_never-issued', 'Hello?');
    expect(message.status).toBe(403);
    expect(message.json.error.code).toBe('widget_disabled');
  });

  it('streams an answer charged to the wallet, with a usage record from the widget for the visitor, kept as their conversation', async () => {
    const token = await newVisitor();
    const id = visitorIdOf(token);
    upstream.script({ kind: 'text', text: 'Hello **there**, shopper.', usage: USAGE });
    const before = await balance();
    const answer = await send(publicId, token, 'Do you ship to Norway?');
    expect(answer.status).toBe(200);
    expect(answer.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(answer.headers.get('access-control-allow-origin')).toBe(SITE);
    expect(streamedText(answer)).toBe('Hello **there**, shopper.');
    expect(answer.text.trim().endsWith('data: [DONE]')).toBe(true);
    // Only the words reach the page: no cost, no model, no ids of the workspace.
    expect(answer.text).not.toMatch(/x_service|cost|gpt-4o-mini|chatcmpl/);
    expect(await balanceAfter(before)).toBe(before - COST);

    const records = await db.query(`SELECT source, user_id, status, total_cost_millicents::float AS cost, api_key_id FROM usage_records WHERE workspace_id = $1 AND user_id = $2`, [workspace.id, id]);
    expect(records).toEqual([{ source: 'widget', user_id: id, status: 'success', cost: COST, api_key_id: null }]);
    // The upstream got the assistant's system prompt and the visitor's message.
    const sent = upstream.requests.at(-1)!.body.messages as Array<{ role: string; content: string }>;
    expect(sent[0]).toMatchObject({ role: 'system', content: 'You help shoppers.' });
    expect(sent.at(-1)).toMatchObject({ role: 'user', content: 'Do you ship to Norway?' });

    // The second message continues the same conversation (its history goes upstream).
    upstream.script({ kind: 'text', text: 'Yes, in 3 days.', usage: USAGE });
    const second = await send(publicId, token, 'How long does it take?');
    expect(streamedText(second)).toBe('Yes, in 3 days.');
    const history = (upstream.requests.at(-1)!.body.messages as Array<{ content: string }>).map((m) => m.content);
    expect(history).toEqual(['You help shoppers.', 'Do you ship to Norway?', 'Hello **there**, shopper.', 'How long does it take?']);

    const transcript = await call('GET', conversationPath(publicId, token));
    expect(transcript.status).toBe(200);
    expect(transcript.json).toEqual({
      messages: [
        { role: 'user', content: 'Do you ship to Norway?' },
        { role: 'assistant', content: 'Hello **there**, shopper.' },
        { role: 'user', content: 'How long does it take?' },
        { role: 'assistant', content: 'Yes, in 3 days.' },
      ],
      can_continue: true,
    });
    const [conversation] = await db.query(`SELECT user_id, source, metadata FROM conversations WHERE workspace_id = $1 AND user_id = $2`, [workspace.id, id]);
    expect(conversation).toEqual({ user_id: id, source: 'widget', metadata: { widget: publicId } });

    // Another visitor sees nothing of it.
    expect((await call('GET', conversationPath(publicId, await newVisitor()))).json.messages).toEqual([]);
    // Starting over: the next message opens a new conversation.
    expect((await call('DELETE', conversationPath(publicId, token))).status).toBe(204);
    expect((await call('GET', conversationPath(publicId, token))).json.messages).toEqual([]);
  });

  it('shows visitors the sources an answer cites only when its owner turns it on (off by default)', async () => {
    const assistants = t.app.get(AssistantsService);
    const widgets = t.app.get(WidgetsService);
    const ids: Record<string, string> = {};
    for (const showSources of [false, true]) {
      const name = showSources ? 'Open librarian' : 'Discreet librarian';
      const assistant = await assistants.create(workspace.id, { name, model: 'gpt-4o-mini', tools: ['file_search'] });
      await t.app.get(DocumentsService).add({ workspaceId: workspace.id, assistantId: assistant.id, fileName: 'returns-policy.md', data: Buffer.from('Returns are accepted within 30 days.') });
      const settings = { ...defaultWidgetSettings(name), enabled: true, allowedOrigins: [SITE] };
      expect(settings.showSources).toBe(false);
      ids[String(showSources)] = (await widgets.save(workspace.id, assistant.id, { ...settings, showSources })).publicId;
    }
    for (const [shown, id] of Object.entries(ids)) {
      const token = await newVisitor(id);
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_fs', name: 'file_search', arguments: '{"query":"returns"}' }] }, { kind: 'text', text: 'Within 30 days [1].' });
      const answer = await send(id, token, 'How long for returns?');
      expect(streamedText(answer)).toBe('Within 30 days [1].');
      const events = answer.text.split('\n').filter((line) => line.startsWith('data: {')).map((line) => JSON.parse(line.slice(6)) as { sources?: unknown });
      const sources = events.flatMap((event) => (event.sources ? [event.sources] : []));
      const transcript = (await call('GET', conversationPath(id, token))).json.messages as Array<{ role: string; sources?: unknown }>;
      if (shown === 'true') {
        expect(sources).toEqual([[{ label: 'returns-policy.md', url: null }]]);
        expect(transcript.at(-1)).toMatchObject({ role: 'assistant', sources: [{ label: 'returns-policy.md', url: null }] });
      } else {
        expect(sources).toEqual([]);
        expect(answer.text).not.toContain('returns-policy.md');
        expect(transcript.at(-1)!.sources).toBeUndefined();
      }
    }
  });

  it('refuses a malformed visitor id, an empty or too long message, and a bad body, with 400 naming the field', async () => {
    const token = await newVisitor();
    // A visitor id made up as the widget made them before tokens is refused too.
    for (const bad of ['', 'v_123', `v_${'a'.repeat(32)}`, `v_${'G'.repeat(32)}`, `${token}x`, 42]) {
      const answer = await call('POST', `/widget/v1/${publicId}/messages`, { body: { visitor: bad, message: 'Hi' } });
      expect(answer.status).toBe(400);
      expect(answer.json.error).toMatchObject({ code: 'invalid_visitor_id', param: 'visitor' });
    }
    expect((await call('GET', `/widget/v1/${publicId}/conversation?visitor=../../etc`)).status).toBe(400);
    expect((await send(publicId, token, '   ')).json.error.param).toBe('message');
    const long = await send(publicId, token, 'x'.repeat(2_001));
    expect(long.status).toBe(400);
    expect(long.json.error.code).toBe('message_too_long');
    const notJson = await fetch(`${t.baseUrl}/widget/v1/${publicId}/messages`, { method: 'POST', headers: { origin: SITE, 'content-type': 'application/json' }, body: '{"visitor":' });
    expect(notJson.status).toBe(400);
    expect(await db.query(`SELECT 1 FROM usage_records WHERE user_id = $1`, [visitorIdOf(token)])).toEqual([]);
  });

  it('limits each visitor to its rate (429 with Retry-After, readable by the page); other visitors go on', async () => {
    const token = await newVisitor();
    upstream.setDefault({ kind: 'text', text: 'ok', usage: USAGE });
    for (let i = 0; i < VISITOR_RATE_LIMIT_RPM; i++) expect((await send(publicId, token, `message ${i}`)).status).toBe(200);
    const limited = await send(publicId, token, 'one more');
    expect(limited.status).toBe(429);
    // Told as to a website visitor, not an operator.
    expect(limited.json.error).toMatchObject({ type: 'rate_limit_exceeded', message: "You're sending messages quickly; wait a moment." });
    expect(Number(limited.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.headers.get('access-control-allow-origin')).toBe(SITE);
    expect(limited.headers.get('access-control-expose-headers')).toMatch(/Retry-After/);
    expect((await send(publicId, await newVisitor(), 'hello')).status).toBe(200);
    // The refused message ran nothing: one usage record per answered message.
    const [{ count }] = await db.query(`SELECT count(*)::int AS count FROM usage_records WHERE user_id = $1`, [visitorIdOf(token)]);
    expect(count).toBe(VISITOR_RATE_LIMIT_RPM);
  });

  it('decides branding from the tier at each request, and follows a tier change at once', async () => {
    const workspaces = t.app.get(WorkspacesService);
    await workspaces.setTier(workspace.id, 'free');
    const free = await call('GET', `/widget/v1/${publicId}/config`);
    expect(free.json.branding).toEqual({ text: 'Powered by Assistant Chat Service', url: `${t.baseUrl}/` });
    await workspaces.setTier(workspace.id, 'pro');
    expect((await call('GET', `/widget/v1/${publicId}/config`)).json.branding).toBeNull();
    await workspaces.setTier(workspace.id, 'hobby');
    expect((await call('GET', `/widget/v1/${publicId}/config`)).json.branding).toMatchObject({ text: 'Powered by Assistant Chat Service' });
    await workspaces.setTier(workspace.id, 'team');
  });

  it('tells a visitor of a workspace with an empty wallet that the chat is unavailable, and charges nothing', async () => {
    const empty = await t.createWorkspace({ tier: 'team', balanceMillicents: 0 });
    const assistant = await t.app.get(AssistantsService).create(empty.id, { name: 'Broke', model: 'gpt-4o-mini' });
    const widget = await t.app.get(WidgetsService).save(empty.id, assistant.id, { ...defaultWidgetSettings('Broke'), enabled: true, allowedOrigins: [SITE] });
    const requestsBefore = upstream.requests.length;
    const token = await newVisitor(widget.publicId);
    const answer = await send(widget.publicId, token, 'Hello?');
    expect(answer.status).toBe(402);
    expect(answer.headers.get('access-control-allow-origin')).toBe(SITE);
    expect(answer.json.error.message).toBe('This chat is not available at the moment. Please try again later.');
    expect(answer.json.error.message).not.toMatch(/balance|millicent|wallet/i);
    expect(upstream.requests.length).toBe(requestsBefore);
    // Nothing stored for the refused message: no conversation for the visitor.
    expect((await call('GET', conversationPath(widget.publicId, token))).json.messages).toEqual([]);
    expect(await db.query(`SELECT 1 FROM conversations WHERE workspace_id = $1`, [empty.id])).toEqual([]);
  });

  it('refuses everything of a suspended workspace\'s widget (configuration, visitor tokens, messages, transcript) with a visitor\'s wording, until it is resumed', async () => {
    const suspended = await t.createWorkspace({ tier: 'team', balanceMillicents: 100_000 });
    const assistant = await t.app.get(AssistantsService).create(suspended.id, { name: 'Paused', model: 'gpt-4o-mini' });
    const widget = await t.app.get(WidgetsService).save(suspended.id, assistant.id, { ...defaultWidgetSettings('Paused'), enabled: true, allowedOrigins: [SITE] });
    const token = await newVisitor(widget.publicId);
    // The operator's suspend (OperatorConsoleService.setStatus) writes this column; the widget reads it at each request, on every replica.
    await db.query(`UPDATE workspaces SET status = 'suspended' WHERE id = $1`, [suspended.id]);
    const requestsBefore = upstream.requests.length;
    const refusals = [
      await call('GET', `/widget/v1/${widget.publicId}/config`),
      await call('POST', `/widget/v1/${widget.publicId}/visitors`, { body: {} }),
      await call('POST', `/widget/v1/${widget.publicId}/visitors`, { body: { visitor: token } }),
      await send(widget.publicId, token, 'Hello?'),
      await call('GET', conversationPath(widget.publicId, token)),
      await call('DELETE', conversationPath(widget.publicId, token)),
    ];
    for (const refused of refusals) {
      expect(refused.status).toBe(403);
      // Readable by the page, which shows the message.
      expect(refused.headers.get('access-control-allow-origin')).toBe(SITE);
      expect(refused.json.error).toMatchObject({
        type: 'permission_denied',
        code: 'workspace_suspended',
        message: 'This chat is not available at the moment. Please try again later.',
      });
    }
    expect(upstream.requests.length).toBe(requestsBefore);

    await db.query(`UPDATE workspaces SET status = 'active' WHERE id = $1`, [suspended.id]);
    expect((await call('GET', `/widget/v1/${widget.publicId}/config`)).status).toBe(200);
    expect((await send(widget.publicId, token, 'Hello again?')).status).toBe(200);
  });

  it('limits the reads of one address to one widget (429 after the limit), without touching other widgets', async () => {
    const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: 'Busy', model: 'gpt-4o-mini' });
    const busy = await t.app.get(WidgetsService).save(workspace.id, assistant.id, { ...defaultWidgetSettings('Busy'), enabled: true, allowedOrigins: [SITE] });
    const statuses: number[] = [];
    for (let i = 0; i <= READ_RATE_LIMIT_RPM; i++) statuses.push((await fetch(`${t.baseUrl}/widget/v1/${busy.publicId}/config`, { headers: { origin: SITE } })).status);
    expect(statuses.slice(0, READ_RATE_LIMIT_RPM).every((status) => status === 200)).toBe(true);
    expect(statuses.at(-1)).toBe(429);
    expect((await call('GET', `/widget/v1/${publicId}/config`)).status).toBe(200);
  });

  // Last of the requests: it spends this address's budget for the minute.
  it('limits all widget requests of one address before any lookup: made-up widget ids get 429 past the limit', async () => {
    const made = (i: number) => `/widget/v1/wgt_${String(i).padStart(20, '0')}/config`;
    const statuses: number[] = [];
    // Until the first 429: a minute boundary on the way starts the count again, so at most two windows' worth.
    for (let start = 0; !statuses.includes(429) && start <= 2 * ADDRESS_REQUEST_RATE_LIMIT_RPM; start += 50) {
      const batch = Array.from({ length: 50 }, (_, i) => start + i);
      statuses.push(...(await Promise.all(batch.map(async (i) => (await fetch(`${t.baseUrl}${made(i)}`, { headers: { origin: SITE } })).status))));
    }
    expect(new Set(statuses)).toEqual(new Set([404, 429]));
    // A real widget from the same address is refused too, until the minute is over.
    expect((await call('GET', `/widget/v1/${publicId}/config`)).status).toBe(429);
  });

  it('never shows an API key: no body or header of this file had one', () => {
    expect(bodies.length).toBeGreaterThan(20);
    for (const body of bodies) {
      expect(body).not.toMatch(API_KEY_PATTERN);
      expect(body).not.toContain(workspace.apiKey);
    }
  });
});
