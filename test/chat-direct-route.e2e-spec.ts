import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * POST /v1/chat/completions is served in front of Express's router and Nest's pipeline
 * (src/common/http/direct-route.ts), except with an Idempotency-Key, which Nest's interceptor
 * handles. Both ways must answer alike: same status, body and headers (only Express's ETag,
 * which the direct route does not compute, tells them apart), the same refusals, and the same
 * usage records.
 */
describe('chat completions on the direct route and through Nest', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({ config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off' } });
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const BODY = { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 16 };
  const post = (workspace: TestWorkspace | null, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${t.baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...(workspace ? { authorization: `Bearer ${workspace.apiKey}` } : {}), ...headers },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
  /** What a client may rely on; Date, ETag and the ids differ per response. */
  const headersOf = (response: Response) => ({
    status: response.status,
    contentType: response.headers.get('content-type'),
    requestId: /^req_[0-9a-f]{32}$/.test(response.headers.get('x-request-id') ?? ''),
    rateLimit: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'].filter((name) => response.headers.has(name)),
  });

  it('answers a completion with the same status, headers and body shape either way; only the Nest one has an ETag', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    upstream.script({ kind: 'text', text: 'Hi.' });
    const direct = await post(workspace, BODY);
    upstream.script({ kind: 'text', text: 'Hi.' });
    const nest = await post(workspace, BODY, { 'idempotency-key': 'direct-route-1' });

    expect(headersOf(direct)).toEqual(headersOf(nest));
    expect(headersOf(direct)).toEqual({
      status: 200,
      contentType: 'application/json; charset=utf-8',
      requestId: true,
      rateLimit: ['x-ratelimit-limit', 'x-ratelimit-remaining', 'x-ratelimit-reset'],
    });
    expect(direct.headers.get('etag')).toBeNull();
    expect(nest.headers.get('etag')).not.toBeNull();
    const [directBody, nestBody] = (await Promise.all([direct.json(), nest.json()])) as Record<string, unknown>[];
    expect(Object.keys(directBody).sort()).toEqual(Object.keys(nestBody).sort());
    expect(directBody).toMatchObject({ object: 'chat.completion', choices: [{ message: { content: 'Hi.' } }] });
  });

  it('keeps a request id the client sent, and answers its refusals in the API shape with the same headers either way', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    const traced = await post(workspace, { ...BODY, messages: [] }, { 'x-request-id': 'trace-42' });
    expect(traced.status).toBe(400);
    expect(traced.headers.get('x-request-id')).toBe('trace-42');

    const cases: [string, TestWorkspace | null, unknown, Record<string, string>, number, string][] = [
      ['no key', null, BODY, {}, 401, 'missing_api_key'],
      ['malformed JSON', workspace, '{"model": ', {}, 400, 'invalid_json'],
      ['not JSON', workspace, 'hello', { 'content-type': 'text/plain' }, 415, 'unsupported_media_type'],
      ['unknown model', workspace, { ...BODY, model: 'no-such-model' }, {}, 404, 'model_not_found'],
    ];
    for (const [name, caller, body, headers, status, code] of cases) {
      const direct = await post(caller, body, headers);
      const nest = await post(caller, body, { ...headers, 'idempotency-key': `direct-route-${name.replace(/ /g, '-')}` });
      const [directBody, nestBody] = (await Promise.all([direct.json(), nest.json()])) as { error: { code: string } }[];
      expect({ name, status: direct.status, code: directBody.error.code }).toEqual({ name, status, code });
      expect({ name, ...headersOf(direct) }).toEqual({ name, ...headersOf(nest) });
      expect(directBody).toEqual(nestBody);
    }
  });

  it("refuses a workspace over its rate with 429 and Retry-After, and gives the refused request its usage record (the controller's filter)", async () => {
    const created = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000 });
    await t.app.get(WorkspacesService).setTier(created.id, 'enterprise', 1);
    // A new key: the old one's lookup may be cached with the previous rate for a few seconds.
    const workspace = { ...created, apiKey: (await t.app.get(ApiKeysService).create(created.id)).apiKey };
    upstream.script({ kind: 'text', text: 'Hi.' });
    expect((await post(workspace, BODY)).status).toBe(200);
    const refused = await post(workspace, BODY);
    expect(refused.status).toBe(429);
    expect(Number(refused.headers.get('retry-after'))).toBeGreaterThan(0);
    expect(refused.headers.get('x-ratelimit-remaining')).toBe('0');
    const requestId = refused.headers.get('x-request-id');
    // Written after the answer: looked for until it is there.
    const db = t.app.get(DataSource);
    let records: unknown[] = [];
    for (let tries = 0; tries < 50 && records.length === 0; tries++) {
      records = await db.query('SELECT status, error_code FROM usage_records WHERE request_id = $1', [requestId]);
      if (records.length === 0) await sleep(100);
    }
    expect(records).toEqual([{ status: 'error', error_code: 'rate_limit_exceeded' }]);
  });
});
