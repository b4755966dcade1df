import fc from 'fast-check';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * Property: whatever strings and nesting a client sends through the fields that are stored
 * or filtered on, the answer is never a 5xx, and an error always has the one error shape.
 * Runs are few (the suite must stay fast); a failure prints the seed and the shrunk input.
 */
const RUNS = 30;
const MODEL = 'gpt-4o-mini';

/** Stands for a deeply nested value inside JSON built with JSON.stringify (which would recurse). */
const NESTED = '\u0001nested\u0001';

/** Pieces that broke or nearly broke the service. */
const hostilePiece = fc.constantFrom('\u0000', '\ud800', '\udfff', '\udbff', '\udc00\ud800', '\u2028', '%00', '\\');
/**
 * Mostly text that must be stored as it is (any code point, emoji, quotes, SQL and markup
 * characters), sometimes with a piece no field may hold: both must end well.
 */
const hostileString = fc.oneof(
  { weight: 3, arbitrary: fc.string({ unit: 'binary', maxLength: 12 }) },
  { weight: 1, arbitrary: fc.constantFrom('😀 ok', "O'Brien; DROP TABLE x;--", '<mark>x</mark>', '"quoted"', 'a\\b') },
  { weight: 2, arbitrary: fc.array(fc.oneof(hostilePiece, fc.string({ maxLength: 4 })), { minLength: 1, maxLength: 5 }).map((pieces) => pieces.join('')) },
);

/** A string, or (as a value) an array nested this many levels: inside the limit or far past it. */
const depth = fc.oneof(fc.integer({ min: 1, max: 70 }), fc.integer({ min: 1000, max: 6000 }));
const hostileValue = fc.oneof(
  { weight: 6, arbitrary: hostileString },
  { weight: 1, arbitrary: depth.map((levels) => ({ [NESTED]: levels })) },
);
const hostileMetadata = fc.dictionary(hostileString, hostileValue, { maxKeys: 4 });

/** JSON text of `value`, with each `{NESTED: n}` written as n nested arrays. */
function toJson(value: unknown): string {
  return JSON.stringify(value, (_key, item: unknown) =>
    item && typeof item === 'object' && NESTED in item ? `${NESTED}${(item as Record<string, number>)[NESTED]}` : item,
  ).replace(new RegExp(`"${NESTED}(\\d+)"`, 'g'), (_match, levels: string) => '['.repeat(Number(levels)) + ']'.repeat(Number(levels)));
}

/** Any bytes, percent-encoded: NUL, halves of surrogates in CESU-8, invalid UTF-8 and all. */
const queryValue = fc
  .uint8Array({ maxLength: 12 })
  .map((bytes) => [...bytes].map((byte) => `%${byte.toString(16).padStart(2, '0')}`).join(''));

describe('hostile input, property-based', () => {
  let t: TestApp;
  let workspace: TestWorkspace;
  let conversationId: string;

  beforeAll(async () => {
    t = await startTestApp();
    workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000_000 });
    conversationId = ((await workspace.client.post('/conversations', { body: { title: 'property' } })) as { id: string }).id;
  });
  afterAll(() => t.close());

  async function call(method: string, url: string, body?: string) {
    const response = await fetch(`${t.baseUrl}${url}`, {
      method,
      headers: { Authorization: `Bearer ${workspace.apiKey}`, ...(body !== undefined ? { 'Content-Type': 'application/json' } : {}) },
      body,
    });
    return { status: response.status, type: response.headers.get('content-type') ?? '', text: await response.text() };
  }

  /** Never a 5xx; every error in the one shape; no error in-band in a stream either. */
  function expectNoServerError(answer: { status: number; type: string; text: string }, request: string): void {
    expect({ request, status: answer.status < 500 ? 'not 5xx' : answer.status }).toEqual({ request, status: 'not 5xx' });
    if (answer.type.startsWith('text/event-stream')) {
      expect(answer.text).not.toContain('"error"');
      return;
    }
    if (answer.status >= 400) {
      const body = JSON.parse(answer.text) as { error: Record<string, unknown> };
      expect(Object.keys(body)).toEqual(['error']);
      const { type, message, code, param, ...rest } = body.error;
      expect({ type: typeof type, message: typeof message, code: code === null ? 'string' : typeof code, param: param === null ? 'string' : typeof param, rest }).toEqual({
        type: 'string',
        message: 'string',
        code: 'string',
        param: 'string',
        rest: {},
      });
    }
  }

  it('chat: ids, message fields and metadata', async () => {
    const message = fc.record(
      {
        role: fc.constantFrom('user', 'user', 'system'),
        content: fc.oneof(hostileValue, fc.array(hostileString.map((text) => ({ type: 'text', text })), { minLength: 1, maxLength: 2 })),
        name: hostileString,
        tool_call_id: hostileString,
      },
      { requiredKeys: ['role', 'content'] },
    );
    // An assistant id sends the request to assistant mode (a 404 for any of these): only sometimes.
    const assistantId = fc.oneof({ weight: 4, arbitrary: fc.constant(null) }, { weight: 1, arbitrary: hostileString });
    const request = fc.record(
      {
        model: fc.constant(MODEL),
        messages: fc.array(message, { minLength: 1, maxLength: 3 }),
        stream: fc.boolean(),
        user_id: hostileString,
        subscription_id: hostileString,
        conversation_id: fc.oneof({ weight: 3, arbitrary: fc.constant('CONVERSATION') }, { weight: 1, arbitrary: hostileString }),
        metadata: hostileMetadata,
      },
      { requiredKeys: ['model', 'messages'] },
    );
    await fc.assert(
      fc.asyncProperty(request, assistantId, async (fields, assistant_id) => {
        const body = assistant_id === null ? fields : { ...fields, assistant_id };
        const json = toJson(body).replace('"CONVERSATION"', JSON.stringify(conversationId));
        expectNoServerError(await call('POST', '/v1/chat/completions', json), json);
      }),
      { numRuns: RUNS },
    );
  });

  it('conversations: create and update', async () => {
    const fields = fc.record(
      {
        title: hostileValue,
        user_id: hostileString,
        metadata: hostileMetadata,
        status: fc.oneof({ weight: 3, arbitrary: fc.constantFrom('active', 'archived') }, { weight: 1, arbitrary: hostileString }),
        // Any assistant id but a real one is a 404: only sometimes.
        assistant_id: fc.oneof({ weight: 3, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: hostileString }),
      },
      { requiredKeys: [] },
    );
    await fc.assert(
      fc.asyncProperty(fields, fc.boolean(), async (body, create) => {
        const json = toJson(create ? { ...body, status: undefined } : { ...body, user_id: undefined, assistant_id: undefined });
        const answer = create
          ? await call('POST', '/v1/conversations', json)
          : await call('PATCH', `/v1/conversations/${conversationId}`, json);
        expectNoServerError(answer, json);
      }),
      { numRuns: RUNS },
    );
  });

  it('filters: list, search, usage and conversation ids in the path', async () => {
    const lookup = fc.oneof(
      fc.record({ user_id: queryValue, assistant_id: queryValue }).map((q) => `/v1/conversations?user_id=${q.user_id}&assistant_id=${q.assistant_id}`),
      fc.record({ q: queryValue, user_id: queryValue }).map((q) => `/v1/conversations/search?q=${q.q}x&user_id=${q.user_id}`),
      fc.record({ user_id: queryValue, model: queryValue }).map((q) => `/v1/usage/recent?user_id=${q.user_id}&model=${q.model}`),
      queryValue.map((id) => `/v1/conversations/${id}`),
      queryValue.map((name) => `/v1/conversations?${name}[${name}]=${name}`),
    );
    await fc.assert(
      fc.asyncProperty(lookup, async (url) => expectNoServerError(await call('GET', url), url)),
      { numRuns: RUNS * 2 },
    );
  });
});
