import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { NerfingRulesService } from '../src/limits/nerfing/nerfing-rules.service';
import { NerfingService } from '../src/limits/nerfing/nerfing.service';
import { describeWithRedisServer, RedisServer, startRedisServer } from './support/redis-server';
import { createTestDatabase } from './support/test-database';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/** Twenty seconds into a minute, on both replicas' rule clocks. */
const NOW = Date.parse('2026-11-23T15:30:20.000Z');

/**
 * Two replicas on one database and one Redis, as behind a load balancer: a user's nerfing
 * counts (requests as they arrive, tokens as requests settle) are one count, whichever
 * replica serves each request.
 */
describeWithRedisServer('nerfing rules counted across two replicas through Redis', () => {
  let redis: RedisServer;
  let replicas: TestApp[] = [];

  beforeAll(async () => {
    redis = await startRedisServer();
    const databaseUrl = await createTestDatabase();
    const config = { redisUrl: redis.url, llmSimulator: 'on' as const, simulatorWordDelayMs: 0 };
    replicas = await Promise.all([startTestApp({ databaseUrl, config }), startTestApp({ databaseUrl, config })]);
    for (const replica of replicas) replica.app.get(NerfingService).clock = () => NOW;
  });

  afterAll(async () => {
    await Promise.all(replicas.map((replica) => replica.close()));
    await redis?.stop();
  });

  function ask(client: OpenAI, userId: string) {
    return client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'Say something short.' }],
      max_tokens: 20,
      user_id: userId,
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
  }

  it("blocks a user on either replica once the requests of both reach the threshold, and counts other users apart", async () => {
    const [a, b] = replicas;
    const workspace = await a.createWorkspace({ tier: 'enterprise' });
    await a.app.get(NerfingRulesService).add(workspace.id, { scope: 'all', window: 'minute', metric: 'requests', threshold: '3', action: 'block' });
    const clients = [openAiClient(a.baseUrl, workspace.apiKey), openAiClient(b.baseUrl, workspace.apiKey)];

    await ask(clients[0], 'kim');
    await ask(clients[1], 'kim');
    await ask(clients[0], 'kim');
    for (const client of [clients[1], clients[0]]) {
      const error = await ask(client, 'kim').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.RateLimitError);
      expect((error as InstanceType<typeof OpenAI.RateLimitError>).error).toMatchObject({ retry_after_seconds: 40 });
    }
    // Counted apart: another user is not blocked on either replica.
    await ask(clients[1], 'lee');
    await ask(clients[0], 'lee');

    await Promise.all(replicas.map((replica) => replica.settled(workspace.id)));
    const [{ count }] = await a.app
      .get(DataSource)
      .query(`SELECT count(*)::int AS count FROM usage_records WHERE workspace_id = $1 AND nerfing @> '[{"action": "block"}]'`, [workspace.id]);
    expect(count).toBe(2);
  });

  it('adds the tokens a request used on one replica to the count the other replica reads', async () => {
    const [a, b] = replicas;
    const workspace = await a.createWorkspace({ tier: 'enterprise' });
    await a.app.get(NerfingRulesService).add(workspace.id, { scope: 'all', window: 'hour', metric: 'tokens', threshold: '1', action: 'downgrade', model: 'gpt-4o-mini' });

    const first = await ask(openAiClient(a.baseUrl, workspace.apiKey), 'max');
    expect(first.model).toBe('gpt-4o');
    // The count is added after the answer, without the request waiting for it: give it a moment.
    await new Promise((resolve) => setTimeout(resolve, 200));
    const second = await ask(openAiClient(b.baseUrl, workspace.apiKey), 'max');
    expect(second.model).toBe('gpt-4o-mini');
    // Another user has used no tokens yet.
    expect((await ask(openAiClient(b.baseUrl, workspace.apiKey), 'ned')).model).toBe('gpt-4o');
  });
});
