import OpenAI from 'openai';
import { randomUUID } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { FakeStripe, startFakeStripe } from './fakes/fake-stripe';
import { describeWithHaproxy, LoadBalancer, SERVED_BY_HEADER, startLoadBalancer } from './support/load-balancer';
import { describeWithRedisServer, RedisServer, startRedisServer } from './support/redis-server';
import { ServerProcess, sleep, waitUntil } from './support/processes';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { createTestDatabase } from './support/test-database';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';


/**
 * Many replicas behind a real load balancer, as operators run the service: two service
 * processes on one PostgreSQL and one redis-server, with HAProxy in front (round robin per
 * request), and every request sent through it with the official OpenAI SDK. Money, rate
 * limits, key revocation, idempotency, conversations, auto top-up and streaming must come
 * out as with one process, and stopping a replica (a rolling restart) must lose nothing. An in-process app on the same database makes workspaces and
 * reads the ledger; it serves no traffic.
 */
jest.setTimeout(120_000);

const STRIPE_WEBHOOK_SECRET = 'whsec_test_replicas';
const FREE_TIER_RPM = 5;

// Both binaries are needed: without either, the suite fails on CI and is skipped loudly elsewhere.
describeWithRedisServer('replicas', () => describeWithHaproxy('two replicas behind HAProxy', () => {
  let upstream: FakeOpenAi;
  let stripe: FakeStripe;
  let redis: RedisServer;
  let setup: TestApp;
  let db: DataSource;
  let balancer: LoadBalancer;
  let dataDir: string;
  const replicas: ServerProcess[] = [];

  beforeAll(async () => {
    [upstream, stripe, redis] = await Promise.all([startFakeOpenAi(), startFakeStripe(), startRedisServer()]);
    const databaseUrl = await createTestDatabase();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-replicas-'));
    const stripeConfig = { secretKey: 'sk_test_replicas', webhookSecret: STRIPE_WEBHOOK_SECRET, apiBase: stripe.url };
    setup = await startTestApp({ databaseUrl, config: { redisUrl: redis.url, stripe: stripeConfig } });
    db = setup.app.get<DataSource>(getDataSourceToken());

    const ports = [await freePort(), await freePort()];
    for (const port of ports) {
      replicas.push(
        ServerProcess.start({
          PORT: String(port),
          HOST: '127.0.0.1',
          DATABASE_URL: databaseUrl,
          DATA_DIR: dataDir,
          REDIS_URL: redis.url,
          SESSION_SECRET: 'replicas-test-session-secret-0123456789',
          OPENAI_API_KEY: 'sk-upstream',
          OPENAI_BASE_URL: upstream.url,
          STRIPE_SECRET_KEY: stripeConfig.secretKey,
          STRIPE_WEBHOOK_SECRET: STRIPE_WEBHOOK_SECRET,
          STRIPE_API_BASE: stripe.url,
          // Every request reaches the replicas from HAProxy's address: the per-address limit of
          // callers without a valid key (the revocation test makes a few hundred) is not under test here.
          RATE_LIMIT_ANONYMOUS_RPM: '1000000',
          // Idle connections are closed by HAProxy (pool-purge-delay) long before the replica
          // would: with Node's 5 s default, a request sent on a connection the replica was just
          // closing is lost ("other side closed").
          HTTP_KEEP_ALIVE_TIMEOUT_MS: '65000',
          LOG_LEVEL: 'error',
        }),
      );
    }
    await Promise.all(replicas.map((replica, i) => replica.waitForHealth(`http://127.0.0.1:${ports[i]}`, 60_000)));
    balancer = await startLoadBalancer(ports.map((port) => `127.0.0.1:${port}`));
    await balancer.waitUntilAllUp(15_000);
  }, 120_000);

  afterAll(async () => {
    await Promise.all(replicas.map((replica) => (replica.running ? replica.stop('SIGTERM', 15_000).catch(() => replica.kill()) : undefined)));
    await balancer?.stop();
    await setup?.close();
    await Promise.all([upstream?.close(), stripe?.close(), redis?.stop()]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  /** The official SDK pointed at the balancer, as a user behind it would configure it. */
  const clientOf = (workspace: TestWorkspace, options: { maxRetries?: number } = {}) =>
    new OpenAI({ apiKey: workspace.apiKey, baseURL: `${balancer.url}/v1`, maxRetries: options.maxRetries ?? 0, timeout: 60_000 });

  const ask = (client: OpenAI, content = 'Hello', options: OpenAI.RequestOptions = {}) =>
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content }], max_tokens: 100 }, options).withResponse();

  /** Which replica answered: HAProxy's server name in the answer, or in the error's headers. */
  const servedBy = (headers: Headers | undefined) => headers?.get(SERVED_BY_HEADER) ?? 'unknown';

  /** Requests each replica answered since `before` (HAProxy's counters). */
  async function servedSince(before: Record<string, number>): Promise<Record<string, number>> {
    const now = await balancer.served();
    return Object.fromEntries(Object.entries(now).map(([name, total]) => [name, total - (before[name] ?? 0)]));
  }

  it('never overdraws a small wallet under 200 concurrent requests spread over both replicas', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 3_000 });
    // 10 x 0.25 + 20 x 1 = 22.5 millicents an answer: 200 of them would cost 4,500.
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 10 });
    const client = clientOf(workspace, { maxRetries: 2 });
    const before = await balancer.served();
    const outcomes = await Promise.all(
      Array.from({ length: 200 }, () =>
        ask(client).then(
          ({ response }) => response.status,
          (error: InstanceType<typeof OpenAI.APIError>) => error.status ?? `${error.name}: ${error.message}`,
        ),
      ),
    );
    const unexpected = outcomes.filter((status) => status !== 200 && status !== 402);
    if (unexpected.length > 0) throw new Error(`${unexpected.length} unexpected outcomes: ${unexpected[0]}\n${replicas.map((r) => r.output()).join('\n')}`);
    const served = outcomes.filter((status) => status === 200).length;
    expect(served).toBeGreaterThan(0);
    expect(outcomes.filter((status) => status === 402).length).toBeGreaterThan(0);
    const perReplica = await servedSince(before);
    expect(perReplica.replica0).toBeGreaterThan(20);
    expect(perReplica.replica1).toBeGreaterThan(20);

    // Each replica gives its budget lease back once idle (WALLET_LEASE_IDLE_MS).
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 10_000)).toBe(true);
    const after = await walletInvariants(db, workspace.id);
    const [{ charged }] = await db.query(
      `SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1 AND status = 'success'`,
      [workspace.id],
    );
    expect(after).toEqual({ balance: 3_000 - charged, reserved: 0, ledger: 3_000 - charged, holds: 0 });
    expect(after.balance).toBeGreaterThanOrEqual(0);
  });

  it('counts the rate limit of a tier exactly once across both replicas', async () => {
    const workspace = await setup.createWorkspace({ tier: 'free' });
    const client = clientOf(workspace);
    const outcomes = await Promise.all(
      Array.from({ length: 40 }, () =>
        client.models
          .list()
          .withResponse()
          .then(
            ({ response }) => ({ status: response.status, by: servedBy(response.headers) }),
            (error: InstanceType<typeof OpenAI.APIError>) => ({ status: error.status, by: servedBy(error.headers) }),
          ),
      ),
    );
    const allowed = outcomes.filter((o) => o.status === 200);
    const refused = outcomes.filter((o) => o.status === 429);
    expect({ allowed: allowed.length, refused: refused.length }).toEqual({ allowed: FREE_TIER_RPM, refused: 40 - FREE_TIER_RPM });
    // Both replicas refused some: the count is shared, not per process.
    expect(new Set(refused.map((o) => o.by))).toEqual(new Set(['replica0', 'replica1']));
  });

  it('stops a revoked key on both replicas within 10 seconds', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise' });
    const client = clientOf(workspace);
    const list = () =>
      client.models
        .list()
        .withResponse()
        .then(
          ({ response }) => ({ status: response.status, by: servedBy(response.headers) }),
          (error: InstanceType<typeof OpenAI.APIError>) => ({ status: error.status, by: servedBy(error.headers) }),
        );
    // Both replicas know the key (and keep it in their caches).
    const warm = [await list(), await list(), await list(), await list()];
    expect(warm.map((o) => o.status)).toEqual([200, 200, 200, 200]);
    expect(new Set(warm.map((o) => o.by))).toEqual(new Set(['replica0', 'replica1']));

    await setup.app.get(ApiKeysService).revoke(workspace.apiKeyId);
    const revokedAt = Date.now();
    const refusedSince: Record<string, number> = {};
    while (Date.now() - revokedAt < 12_000 && Object.keys(refusedSince).length < 2) {
      const outcome = await list();
      if (outcome.status === 401) refusedSince[outcome.by] ??= Date.now() - revokedAt;
      else expect(outcome.status).toBe(200);
      await sleep(100);
    }
    expect(Object.keys(refusedSince).sort()).toEqual(['replica0', 'replica1']);
    for (const ms of Object.values(refusedSince)) expect(ms).toBeLessThan(10_000);
    // And from then on, nowhere.
    const later = await Promise.all(Array.from({ length: 6 }, () => list()));
    expect(later.map((o) => o.status)).toEqual([401, 401, 401, 401, 401, 401]);
    console.log(`revoked key refused after (ms): ${JSON.stringify(refusedSince)}`);
  });

  it('does not charge twice an Idempotency-Key retry that lands on the other replica', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
    upstream.setDefault({ kind: 'text', text: 'Once.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    const client = clientOf(workspace);
    const options = { headers: { 'Idempotency-Key': `replicas-${randomUUID()}` } };
    const callsBefore = upstream.requests.length;
    const first = await ask(client, 'Pay once', options);
    const firstBy = servedBy(first.response.headers);
    // Round robin sends the next request to the other replica; a retry on the same one would prove nothing, so go on until one did not.
    const retries: { by: string; replayed: string | null; content: string | null }[] = [];
    for (let attempt = 0; attempt < 4 && !retries.some((r) => r.by !== firstBy); attempt++) {
      const retry = await ask(client, 'Pay once', options);
      retries.push({ by: servedBy(retry.response.headers), replayed: retry.response.headers.get('idempotent-replayed'), content: retry.data.choices[0].message.content });
    }
    const elsewhere = retries.find((r) => r.by !== firstBy);
    expect(elsewhere).toEqual({ by: expect.stringMatching(/^replica[01]$/), replayed: 'true', content: first.data.choices[0].message.content });
    expect(upstream.requests.length - callsBefore).toBe(1);
    const [{ records, charged }] = await db.query(
      `SELECT count(*)::int AS records, coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`,
      [workspace.id],
    );
    expect(records).toBe(1);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 10_000)).toBe(true);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000 - charged, reserved: 0, ledger: 1_000_000 - charged, holds: 0 });
  });

  it('continues a conversation on the other replica with its history', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise' });
    const client = clientOf(workspace);
    const conversation = (await client.post('/conversations', { body: { title: 'across replicas' } })) as { id: string };
    upstream.script(
      { kind: 'text', text: 'The capital of France is Paris.', usage: { prompt_tokens: 10, completion_tokens: 7 } },
      { kind: 'text', text: 'About two million people.', usage: { prompt_tokens: 30, completion_tokens: 5 } },
    );
    const turn = (content: string) =>
      client.chat.completions
        .create({ model: 'gpt-4o', messages: [{ role: 'user', content }], conversation_id: conversation.id } as OpenAI.ChatCompletionCreateParamsNonStreaming)
        .withResponse();
    const first = await turn('What is the capital of France?');
    const second = await turn('How many people live there?');
    // Round robin, nothing else in flight: the second turn ran on the other replica.
    expect(servedBy(second.response.headers)).not.toBe(servedBy(first.response.headers));
    expect(second.data.choices[0].message.content).toBe('About two million people.');

    const upstreamMessages = upstream.requests.at(-1)!.body.messages as { role: string; content: string }[];
    expect(upstreamMessages.map((m) => [m.role, m.content])).toEqual([
      ['user', 'What is the capital of France?'],
      ['assistant', 'The capital of France is Paris.'],
      ['user', 'How many people live there?'],
    ]);
    const stored = (await client.get(`/conversations/${conversation.id}`)) as { message_count: number; messages: { data: { role: string }[] } };
    expect(stored.message_count).toBe(4);
    expect(stored.messages.data.map((m) => m.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
  });

  it('buys one auto top-up per threshold crossing, with charges settling on both replicas', async () => {
    const THRESHOLD = 50_000;
    const AMOUNT = 100_000;
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 51_000 });
    await setup.app.get(AutoTopupSettingsService).configure({
      workspaceId: workspace.id,
      enabled: true,
      thresholdMillicents: THRESHOLD,
      amountMillicents: AMOUNT,
      customerRef: 'cus_Replicas',
      paymentMethodRef: 'pm_card_visa',
    });
    // 100 x 0.25 + 4,000 x 1 = 4,025 millicents an answer.
    upstream.setDefault({ kind: 'text', text: 'Costly.', usage: { prompt_tokens: 100, completion_tokens: 4_000 }, delayMs: 20 });
    const client = clientOf(workspace);
    const spend = (requests: number) =>
      Promise.all(
        Array.from({ length: requests }, () =>
          client.chat.completions
            .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Spend' }], max_tokens: 4_000 })
            .withResponse()
            .then(({ response }) => servedBy(response.headers)),
        ),
      );
    const topups = async () =>
      (await db.query(`SELECT count(*)::int AS n FROM wallet_transactions WHERE workspace_id = $1 AND type = 'auto_topup'`, [workspace.id]))[0]
        .n as number;
    const payments = () => stripe.created().filter((r) => r.params['metadata[workspace_id]'] === workspace.id).length;
    const settled = async (expected: number) => {
      expect(await waitUntil(async () => (await topups()) === expected, 15_000)).toBe(true);
      // Nothing more comes later from the other replica.
      await sleep(1_000);
      expect({ topups: await topups(), payments: payments() }).toEqual({ topups: expected, payments: expected });
    };

    // Crossing 1: 51,000 - 5 x 4,025 = 30,875, below the threshold; Stripe answers only once
    // every charge is in, so each settlement on either replica sees the wallet below it.
    const resume = stripe.pause();
    const servedBy1 = await spend(5);
    resume();
    await settled(1);
    // 130,875 - 5 x 4,025 = 110,750: no crossing, no top-up.
    const servedBy2 = await spend(5);
    await settled(1);
    // Crossing 2: 110,750 - 16 x 4,025 = 46,350.
    const servedBy3 = await spend(16);
    await settled(2);
    expect(new Set([...servedBy1, ...servedBy2, ...servedBy3])).toEqual(new Set(['replica0', 'replica1']));

    expect(await waitUntil(() => nothingHeld(db, workspace.id), 10_000)).toBe(true);
    const after = await walletInvariants(db, workspace.id);
    expect(after).toEqual({ balance: 51_000 + 2 * AMOUNT - 26 * 4_025, reserved: 0, ledger: 51_000 + 2 * AMOUNT - 26 * 4_025, holds: 0 });
  });

  it('streams through the balancer without buffering: the first words arrive before the last are generated', async () => {
    const words = 12;
    const chunkDelayMs = 150;
    upstream.setDefault({ kind: 'text', text: Array.from({ length: words }, (_, i) => `word${i} `).join(''), chunkDelayMs });
    const workspace = await setup.createWorkspace({ tier: 'enterprise' });
    const client = clientOf(workspace);
    const seenOn = new Set<string>();
    for (let run = 0; run < 2; run++) {
      const started = Date.now();
      const { data: stream, response } = await client.chat.completions
        .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Stream' }], stream: true })
        .withResponse();
      seenOn.add(servedBy(response.headers));
      const arrivals: number[] = [];
      let text = '';
      for await (const chunk of stream) {
        const content = chunk.choices[0]?.delta?.content;
        if (content) {
          arrivals.push(Date.now() - started);
          text += content;
        }
      }
      expect(text.trim().split(' ')).toHaveLength(words);
      // The upstream spends ~1.8 s on the words; buffered, they would all arrive together at the end.
      expect(arrivals[arrivals.length - 1] - arrivals[0]).toBeGreaterThan((words - 3) * chunkDelayMs);
      expect(arrivals[0]).toBeLessThan(arrivals[arrivals.length - 1] - 1_000);
    }
    expect(seenOn).toEqual(new Set(['replica0', 'replica1']));
  });
  // Last: it stops a replica.
  it('loses no request through the balancer when a replica is stopped with SIGTERM under traffic (a rolling restart)', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000_000 });
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 30 });
    const client = clientOf(workspace);
    const outcomes: { status: number | string; by: string; at: number }[] = [];
    let running = true;
    const workers = Array.from({ length: 8 }, async () => {
      while (running) {
        outcomes.push(
          await ask(client).then(
            ({ response }) => ({ status: response.status, by: servedBy(response.headers), at: Date.now() }),
            (error: InstanceType<typeof OpenAI.APIError>) => ({ status: error.status ?? `${error.name}: ${error.message}`, by: servedBy(error.headers), at: Date.now() }),
          ),
        );
      }
    });
    await sleep(2_000);
    const stopping = replicas[0].stop('SIGTERM', 30_000);
    const stoppedAt = Date.now();
    const stopped = await stopping;
    await sleep(2_000);
    running = false;
    await Promise.all(workers);

    expect(stopped.code).toBe(0);
    const failed = outcomes.filter((o) => o.status !== 200);
    console.log(`rolling restart: ${outcomes.length} requests, ${failed.length} failed, replica0 stopped in ${stopped.durationMs} ms`);
    expect(failed).toEqual([]);
    // Both served before the stop; only the other one after it.
    expect(new Set(outcomes.filter((o) => o.at < stoppedAt).map((o) => o.by))).toEqual(new Set(['replica0', 'replica1']));
    expect(new Set(outcomes.filter((o) => o.at > stoppedAt + stopped.durationMs + 500).map((o) => o.by))).toEqual(new Set(['replica1']));
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 10_000)).toBe(true);
    const [{ records, charged }] = await db.query(
      `SELECT count(*)::int AS records, coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1 AND status = 'success'`,
      [workspace.id],
    );
    expect(records).toBe(outcomes.length);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 100_000_000 - charged, reserved: 0, ledger: 100_000_000 - charged, holds: 0 });
  });
}));
