import { ThrottlerStorage } from '@nestjs/throttler';
import { getRepositoryToken } from '@nestjs/typeorm';
import OpenAI from 'openai';
import { randomBytes } from 'node:crypto';
import { Repository } from 'typeorm';
import { ApiKey } from '../src/workspaces/entities/api-key.entity';
import { freePort } from '../src/database/embedded-postgres';
import { describeWithRedisServer, RedisServer, startRedisServer } from './support/redis-server';
import { createTestDatabase } from './support/test-database';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

const FREE_RPM = 5;
/** ioredis's default `disconnectTimeout`. */
const IOREDIS_DISCONNECT_TIMEOUT_MS = 2_000;

/** `GET /v1/models` through the SDK, returning the raw response for its headers. */
async function listModels(client: OpenAI): Promise<Response> {
  const { response } = await client.models.list().withResponse();
  return response;
}

function rateHeaders(headers: Headers): { limit: string | null; remaining: string | null; reset: string | null } {
  return {
    limit: headers.get('x-ratelimit-limit'),
    remaining: headers.get('x-ratelimit-remaining'),
    reset: headers.get('x-ratelimit-reset'),
  };
}

describeWithRedisServer('rate limits shared through Redis by two replicas', () => {
  let redis: RedisServer;
  let databaseUrl: string;
  let replicas: TestApp[] = [];

  beforeAll(async () => {
    redis = await startRedisServer();
    databaseUrl = await createTestDatabase();
    replicas = await Promise.all([
      startTestApp({ databaseUrl, config: { redisUrl: redis.url } }),
      startTestApp({ databaseUrl, config: { redisUrl: redis.url } }),
    ]);
  });

  afterAll(async () => {
    await Promise.all(replicas.map((replica) => replica.close()));
    await redis?.stop();
  });

  it('counts one free-tier workspace once across both replicas: 5 allowed, then 429 on either', async () => {
    const [a, b] = replicas;
    const workspace = await a.createWorkspace({ tier: 'free' });
    const clients = [openAiClient(a.baseUrl, workspace.apiKey), openAiClient(b.baseUrl, workspace.apiKey)];

    const remaining: string[] = [];
    for (let i = 0; i < FREE_RPM; i++) {
      const response = await listModels(clients[i % 2]);
      expect(response.status).toBe(200);
      const headers = rateHeaders(response.headers);
      expect(headers.limit).toBe(String(FREE_RPM));
      remaining.push(headers.remaining!);
    }
    expect(remaining).toEqual(['4', '3', '2', '1', '0']);

    // The sixth request goes to replica B, the seventh to replica A: both refuse.
    for (const client of [clients[1], clients[0]]) {
      const error = await listModels(client).then(
        () => {
          throw new Error('expected a 429 once the shared limit is used up');
        },
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OpenAI.RateLimitError);
      const rateError = error as InstanceType<typeof OpenAI.RateLimitError>;
      expect(rateError.status).toBe(429);

      const retryAfter = rateError.headers.get('retry-after');
      expect(retryAfter).toMatch(/^\d+$/);
      expect(Number(retryAfter)).toBeGreaterThan(0);
      expect(Number(retryAfter)).toBeLessThanOrEqual(60);
      expect(rateError.headers.get('x-ratelimit-limit')).toBe(String(FREE_RPM));
      expect(rateError.headers.get('x-ratelimit-remaining')).toBe('0');

      const nowSeconds = Date.now() / 1000;
      const reset = Number(rateError.headers.get('x-ratelimit-reset'));
      expect(Number.isInteger(reset)).toBe(true);
      expect(reset).toBeGreaterThanOrEqual(Math.floor(nowSeconds));
      expect(reset).toBeLessThanOrEqual(Math.ceil(nowSeconds) + 60);

      expect(rateError.error).toEqual({
        type: 'rate_limit_exceeded',
        message: expect.any(String),
        code: 'rate_limit_exceeded',
        param: null,
        retry_after_seconds: Number(retryAfter),
      });
      expect(Number.isInteger((rateError.error as { retry_after_seconds: number }).retry_after_seconds)).toBe(true);
    }
  });

  it("gives another workspace its own counter, untouched by the first one's", async () => {
    const [a, b] = replicas;
    const other = await b.createWorkspace({ tier: 'free' });
    const first = rateHeaders((await listModels(openAiClient(a.baseUrl, other.apiKey))).headers);
    const second = rateHeaders((await listModels(openAiClient(b.baseUrl, other.apiKey))).headers);
    expect(first).toMatchObject({ limit: String(FREE_RPM), remaining: '4' });
    expect(second).toMatchObject({ limit: String(FREE_RPM), remaining: '3' });
  });

  // A block key with a 1 ms expiry (the first Redis storage) reset the window under load and
  // let 25 to 47 of 60 concurrent requests through: this guards against that coming back.
  it('holds the shared limit under a concurrent burst across both replicas', async () => {
    const [a, b] = replicas;
    const workspace = await a.createWorkspace({ tier: 'free' });
    const clients = [openAiClient(a.baseUrl, workspace.apiKey), openAiClient(b.baseUrl, workspace.apiKey)];
    const settled = await Promise.allSettled(Array.from({ length: 60 }, (_, i) => listModels(clients[i % 2])));
    const allowed = settled.filter((s) => s.status === 'fulfilled').length;
    const refused = settled.filter((s) => s.status === 'rejected' && s.reason instanceof OpenAI.RateLimitError).length;
    expect({ allowed, refused }).toEqual({ allowed: FREE_RPM, refused: 60 - FREE_RPM });
  });

  it('refuses wrong keys from an address at its limit on either replica, without looking them up', async () => {
    const [a, b] = replicas;
    const lookups = [a, b].map((replica) => jest.spyOn(replica.app.get<Repository<ApiKey>>(getRepositoryToken(ApiKey)), 'findOne'));
    try {
      const wrongKeyFrom = (replica: TestApp) =>
        fetch(`${replica.baseUrl}/v1/models`, {
          headers: { Authorization: `Bearer sk-${randomBytes(32).toString('base64url')}`, 'X-Forwarded-For': '198.51.100.9' },
        });
      const limit = a.config.anonymousRateLimitRpm;
      const statuses: number[] = [];
      for (let i = 0; i < limit; i++) statuses.push((await wrongKeyFrom(replicas[i % 2])).status);
      expect(new Set(statuses)).toEqual(new Set([401]));
      for (let i = 0; i < 6; i++) expect((await wrongKeyFrom(replicas[i % 2])).status).toBe(429);
      expect(lookups[0].mock.calls.length + lookups[1].mock.calls.length).toBe(limit);
    } finally {
      for (const spy of lookups) spy.mockRestore();
    }
  });

  it('keeps serving when Redis is unreachable (fails open), without long stalls', async () => {
    // Nothing listens on a port freePort() just released.
    const closedPort = await freePort();
    const replica = await startTestApp({ databaseUrl, config: { redisUrl: `redis://127.0.0.1:${closedPort}` } });
    try {
      const workspace = await replica.createWorkspace({ tier: 'free' });
      const client = openAiClient(replica.baseUrl, workspace.apiKey);
      const durations: number[] = [];
      // More than the free tier's 5: nothing is counted while the storage is down.
      for (let i = 0; i < FREE_RPM + 2; i++) {
        const started = Date.now();
        const response = await listModels(client);
        durations.push(Date.now() - started);
        expect(response.status).toBe(200);
        expect(rateHeaders(response.headers)).toMatchObject({ limit: String(FREE_RPM), remaining: String(FREE_RPM) });
      }
      console.log(`fail-open request durations (ms): ${durations.join(', ')}`);
      for (const duration of durations) expect(duration).toBeLessThan(5_000);
    } finally {
      // ioredis, told to disconnect while it waits to reconnect, arms a timer of
      // `disconnectTimeout` on its already closed socket that nothing clears: it would hold
      // the process up to 2 s after the run ("Jest did not exit"). Let it run out here.
      const redisClient = (replica.app.get(ThrottlerStorage) as { redis?: { options?: { disconnectTimeout?: number } } })
        .redis;
      await replica.close();
      const timeout = redisClient?.options?.disconnectTimeout ?? IOREDIS_DISCONNECT_TIMEOUT_MS;
      await new Promise((resolve) => setTimeout(resolve, timeout + 100));
    }
  }, 60_000);
});
