import OpenAI from 'openai';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

describe('rate limiting (in-memory counters)', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({ config: { anonymousRateLimitRpm: 3 } });
  });
  afterAll(() => t.close());

  it('lets a free workspace make five requests a minute and refuses the sixth with RateLimitError', async () => {
    const { client } = await t.createWorkspace({ tier: 'free' });
    const before = Math.floor(Date.now() / 1000);
    for (let i = 1; i <= 5; i++) {
      const { response } = await client.models.list().withResponse();
      expect(response.status).toBe(200);
      expect(response.headers.get('x-ratelimit-limit')).toBe('5');
      expect(response.headers.get('x-ratelimit-remaining')).toBe(String(5 - i));
      const reset = Number(response.headers.get('x-ratelimit-reset'));
      expect(reset).toBeGreaterThan(before);
      expect(reset).toBeLessThanOrEqual(before + 61);
    }

    const error = await client.models.list().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const limited = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(limited.status).toBe(429);
    const retryAfter = Number(limited.headers?.get('retry-after'));
    expect(Number.isInteger(retryAfter)).toBe(true);
    expect(retryAfter).toBeGreaterThan(0);
    expect(retryAfter).toBeLessThanOrEqual(60);
    expect(limited.headers?.get('x-ratelimit-limit')).toBe('5');
    expect(limited.headers?.get('x-ratelimit-remaining')).toBe('0');
    expect(limited.headers?.get('x-request-id')).toBeTruthy();
    expect(limited.error).toEqual({
      type: 'rate_limit_exceeded',
      message: expect.stringContaining('5 requests per minute'),
      code: 'rate_limit_exceeded',
      param: null,
      retry_after_seconds: retryAfter,
    });
  });

  it('counts per workspace: one workspace at its limit does not slow another', async () => {
    const busy = await t.createWorkspace({ tier: 'free' });
    const idle = await t.createWorkspace({ tier: 'free' });
    for (let i = 0; i < 5; i++) await busy.client.models.list();
    await expect(busy.client.models.list()).rejects.toBeInstanceOf(OpenAI.RateLimitError);
    const { response } = await idle.client.models.list().withResponse();
    expect(response.headers.get('x-ratelimit-remaining')).toBe('4');
  });

  it('counts every route of a workspace in one window, errors included', async () => {
    const { client } = await t.createWorkspace({ tier: 'free' });
    await client.models.list();
    await client.models.retrieve('no-such-model').catch(() => undefined);
    await client.get('/wallet');
    const { response } = await client.get('/limits').withResponse();
    expect(response.headers.get('x-ratelimit-remaining')).toBe('1');
  });

  it.each([
    ['hobby', '10'],
    ['pro', '60'],
    ['team', '300'],
  ])('applies the %s tier rate of %s requests per minute', async (tier, limit) => {
    const { client } = await t.createWorkspace({ tier });
    const { response } = await client.models.list().withResponse();
    expect(response.headers.get('x-ratelimit-limit')).toBe(limit);
  });

  it('sends -1 for limit and remaining on an unlimited tier', async () => {
    const { client } = await t.createWorkspace({ tier: 'enterprise' });
    for (let i = 0; i < 3; i++) {
      const { response } = await client.models.list().withResponse();
      expect(response.headers.get('x-ratelimit-limit')).toBe('-1');
      expect(response.headers.get('x-ratelimit-remaining')).toBe('-1');
      expect(Number(response.headers.get('x-ratelimit-reset'))).toBeGreaterThan(Date.now() / 1000);
    }
  });

  it('applies an enterprise custom rate', async () => {
    const workspace = await t.createWorkspace({ tier: 'enterprise' });
    await t.app.get(WorkspacesService).setTier(workspace.id, 'enterprise', 2);
    // A new key: the old one's lookup may be cached with the previous rate for a few seconds.
    const key = await t.app.get(ApiKeysService).create(workspace.id);
    const client = openAiClient(t.baseUrl, key.apiKey);
    await client.models.list();
    await client.models.list();
    await expect(client.models.list()).rejects.toBeInstanceOf(OpenAI.RateLimitError);
  });

  it('limits callers without a valid key per client address, with the same headers', async () => {
    const anonymous = openAiClient(t.baseUrl, 'sk-wrong-wrong-wrong-wrong-wrong-wrong-wrong');
    const statuses: number[] = [];
    const remaining: Array<string | null | undefined> = [];
    for (let i = 0; i < 4; i++) {
      const error = (await anonymous.models.list().catch((e: unknown) => e)) as InstanceType<typeof OpenAI.APIError>;
      statuses.push(error.status as number);
      remaining.push(error.headers?.get('x-ratelimit-remaining'));
    }
    expect(statuses).toEqual([401, 401, 401, 429]);
    expect(remaining).toEqual(['2', '1', '0', '0']);
  });
});
