import { DataSource } from 'typeorm';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/** Raw HTTP, to see exactly what goes over the wire for every kind of failure. */
describe('errors and headers', () => {
  let t: TestApp;
  let workspace: TestWorkspace;
  const auth = () => ({ Authorization: `Bearer ${workspace.apiKey}` });

  beforeAll(async () => {
    t = await startTestApp({ config: { bodyLimit: '1kb' } });
    workspace = await t.createWorkspace({ tier: 'enterprise' });
  });
  afterAll(() => t.close());

  async function call(path: string, init: RequestInit = {}) {
    const response = await fetch(`${t.baseUrl}${path}`, init);
    const text = await response.text();
    return { response, status: response.status, headers: response.headers, body: text ? JSON.parse(text) : null, text };
  }

  function expectErrorBody(body: unknown, type: string, extra: Record<string, unknown> = {}) {
    expect(body).toEqual({
      error: { type, message: expect.any(String), code: expect.anything(), param: null, ...extra },
    });
  }

  describe('authentication', () => {
    it('refuses a request without a key', async () => {
      const { status, body } = await call('/v1/models');
      expect(status).toBe(401);
      expectErrorBody(body, 'authentication_error', { code: 'missing_api_key' });
      expect(body.error.message).toMatch(/Authorization: Bearer/);
    });

    it.each([
      ['Basic dXNlcjpwYXNz', 'another scheme'],
      ['Bearer', 'no key'],
      ['Bearer sk-short', 'a key too short'],
      ['Bearer pk-0123456789012345678901234567890123456789', 'no sk- prefix'],
    ])('refuses "%s" (%s)', async (header) => {
      const { status, body } = await call('/v1/models', { headers: { Authorization: header } });
      expect(status).toBe(401);
      expectErrorBody(body, 'authentication_error', { code: 'invalid_api_key' });
    });

    it('stops accepting a revoked key at once on the replica that revoked it', async () => {
      const key = await t.app.get(ApiKeysService).create(workspace.id, 'to revoke');
      expect((await call('/v1/models', { headers: { Authorization: `Bearer ${key.apiKey}` } })).status).toBe(200);
      await t.app.get(ApiKeysService).revoke(key.id);
      expect((await call('/v1/models', { headers: { Authorization: `Bearer ${key.apiKey}` } })).status).toBe(401);
    });

    it('stops accepting a key revoked elsewhere (another replica, the CLI) within 10 seconds', async () => {
      const key = await t.app.get(ApiKeysService).create(workspace.id, 'revoked elsewhere');
      const headers = { Authorization: `Bearer ${key.apiKey}` };
      expect((await call('/v1/models', { headers })).status).toBe(200);
      // Another process revokes it: straight in the database, this process's cache knows nothing.
      await t.app.get(DataSource).query('UPDATE api_keys SET revoked_at = now() WHERE id = $1', [key.id]);
      const revokedAt = Date.now();
      let status = 200;
      while (status === 200 && Date.now() - revokedAt < 10_000) {
        status = (await call('/v1/models', { headers })).status;
        if (status === 200) await new Promise((resolve) => setTimeout(resolve, 250));
      }
      expect(status).toBe(401);
      expect(Date.now() - revokedAt).toBeLessThan(10_000);
    }, 15_000);
  });

  describe('request ids', () => {
    it('generates one when none is sent', async () => {
      const { headers } = await call('/health');
      expect(headers.get('x-request-id')).toMatch(/^req_[0-9a-f]{32}$/);
    });

    it('echoes a well-formed incoming id, on errors too', async () => {
      const { headers } = await call('/v1/models', { headers: { 'X-Request-Id': 'trace-abc.123:9' } });
      expect(headers.get('x-request-id')).toBe('trace-abc.123:9');
    });

    it('replaces a malformed incoming id', async () => {
      const { headers } = await call('/health', { headers: { 'X-Request-Id': 'bad id with spaces' } });
      expect(headers.get('x-request-id')).toMatch(/^req_/);
    });
  });

  describe('bad requests', () => {
    it('answers malformed JSON with 400 bad_request', async () => {
      const { status, body, headers } = await call('/v1/models', {
        method: 'POST',
        headers: { ...auth(), 'Content-Type': 'application/json' },
        body: '{"model": ',
      });
      expect(status).toBe(400);
      expectErrorBody(body, 'bad_request', { code: 'invalid_json' });
      expect(headers.get('x-request-id')).toBeTruthy();
    });

    it('answers a body over the size limit with 413 bad_request', async () => {
      const { status, body } = await call('/v1/models', {
        method: 'POST',
        headers: { ...auth(), 'Content-Type': 'application/json' },
        body: JSON.stringify({ padding: 'x'.repeat(4096) }),
      });
      expect(status).toBe(413);
      expectErrorBody(body, 'bad_request', { code: 'request_too_large' });
    });

    it("refuses malformed JSON, an oversized body and another content type on /v1/messages in Anthropic's shape", async () => {
      const anthropicError = (type: string, code: string) => ({ type: 'error', error: { type, message: expect.any(String), code, param: null }, request_id: expect.any(String) });
      const post = (path: string, body: string, contentType = 'application/json') =>
        call(path, { method: 'POST', headers: { 'x-api-key': workspace.apiKey, 'anthropic-version': '2023-06-01', 'Content-Type': contentType }, body });
      // Claude Code's path carries ?beta=true.
      for (const path of ['/v1/messages', '/v1/messages?beta=true', '/v1/messages/count_tokens']) {
        const malformed = await post(path, '{"model": ');
        expect([path, malformed.status, malformed.body]).toEqual([path, 400, anthropicError('invalid_request_error', 'invalid_json')]);
        const oversized = await post(path, JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'x'.repeat(4096) }] }));
        expect([path, oversized.status, oversized.body]).toEqual([path, 413, anthropicError('request_too_large', 'request_too_large')]);
        expect(oversized.headers.get('x-request-id')).toBe(oversized.body.request_id);
      }
      const text = await post('/v1/messages', 'Hello', 'text/plain');
      expect([text.status, text.body]).toEqual([415, anthropicError('invalid_request_error', 'unsupported_media_type')]);
      // The rest of the API keeps its shape (the two tests above).
      expectErrorBody((await post('/v1/chat/completions', '{"model": ')).body, 'bad_request', { code: 'invalid_json' });
    });

    it('names the parameter of a validation error', async () => {
      const { status, body } = await call('/v1/wallet/transactions?limit=0', { headers: auth() });
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ type: 'bad_request', param: 'limit', message: 'limit must be at least 1' });
    });
  });

  describe('unknown routes', () => {
    it('authenticates and rate-limits an unknown /v1 route before its 404', async () => {
      const anonymous = await call('/v1/does-not-exist');
      expect(anonymous.status).toBe(401);
      const { status, body, headers } = await call('/v1/does-not-exist', { headers: auth() });
      expect(status).toBe(404);
      expectErrorBody(body, 'not_found', { code: 'unknown_url' });
      expect(body.error.message).toContain('GET /v1/does-not-exist');
      expect(headers.get('x-ratelimit-limit')).toBe('-1');
    });

    it('answers an unknown route outside /v1 with the same error body', async () => {
      const { status, body } = await call('/nowhere');
      expect(status).toBe(404);
      expectErrorBody(body, 'not_found', { code: 'unknown_url' });
    });
  });

  describe('unexpected failures', () => {
    it('answers 500 internal_error without internals when the database breaks under a route', async () => {
      const isolated = await startTestApp();
      try {
        const victim = await isolated.createWorkspace();
        await isolated.app.get(DataSource).query('ALTER TABLE wallets RENAME TO wallets_gone');
        const response = await fetch(`${isolated.baseUrl}/v1/wallet`, {
          headers: { Authorization: `Bearer ${victim.apiKey}` },
        });
        const text = await response.text();
        expect(response.status).toBe(500);
        expect(JSON.parse(text)).toEqual({
          error: {
            type: 'internal_error',
            message: expect.stringContaining(response.headers.get('x-request-id')!),
            code: 'internal_error',
            param: null,
          },
        });
        expect(text).not.toMatch(/wallets|relation|QueryFailed|at .*\.js/);
      } finally {
        await isolated.close();
      }
    });
  });

  describe('health', () => {
    it('answers liveness and readiness without a key', async () => {
      expect((await call('/health')).body).toEqual({ status: 'ok' });
      expect((await call('/health/ready')).body).toEqual({ status: 'ok', database: 'up' });
    });
  });
});
