import fc from 'fast-check';
import { DashboardClient, signIn, signUp, SignedUpPerson } from './support/dashboard-client';
import { startTestApp, TestApp, TestWorkspace, testConfig } from './support/test-app';

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

/**
 * Every route the app serves, found in its Express router (so a new endpoint is covered
 * without touching this file), with the parameter and field names of the OpenAPI document:
 * thousands of generated requests with hostile path segments, query strings and bodies
 * (wrong types, huge numbers, deep nesting, NUL bytes, unpaired surrogates, tsquery syntax,
 * impossible dates, bodies that are not JSON). Never a 5xx; every API error in the one
 * error shape; no dashboard page shows a stack trace. Dashboard routes are called by a
 * signed-in owner with a valid CSRF token, so the forms reach their handlers.
 */
describe('hostile input to every endpoint, property-based', () => {
  /** Generated requests per API route and per dashboard route (about 2,500 in all). */
  const API_RUNS = 50;
  const PAGE_RUNS = 10;

  interface Route {
    method: string;
    /** Express notation: `/v1/conversations/:id`. */
    path: string;
  }
  interface Operation {
    query: string[];
    body: string[];
  }
  type OpenApi = {
    paths: Record<string, Record<string, { parameters?: { name: string; in: string }[]; requestBody?: { content?: Record<string, { schema?: Schema }> } }>>;
    components: { schemas: Record<string, Schema> };
  };
  type Schema = { $ref?: string; properties?: Record<string, unknown>; allOf?: Schema[] };

  let t: TestApp;
  let workspace: TestWorkspace;
  let conversationId: string;
  let dashboard: DashboardClient;
  let owner: SignedUpPerson;
  let routes: Route[];
  let openApi: OpenApi;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0, dashboard: { ...testConfig().dashboard, signup: 'open' } } });
    workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000_000 });
    conversationId = ((await workspace.client.post('/conversations', { body: { title: 'property' } })) as { id: string }).id;
    owner = await signUp(t.baseUrl, { email: 'owner@hostile.test', name: 'Owner' });
    dashboard = owner.client;
    routes = routesOf(t);
    openApi = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as OpenApi;
  });
  afterAll(() => t?.close());

  /** Method and path of every route handler registered with Express (Nest's controllers among them). */
  function routesOf(app: TestApp): Route[] {
    const express = app.app.getHttpAdapter().getInstance() as { router?: { stack: Layer[] }; _router?: { stack: Layer[] } };
    type Layer = { route?: { path: string | string[]; methods: Record<string, boolean> } };
    const found = new Map<string, Route>();
    for (const layer of (express.router ?? express._router)!.stack) {
      if (!layer.route) continue;
      for (const path of [layer.route.path].flat()) {
        for (const [method, on] of Object.entries(layer.route.methods)) {
          if (!on || !['get', 'post', 'put', 'patch', 'delete', '_all'].includes(method)) continue;
          // `@All()` (the API's unknown-route answer): as a GET and as a POST.
          for (const verb of method === '_all' ? ['get', 'post'] : [method]) found.set(`${verb} ${path}`, { method: verb.toUpperCase(), path });
        }
      }
    }
    // Express 5 wildcards (`/*path`, `{*id}`) are parameters like the others here.
    return [...found.values()].map((route) => ({ ...route, path: route.path.replace(/\{\*(\w+)\}|\*(\w+)/g, (_m, a?: string, b?: string) => `:${a ?? b}`) }));
  }

  function operationOf(route: Route): Operation {
    const documented = openApi.paths[route.path.replace(/:(\w+)/g, '{$1}')]?.[route.method.toLowerCase()];
    const schema = documented?.requestBody?.content?.['application/json']?.schema;
    return {
      query: (documented?.parameters ?? []).filter((p) => p.in === 'query').map((p) => p.name),
      body: propertiesOf(schema),
    };
  }

  function propertiesOf(schema: Schema | undefined, depth = 0): string[] {
    if (!schema || depth > 5) return [];
    if (schema.$ref) return propertiesOf(openApi.components.schemas[schema.$ref.split('/').pop()!], depth + 1);
    return [...Object.keys(schema.properties ?? {}), ...(schema.allOf ?? []).flatMap((part) => propertiesOf(part, depth + 1))];
  }

  const isApi = (route: Route) => route.path.startsWith('/v1') || route.path.startsWith('/health') || route.path.startsWith('/widget/v1');

  /** Scalars a typed field chokes on: the wrong type, numbers past any range, impossible dates. */
  const wrongScalar = fc.oneof(
    fc.constantFrom(
      1e308, -1e308, 2 ** 64, -(2 ** 63), 0.1 + 0.2, -0, Number.MAX_SAFE_INTEGER + 2, 1e-320,
      true, false, null, '', ' ', '0', '-1', '1e309', 'NaN', 'Infinity', '0x1F', '١٢٣',
      '2024-02-30', '2023-13-01', '0000-00-00', '9999-12-31T25:61:61Z', '2024-02-29T24:00:00+25:00', '1970-01-01T00:00:00.000000001Z',
      'a & b | !c <-> d:*', "'quoted':* & (", '!!!', '(((', '""', '" or', '-', 'or', '*:*', '\\', ':*',
    ),
    hostileString,
    fc.integer(),
    fc.double(),
  );
  /** Any JSON value: scalars, arrays, objects, and nesting far past any limit. */
  const wrongValue: fc.Arbitrary<unknown> = fc.oneof(
    { weight: 6, arbitrary: wrongScalar },
    { weight: 2, arbitrary: fc.array(wrongScalar, { maxLength: 3 }) },
    { weight: 2, arbitrary: fc.dictionary(hostileString, wrongScalar, { maxKeys: 3 }) },
    { weight: 1, arbitrary: depth.map((levels) => ({ [NESTED]: levels })) },
  );
  /** What a sane client would send for a field, so that some requests pass validation and reach the service. */
  const plausibleValue = fc.constantFrom<unknown>('gpt-4o-mini', 'hello', 1, 10, true, false, [{ role: 'user', content: 'hi' }], {}, 'active', 'CONVERSATION');

  /** A JSON body over the operation's documented fields and a few others, or text that is not JSON at all. */
  const bodyOf = (fields: string[]) =>
    fc.oneof(
      {
        weight: 8,
        arbitrary: fc
          .tuple(
            fc.subarray(fields),
            fc.array(fc.oneof(wrongValue, plausibleValue), { minLength: fields.length, maxLength: fields.length }),
            fc.dictionary(hostileString, wrongValue, { maxKeys: 2 }),
          )
          .map(([chosen, values, extra]) => toJson({ ...extra, ...Object.fromEntries(chosen.map((name, i) => [name, values[i]])) })),
      },
      { weight: 1, arbitrary: wrongValue.map((value) => toJson(value)) },
      { weight: 1, arbitrary: fc.constantFrom('{"a":', '{"a":1}}', '\u0000', '[[[[', 'null', '1e999', '{"__proto__": {"x": 1}}', '{"constructor": {"prototype": {}}}', 'x'.repeat(5000)) },
    );

  /** A query value as it would appear in a URL: raw bytes percent-encoded, specials, or a bracketed array/object. */
  const queryPart = (names: string[]) =>
    fc
      .tuple(
        fc.constantFrom(...names, 'limit', 'from', 'to', 'q', 'starting_after', 'x'),
        fc.oneof(
          queryValue,
          wrongScalar.map((value) => percentEncoded(String(value))),
          fc.constantFrom('%00', '%ED%A0%80', '%FF', '%', '%%', '%E0%A4%A', '&&', '=='),
        ),
        fc.constantFrom('', '[]', '[a]', '[__proto__]'),
      )
      .map(([name, value, shape]) => `${name}${shape}=${value}`);

  /** Every UTF-8 byte percent-encoded (a lone surrogate becomes U+FFFD, as any client would send it). */
  const percentEncoded = (text: string) => [...Buffer.from(text, 'utf8')].map((byte) => `%${byte.toString(16).padStart(2, '0')}`).join('');

  /** A path segment for a route parameter: a real id sometimes, else anything. */
  const segment = (real: string) =>
    fc.oneof(
      { weight: 2, arbitrary: fc.constant(real) },
      { weight: 3, arbitrary: queryValue.map((bytes) => bytes || 'x') },
      { weight: 1, arbitrary: fc.constantFrom('00000000-0000-0000-0000-000000000000', '..%2F..%2Fetc', '99999999999999999999999', 'assistant%2Fx', '%20', 'a'.repeat(3000)) },
    );

  function realIdFor(route: Route, parameter: string): string {
    if (parameter === 'workspaceId') return isApi(route) ? workspace.id : owner.workspaceId;
    if (route.path.startsWith('/v1/conversations')) return conversationId;
    if (route.path.startsWith('/v1/models')) return 'gpt-4o-mini';
    return '00000000-0000-0000-0000-000000000000';
  }

  const requestFor = (route: Route) => {
    const operation = operationOf(route);
    const parameters = [...route.path.matchAll(/:(\w+)/g)].map((match) => match[1]);
    return fc.record({
      segments: fc.tuple(...parameters.map((name) => segment(realIdFor(route, name)))),
      query: fc.array(queryPart(operation.query), { maxLength: 4 }),
      body: route.method === 'GET' || route.method === 'HEAD' ? fc.constant(undefined) : bodyOf(operation.body),
      // Mostly JSON; sometimes a type the API does not take, or JSON in a charset it does not speak.
      contentType: fc.oneof(
        { weight: 6, arbitrary: fc.constant('application/json') },
        { weight: 1, arbitrary: fc.constantFrom('text/plain', 'application/x-www-form-urlencoded', 'application/json; charset=latin1', 'multipart/form-data; boundary=x', 'application/xml') },
      ),
      form: fc.dictionary(fc.oneof(fc.constantFrom(...operation.body, 'name', 'email', 'title', 'amount', 'threshold', 'role', 'q'), hostileString), fc.oneof(hostileString, wrongScalar.map(String)), { maxKeys: 4 }),
    }).map(({ segments, query, body, contentType, form }) => {
      let index = 0;
      const path = route.path.replace(/:(\w+)/g, () => segments[index++]);
      return { url: `${path}${query.length ? `?${query.join('&')}` : ''}`, body: body?.replace('"CONVERSATION"', JSON.stringify(conversationId)), contentType, form };
    });
  };

  async function send(route: Route, request: { url: string; body?: string; contentType: string }) {
    const response = await fetch(`${t.baseUrl}${request.url}`, {
      method: route.method,
      headers: { Authorization: `Bearer ${workspace.apiKey}`, ...(request.body !== undefined ? { 'Content-Type': request.contentType } : {}) },
      body: request.body,
      redirect: 'manual',
    });
    return { status: response.status, type: response.headers.get('content-type') ?? '', text: await response.text() };
  }

  /** Never a 5xx; an error in its API's one shape (a stream may end with an in-band error, which is in the shape too). */
  function expectApiAnswer(answer: { status: number; type: string; text: string }, request: string) {
    expect({ request, status: answer.status < 500 ? 'not 5xx' : `${answer.status} ${answer.text.slice(0, 300)}` }).toEqual({ request, status: 'not 5xx' });
    if (answer.status < 400 || answer.type.startsWith('text/event-stream')) return;
    expect({ request, type: answer.type.split(';')[0] }).toEqual({ request, type: 'application/json' });
    const body = JSON.parse(answer.text) as { type?: unknown; error: Record<string, unknown> };
    // The Anthropic Messages API answers in Anthropic's shape, with our code and param inside `error`.
    if (/ \/v1\/messages\b/.test(request)) expect({ request, keys: Object.keys(body).sort(), type: body.type }).toEqual({ request, keys: ['error', 'request_id', 'type'], type: 'error' });
    else expect(Object.keys(body)).toEqual(['error']);
    const { type, message, code, param } = body.error;
    expect({ request, type: typeof type, message: typeof message, code: code === null || typeof code === 'string', param: param === null || typeof param === 'string' }).toEqual({
      request,
      type: 'string',
      message: 'string',
      code: true,
      param: true,
    });
  }

  it('finds every documented endpoint among the routes it covers', () => {
    const covered = new Set(routes.map((route) => `${route.method} ${route.path.replace(/:(\w+)/g, '{$1}')}`));
    const documented = Object.entries(openApi.paths).flatMap(([path, methods]) => Object.keys(methods).map((method) => `${method.toUpperCase()} ${path}`));
    expect(documented.filter((operation) => !covered.has(operation))).toEqual([]);
    expect(routes.filter((route) => !isApi(route)).length).toBeGreaterThan(10);
    console.log(`hostile input: ${routes.filter(isApi).length} API routes x ${API_RUNS} and ${routes.filter((r) => !isApi(r)).length} dashboard routes x ${PAGE_RUNS}`);
  });

  it('answers every API route without a 5xx, errors in the one shape', async () => {
    const statuses: Record<number, number> = {};
    for (const route of routes.filter(isApi)) {
      await fc.assert(
        fc.asyncProperty(requestFor(route), async (request) => {
          const answer = await send(route, request);
          statuses[answer.status] = (statuses[answer.status] ?? 0) + 1;
          expectApiAnswer(answer, `${route.method} ${request.url} ${request.contentType} ${request.body?.slice(0, 500) ?? ''}`);
        }),
        { numRuns: API_RUNS },
      );
    }
    console.log(`hostile input to the API, answers by status: ${JSON.stringify(statuses)}`);
    expect(Object.values(statuses).reduce((sum, n) => sum + n, 0)).toBeGreaterThanOrEqual(routes.filter(isApi).length * API_RUNS);
    // Not everything was turned away at the door: some requests passed validation and were served.
    expect(statuses[200]).toBeGreaterThan(100);
  }, 240_000);

  it('answers every dashboard route, signed in with a valid CSRF token, without a 5xx or a stack trace', async () => {
    const statuses: Record<number, number> = {};
    for (const route of routes.filter((r) => !isApi(r))) {
      // Signing out would end the session the other routes are called with.
      const client = route.path === '/logout' ? new DashboardClient(t.baseUrl) : dashboard;
      await fc.assert(
        fc.asyncProperty(requestFor(route), async (request) => {
          const answer = route.method === 'POST' ? await client.post(request.url, request.form) : await client.get(request.url);
          statuses[answer.status] = (statuses[answer.status] ?? 0) + 1;
          const described = `${route.method} ${request.url} ${JSON.stringify(request.form).slice(0, 300)}`;
          expect({ described, status: answer.status < 500 ? 'not 5xx' : answer.status }).toEqual({ described, status: 'not 5xx' });
          expect({ described, stack: /\n\s+at .+\(.*:\d+:\d+\)/.test(answer.html) }).toEqual({ described, stack: false });
        }),
        { numRuns: PAGE_RUNS },
      );
      // A route that ended the session (leaving the workspace, say): sign in again for the next.
      if ((await dashboard.get(`/w/${owner.workspaceId}`)).status !== 200) dashboard = await signIn(t.baseUrl, { email: owner.email, password: owner.password });
    }
    console.log(`hostile input to the dashboard, answers by status: ${JSON.stringify(statuses)}`);
    // Signed in with a valid token, many reached their handlers: pages and form errors, not only redirects.
    expect((statuses[200] ?? 0) + (statuses[400] ?? 0) + (statuses[422] ?? 0)).toBeGreaterThan(100);
  }, 240_000);
});
