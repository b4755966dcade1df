import OpenAI from 'openai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { ProvidersService } from '../src/providers/providers.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startRedisServer, describeWithRedisServer, type RedisServer } from './support/redis-server';
import { createTestDatabase } from './support/test-database';
import { startTestApp, TestApp, TestConfigOverrides, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

type XService = { cost_millicents: number; iterations: number; provider: string | null; deployment: string | null; attempts: number };
type Completion = OpenAI.Chat.ChatCompletion & { x_service: XService };
type Chunk = OpenAI.Chat.ChatCompletionChunk & { x_service?: XService };

/** gpt-4o-mini's catalog prices, and the dearer ones of deployment "dear" (millicents per million tokens). */
const MINI = { input: 15_000, output: 60_000 };
const DEAR = { input: 30_000, output: 120_000 };
const USAGE = { prompt_tokens: 100, completion_tokens: 10 };

/** A catalog file whose models list `deployments`, each keyed by a variable set here. */
function catalog(models: object[]): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'routing-catalog-')), 'models.json');
  writeFileSync(file, JSON.stringify({ models }));
  return file;
}

function deployment(label: string, fake: FakeOpenAi, extra: Record<string, unknown> = {}) {
  process.env[`ROUTING_TEST_KEY_${label.toUpperCase()}`] = `sk-${label}`;
  return { label, provider: 'openai', base_url: fake.url, api_key_env: `ROUTING_TEST_KEY_${label.toUpperCase()}`, ...extra };
}

function mini(deployments: object[], extra: Record<string, unknown> = {}) {
  return { id: 'gpt-4o-mini', provider: 'openai', context_length: 128_000, max_output_tokens: 16_384, input_price: MINI.input, output_price: MINI.output, deployments, ...extra };
}

const chat = (workspace: TestWorkspace, body: Record<string, unknown> = {}) =>
  workspace.client.chat.completions.create({
    model: 'gpt-4o-mini',
    messages: [{ role: 'user', content: 'Hello' }],
    max_tokens: 50,
    ...body,
  } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming) as unknown as Promise<Completion>;

async function streamed(workspace: TestWorkspace, body: Record<string, unknown> = {}): Promise<{ chunks: Chunk[]; error?: unknown }> {
  const chunks: Chunk[] = [];
  try {
    const stream = await workspace.client.chat.completions.create({
      model: 'gpt-4o-mini',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 50,
      stream: true,
      stream_options: { include_usage: true },
      ...body,
    } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    for await (const chunk of stream) chunks.push(chunk as Chunk);
    return { chunks };
  } catch (error) {
    return { chunks, error };
  }
}

const chatCount = (fake: FakeOpenAi) => fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length;

async function startFakes(n: number): Promise<FakeOpenAi[]> {
  return Promise.all(Array.from({ length: n }, () => startFakeOpenAi()));
}

describe('upstream routing: deployments, failover, cooldown, fallbacks', () => {
  let fakes: FakeOpenAi[] = [];
  let t: TestApp | undefined;
  let db: DataSource;

  const start = async (models: object[], config: TestConfigOverrides = {}) => {
    t = await startTestApp({ config: { llmSimulator: 'off', modelCatalogFile: catalog(models), ...config } });
    db = t.app.get(DataSource);
    return t;
  };
  afterEach(async () => {
    await t?.close();
    t = undefined;
    await Promise.all(fakes.map((f) => f.close()));
    fakes = [];
  });

  it('answers every request while one deployment is healthy: 500s, a 429 with Retry-After and a hang fail over, uncharged', async () => {
    fakes = await startFakes(4);
    const [failing, limited, hanging, healthy] = fakes;
    failing.setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'boom', type: 'server_error' } } });
    limited.setDefault({ kind: 'http_error', status: 429, body: { error: { message: 'slow down', type: 'rate_limit' } }, headers: { 'retry-after': '30' } });
    hanging.setDefault({ kind: 'hang' });
    healthy.setDefault({ kind: 'text', text: 'Hi.', usage: USAGE });
    const app = await start([
      mini([
        deployment('failing', failing),
        deployment('limited', limited),
        deployment('hanging', hanging, { timeout_ms: 300 }),
        deployment('dear', healthy, { input_price: DEAR.input, output_price: DEAR.output }),
      ]),
    ], { metrics: { token: 'metrics-token-0123456789abcdef' } });
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    const before = await walletInvariants(db, workspace.id);

    const answers: Completion[] = [];
    const deadCalls = () => chatCount(failing) + chatCount(limited) + chatCount(hanging);
    // Until all three are in cooldown: "limited" after its 429, the others after 3 failures each (their order is drawn at random).
    for (let i = 0; i < 40 && deadCalls() < 7; i++) answers.push(await chat(workspace));
    const cooledDownAfter = answers.length;
    for (let i = 0; i < 8; i++) answers.push(await chat(workspace));

    // Every answer came from the healthy deployment, billed at its own prices; the failed attempts cost nothing.
    const cost = (USAGE.prompt_tokens * DEAR.input + USAGE.completion_tokens * DEAR.output) / 1e6;
    for (const answer of answers) {
      expect(answer.choices[0].message.content).toBe('Hi.');
      expect(answer.model).toBe('gpt-4o-mini');
      expect(answer.x_service).toMatchObject({ provider: 'openai', deployment: 'dear', cost_millicents: cost });
    }
    expect(answers.some((a) => a.x_service.attempts > 1)).toBe(true);
    // The 429 cooled "limited" down at once; "failing" and "hanging" after 3 failures each: then they get nothing.
    expect(chatCount(limited)).toBe(1);
    expect(chatCount(failing)).toBe(3);
    expect(chatCount(hanging)).toBe(3);
    expect(answers.slice(cooledDownAfter).every((a) => a.x_service.attempts === 1)).toBe(true);
    expect(chatCount(healthy)).toBe(answers.length);

    // /metrics has the same story per deployment.
    const metrics = await (await fetch(`${app.baseUrl}/metrics`, { headers: { Authorization: 'Bearer metrics-token-0123456789abcdef' } })).text();
    const value = (name: string, labels: string) => Number(new RegExp(`^${name}\\{${labels}\\} (\\d+)$`, 'm').exec(metrics)?.[1]);
    expect(value('acs_deployment_attempts_total', 'model="gpt-4o-mini",deployment="dear",outcome="ok"')).toBe(answers.length);
    expect(value('acs_deployment_attempts_total', 'model="gpt-4o-mini",deployment="failing",outcome="failed"')).toBe(3);
    expect(value('acs_deployment_cooldown', 'model="gpt-4o-mini",deployment="limited"')).toBe(1);
    expect(value('acs_deployment_cooldown', 'model="gpt-4o-mini",deployment="dear"')).toBe(0);
    expect(metrics).toMatch(new RegExp(`^acs_deployment_latency_seconds_count\\{model="gpt-4o-mini",deployment="dear"\\} ${answers.length}$`, 'm'));

    await app.quiet(workspace.id);
    const after = await walletInvariants(db, workspace.id);
    expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
    const charged = before.balance - after.balance;
    expect(charged).toBeGreaterThanOrEqual(Math.floor(answers.length * cost));
    expect(charged).toBeLessThanOrEqual(Math.ceil(answers.length * cost));
    const [recorded] = await db.query(`SELECT sum(attempts)::int AS attempts, count(*) FILTER (WHERE deployment = 'dear')::int AS dear FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
    expect(recorded).toEqual({ attempts: answers.reduce((sum, a) => sum + a.x_service.attempts, 0), dear: answers.length });
  });

  it('streams through the healthy deployment; a stream cut after its first chunk ends in-band and is never replayed elsewhere', async () => {
    fakes = await startFakes(2);
    const [failing, healthy] = fakes;
    failing.setDefault({ kind: 'http_error', status: 503, body: { error: { message: 'down' } } });
    healthy.setDefault({ kind: 'text', text: 'Hello there friend.', usage: USAGE });
    const app = await start([mini([deployment('failing', failing), deployment('healthy', healthy)])]);
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });

    // Until "failing" has failed 3 times and cooled down (weights are equal: about every other stream tries it first).
    for (let i = 0; i < 30 && chatCount(failing) < 3; i++) {
      const { chunks, error } = await streamed(workspace);
      expect(error).toBeUndefined();
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('Hello there friend.');
      expect(chunks.every((c) => c.model === 'gpt-4o-mini')).toBe(true);
      expect(chunks.at(-1)!.x_service).toMatchObject({ provider: 'openai', deployment: 'healthy' });
    }

    expect(chatCount(failing)).toBe(3);
    expect(app.app.get(ProvidersService).deployments().find((d) => d.label === 'failing')).toMatchObject({ state: 'cooldown' });
    const calls = fakes.map(chatCount);
    healthy.script({ kind: 'stream_failure', words: ['Half', 'an'], failure: 'socket' });
    const cut = await streamed(workspace);
    expect(cut.chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toContain('Half');
    expect(cut.error ?? (cut.chunks.at(-1) as { error?: unknown } | undefined)?.error).toBeDefined();
    // One more call to the deployment that cut it, none to the other: not replayed.
    expect(fakes.map(chatCount)).toEqual([calls[0], calls[1] + 1]);
    await app.quiet(workspace.id);
    const after = await walletInvariants(db, workspace.id);
    expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
  });

  it('never tries a 400 elsewhere: the request itself is bad', async () => {
    fakes = await startFakes(2);
    const [first, second] = fakes;
    for (const fake of fakes) fake.setDefault({ kind: 'http_error', status: 400, body: { error: { message: 'bad request body', type: 'invalid_request_error' } } });
    const app = await start([mini([deployment('first', first), deployment('second', second)])]);
    const workspace = await app.createWorkspace({ tier: 'team' });
    await expect(chat(workspace)).rejects.toMatchObject({ status: 400 });
    expect(chatCount(first) + chatCount(second)).toBe(1);
  });

  it('answers 503 upstream_capacity, holding nothing, when every deployment is at its own budget', async () => {
    fakes = await startFakes(1);
    fakes[0].setDefault({ kind: 'text', text: 'Ok.', usage: USAGE });
    const app = await start([mini([deployment('tiny', fakes[0], { rpm: 2 })])]);
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    await chat(workspace);
    await chat(workspace);
    await expect(chat(workspace)).rejects.toMatchObject({ status: 503, code: 'upstream_capacity' });
    expect(chatCount(fakes[0])).toBe(2);
    await app.quiet(workspace.id);
    const after = await walletInvariants(db, workspace.id);
    expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
  });

  it('puts a failing deployment in cooldown, sends it nothing meanwhile, probes it after, and gives it traffic again once it answers', async () => {
    fakes = await startFakes(2);
    const [flaky, steady] = fakes;
    flaky.setDefault({ kind: 'http_error', status: 502, body: { error: { message: 'bad gateway' } } });
    steady.setDefault({ kind: 'text', text: 'Steady.', usage: USAGE });
    const app = await start([mini([deployment('flaky', flaky), deployment('steady', steady)])], { routingCooldownMs: 1_500 });
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });

    // Equal weights: "flaky" is tried first about every other request, until its third failure cools it down.
    for (let i = 0; i < 40 && chatCount(flaky) < 3; i++) await chat(workspace);
    for (let i = 0; i < 10; i++) expect((await chat(workspace)).x_service.deployment).toBe('steady');
    expect(chatCount(flaky)).toBe(3);
    const snapshot = () => app.app.get(ProvidersService).deployments().find((d) => d.label === 'flaky');
    expect(snapshot()).toMatchObject({ state: 'cooldown' });

    // Recovered meanwhile; after the cooldown it is tried again and, answering, takes traffic.
    flaky.setDefault({ kind: 'text', text: 'Back.', usage: USAGE });
    await new Promise((resolve) => setTimeout(resolve, 1_700));
    const answers: Completion[] = [];
    for (let i = 0; i < 30; i++) answers.push(await chat(workspace));
    expect(answers.filter((a) => a.x_service.deployment === 'flaky').length).toBeGreaterThan(3);
    expect(snapshot()).toMatchObject({ state: 'healthy' });
  });

  it('spreads requests by weight: 3:1 lands within a few percent of 75/25', async () => {
    fakes = await startFakes(2);
    for (const fake of fakes) fake.setDefault({ kind: 'text', text: 'Ok.', usage: USAGE });
    const app = await start([mini([deployment('heavy', fakes[0], { weight: 3 }), deployment('light', fakes[1], { weight: 1 })])]);
    const workspace = await app.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000_000 });
    for (let i = 0; i < 1_000; i++) await chat(workspace);
    const heavy = chatCount(fakes[0]) / 1_000;
    expect(heavy).toBeGreaterThan(0.7);
    expect(heavy).toBeLessThan(0.8);
    expect(chatCount(fakes[0]) + chatCount(fakes[1])).toBe(1_000);
  }, 120_000);

  it("falls back on the client's `models` (plain and streamed), and on the catalog's fallbacks; the answering model is in `model` and the usage record", async () => {
    fakes = await startFakes(2);
    const [down, up] = fakes;
    down.setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'down' } } });
    up.setDefault({ kind: 'text', text: 'From the fallback.', usage: USAGE });
    const app = await start([
      mini([deployment('up', up)]),
      { id: 'big-model', provider: 'openai', context_length: 128_000, input_price: 100_000, output_price: 400_000, deployments: [deployment('down', down)], fallbacks: ['gpt-4o-mini'] },
      { id: 'other-model', provider: 'openai', context_length: 128_000, input_price: 100_000, output_price: 400_000, deployments: [deployment('down2', down)] },
    ]);
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });

    const plain = await chat(workspace, { model: 'other-model', models: ['other-model', 'gpt-4o-mini'] });
    expect(plain.model).toBe('gpt-4o-mini');
    expect(plain.x_service).toMatchObject({ deployment: 'up', cost_millicents: (100 * MINI.input + 10 * MINI.output) / 1e6 });
    expect(plain.x_service.attempts).toBeGreaterThan(1);

    const { chunks, error } = await streamed(workspace, { model: undefined, models: ['other-model', 'gpt-4o-mini'] });
    expect(error).toBeUndefined();
    expect(chunks.length).toBeGreaterThan(0);
    expect(chunks.every((c) => c.model === 'gpt-4o-mini')).toBe(true);

    const byCatalog = await chat(workspace, { model: 'big-model' });
    expect(byCatalog.model).toBe('gpt-4o-mini');

    await app.settled(workspace.id);
    const models = await db.query(`SELECT model FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [workspace.id]);
    expect(models.map((r: { model: string }) => r.model)).toEqual(['gpt-4o-mini', 'gpt-4o-mini', 'gpt-4o-mini']);

    // An unknown model in `models` is refused as `model` is, naming the parameter.
    await expect(chat(workspace, { models: ['gpt-4o-mini', 'no-such-model'] })).rejects.toMatchObject({ status: 404, param: 'models' });

    // A key allowed only big-model never reaches the catalog's fallback it may not run: the request fails as big-model's own deployments did.
    await app.app.get(ApiKeysService).setLimits(workspace.apiKeyId, { allowedModels: ['big-model'] });
    const servedBefore = chatCount(up);
    await expect(chat(workspace, { model: 'big-model' })).rejects.toMatchObject({ status: 502 });
    expect(chatCount(up)).toBe(servedBefore);
  });
});

describeWithRedisServer('upstream routing across two replicas', () => {
  let redis: RedisServer;
  let fakes: FakeOpenAi[];
  let replicas: TestApp[] = [];

  beforeAll(async () => {
    redis = await startRedisServer();
    fakes = await startFakes(4);
    for (const fake of fakes) fake.setDefault({ kind: 'text', text: 'Ok.', usage: USAGE });
    fakes[2].setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'down' } } });
    const databaseUrl = await createTestDatabase();
    const modelCatalogFile = catalog([
      mini([deployment('budgeted', fakes[0], { rpm: 7, weight: 10 }), deployment('spare', fakes[1])]),
      { ...mini([deployment('dead', fakes[2], { weight: 100 }), deployment('alive', fakes[3])]), id: 'shared-cooldown' },
    ]);
    for (let i = 0; i < 2; i++) {
      replicas.push(await startTestApp({ databaseUrl, config: { llmSimulator: 'off', modelCatalogFile, redisUrl: redis.url } }));
    }
  });
  afterAll(async () => {
    for (const replica of replicas) await replica.close();
    replicas = [];
    await Promise.all(fakes.map((f) => f.close()));
    await redis.stop();
  });

  it("never takes a deployment past its own rpm budget, counted across replicas", async () => {
    const workspace = await replicas[0].createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
    const second = { ...workspace, client: new OpenAI({ baseURL: `${replicas[1].baseUrl}/v1`, apiKey: workspace.apiKey, maxRetries: 0 }) };
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => chat(i % 2 === 0 ? workspace : second)));
    expect(answers).toHaveLength(30);
    expect(chatCount(fakes[0])).toBe(7);
    expect(chatCount(fakes[1])).toBe(23);
  });

  it('shares a cooldown: a deployment one replica cooled down gets nothing from the other', async () => {
    const workspace = await replicas[0].createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
    const second = { ...workspace, client: new OpenAI({ baseURL: `${replicas[1].baseUrl}/v1`, apiKey: workspace.apiKey, maxRetries: 0 }) };
    // Weighted 100:1, "dead" is tried first nearly always: 3 failures on replica 0 cool it down.
    for (let i = 0; i < 6; i++) await chat(workspace, { model: 'shared-cooldown' });
    expect(chatCount(fakes[2])).toBe(3);
    // Replica 1 reads the shared cooldown within a second.
    await new Promise((resolve) => setTimeout(resolve, 1_200));
    for (let i = 0; i < 10; i++) expect((await chat(second, { model: 'shared-cooldown' })).x_service.deployment).toBe('alive');
    expect(chatCount(fakes[2])).toBe(3);
  });
});
