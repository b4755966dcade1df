import {
  CallHandler,
  CanActivate,
  Catch,
  ExceptionFilter,
  ExecutionContext,
  Injectable,
  Module,
  NestInterceptor,
} from '@nestjs/common';
import { APP_GUARD, APP_INTERCEPTOR, NestFactory } from '@nestjs/core';
import type { NestExpressApplication } from '@nestjs/platform-express';
import type { Response as ExpressResponse } from 'express';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import { type AppCreator, createApp } from '../src/app.factory';
import { ConfigError } from '../src/config/app-config';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { openAiClient, startTestApp, TestApp, TestWorkspace, testConfig } from './support/test-app';
import { createTestDatabase } from './support/test-database';

/**
 * POST /v1/chat/completions is served in front of Express's router and Nest's pipeline
 * (src/common/http/direct-route.ts), except with an Idempotency-Key, which Nest's interceptor
 * handles. Both ways must answer alike: same status, body and headers (only Express's ETag,
 * which the direct route does not compute, tells them apart), the same refusals, and the same
 * usage records. With DIRECT_ROUTE=off every request goes through Nest: the same suite holds.
 */
describe.each(['on', 'off'] as const)('chat completions on the direct route and through Nest (DIRECT_ROUTE=%s)', (directRoute) => {
  let upstream: FakeOpenAi;
  let t: TestApp;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', directRoute },
    });
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

  it('answers a completion with the same status, headers and body shape either way; only the Nest one has an ETag (both, when off)', async () => {
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
    // Express's ETag: what tells Nest's answer from the direct route's.
    expect(direct.headers.has('etag')).toBe(directRoute === 'off');
    expect(nest.headers.has('etag')).toBe(true);
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

/** An interceptor of the application's own, which the direct route does not run: it marks the answers it wraps. */
@Injectable()
class AuditInterceptor implements NestInterceptor {
  intercept(context: ExecutionContext, next: CallHandler) {
    context.switchToHttp().getResponse<ExpressResponse>().setHeader('x-audited', 'yes');
    return next.handle();
  }
}
@Injectable()
class AuditGuard implements CanActivate {
  canActivate() {
    return true;
  }
}
class AuditFailure extends Error {}
@Catch(AuditFailure)
class AuditFailureFilter implements ExceptionFilter {
  catch() {}
}
/** APP_* providers in a module of its own, as a feature module would bring them. */
@Module({
  providers: [
    { provide: APP_INTERCEPTOR, useClass: AuditInterceptor },
    { provide: APP_GUARD, useClass: AuditGuard },
  ],
})
class AuditModule {}

/** createApp's application with AuditModule beside the root module, and a filter added with app.useGlobalFilters. */
const withAudit: AppCreator = async (module, options, adapter) => {
  @Module({ imports: [module, AuditModule] })
  class AuditedApp {}
  const app = await NestFactory.create<NestExpressApplication>(AuditedApp, adapter, options);
  app.useGlobalFilters(new AuditFailureFilter());
  return app;
};

describe('the direct route fails closed', () => {
  let upstream: FakeOpenAi;
  let databaseUrl: string;
  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    databaseUrl = await createTestDatabase();
  });
  afterAll(() => upstream.close());
  const configWith = (directRoute: 'on' | 'off') =>
    testConfig({ providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off', directRoute });

  it('refuses to start with a global interceptor, guard or filter it does not run, naming each and the way out', async () => {
    const refusal = await createApp(configWith('on'), databaseUrl, { logger: false, create: withAudit }).then(
      async (app) => {
        await app.close();
        return undefined;
      },
      (error: unknown) => error,
    );
    expect(refusal).toBeInstanceOf(ConfigError);
    const problems = (refusal as ConfigError).problems;
    // Each direct route names each: chat completions, the Anthropic Messages API and embeddings, each with the file to teach.
    const named = problems.map((problem) => `${/the direct route of (POST \S+)/.exec(problem)?.[1]} ${/does not run the (global \w+ \w+)/.exec(problem)?.[1]}`);
    expect(named.sort()).toEqual(
      ['POST /v1/chat/completions', 'POST /v1/embeddings', 'POST /v1/messages'].flatMap((route) =>
        ['global filter AuditFailureFilter', 'global guard AuditGuard', 'global interceptor AuditInterceptor'].map((enhancer) => `${route} ${enhancer}`),
      ),
    );
    for (const problem of problems) {
      expect(problem).toMatch(/src\/chat\/chat-direct-route\.ts|src\/messages\/messages-direct-route\.ts|src\/embeddings\/embeddings-direct-route\.ts/);
      expect(problem).toContain('or set DIRECT_ROUTE=off');
    }
  });

  it('refuses a global enhancer added to the app createApp returned (in main.ts, say), which it could not check', async () => {
    // abortOnError: false, or Nest's proxy would end the process on the throw (after logging it: what main.ts would do).
    const create: AppCreator = (module, options, adapter) => NestFactory.create<NestExpressApplication>(module, adapter, { ...options, abortOnError: false });
    const app = await createApp(configWith('on'), databaseUrl, { logger: false, create });
    try {
      expect(() => app.useGlobalInterceptors(new AuditInterceptor())).toThrow(
        'app.useGlobalInterceptors() after the direct routes were checked: add it in createApp before serveDirectRoutes (src/app.factory.ts), or set DIRECT_ROUTE=off',
      );
    } finally {
      await app.close();
    }
  });

  it('with DIRECT_ROUTE=off starts with them and serves chat completions through Nest, which runs them', async () => {
    const app = await createApp(configWith('off'), databaseUrl, { logger: false, create: withAudit });
    try {
      await app.listen(0, '127.0.0.1');
      const baseUrl = `http://127.0.0.1:${(app.getHttpServer().address() as AddressInfo).port}`;
      const created = await app.get(WorkspacesService).create({ name: 'Audited', tier: 'pro', balanceMillicents: 100_000 });
      upstream.script({ kind: 'text', text: 'Hi.' });
      const { data, response } = await openAiClient(baseUrl, created.apiKey)
        .chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 16 })
        .withResponse();
      expect(data.choices[0].message.content).toBe('Hi.');
      // Only Nest's pipeline runs the interceptor, and only Express's res.json adds an ETag.
      expect(response.headers.get('x-audited')).toBe('yes');
      expect(response.headers.has('etag')).toBe(true);
    } finally {
      await app.close();
    }
  });
});
