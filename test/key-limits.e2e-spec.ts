import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { NerfingRulesService } from '../src/limits/nerfing/nerfing-rules.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

const ANSWER = 'An answer. '.repeat(130).trim();

interface KeyInfo {
  id: string;
  name: string | null;
  label: string;
  limit: number | null;
  limit_millicents: number | null;
  limit_reset: string | null;
  limit_resets_at: string | null;
  limit_remaining: number | null;
  limit_remaining_millicents: number | null;
  usage: number;
  period_usage_millicents: number;
  reserved_millicents: number;
  usage_daily: number;
  allowed_models: string[] | null;
  rate_limit_rpm: number | null;
}

/**
 * Per-key controls through the whole service, with the official SDK: a key's spending limit
 * holds under concurrency on the same money path as the wallet, resets with its period and
 * leaves the workspace's other keys alone; a key's models, assistants, rate and client
 * addresses are enforced before anything is held; usage splits by key and adds up to the ledger.
 */
describe('API key limits', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let keys: ApiKeysService;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    // About 390 output tokens of gpt-4o ($10 per million): about 390 millicents an answer. No usage
    // is reported, so the service counts the prompt as its estimate did, as OpenAI's own count
    // does (a provider that counts more prompt tokens than the estimate: see docs/api.md, "Key limits").
    upstream.setDefault({ kind: 'text', text: ANSWER, usage: null });
    t = await startTestApp({ config: { providers: { openai: { apiKey: 'sk-test', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 } });
    db = t.app.get(DataSource);
    keys = t.app.get(ApiKeysService);
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const ask = (client: OpenAI, model = 'gpt-4o', extra: Record<string, unknown> = {}) =>
    client.chat.completions.create({ model, max_tokens: 600, messages: [{ role: 'user', content: 'Hello!' }], ...extra });
  const keyInfo = async (client: OpenAI) => (await client.get<{ data: KeyInfo }>('/key')).data;
  /** What the key's requests were charged, from their usage records (whole millicents). */
  const chargedTo = async (keyId: string) =>
    Number((await db.query(`SELECT coalesce(sum(charged_millicents), 0) AS sum FROM usage_records WHERE api_key_id = $1`, [keyId]))[0].sum);
  const keyHolds = async (keyId: string) => Number((await db.query(`SELECT count(*) AS n FROM api_key_holds WHERE api_key_id = $1`, [keyId]))[0].n);
  const secondKey = async (workspace: TestWorkspace, name: string) => {
    const key = await keys.create(workspace.id, name);
    return { id: key.id, client: new OpenAI({ apiKey: key.apiKey, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 }) };
  };

  it('never lets 50 concurrent requests take a key past its daily limit, and starts again the next day', async () => {
    // Tier team (300 rpm): the burst, the requests one by one and the key's reads are some 70 requests in a minute,
    // past the default tier's 60, and this test is about the key's money, not the workspace's rate.
    const workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    await keys.setLimits(workspace.apiKeyId, { spendLimitMillicents: 5_000, spendLimitPeriod: 'daily' });
    const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });

    const outcomes = await Promise.allSettled(Array.from({ length: 50 }, () => ask(client)));
    const refusals = outcomes.filter((outcome) => outcome.status === 'rejected').map((outcome) => (outcome as PromiseRejectedResult).reason as InstanceType<typeof OpenAI.APIError>);
    const answers = outcomes.filter((outcome) => outcome.status === 'fulfilled').map((outcome) => outcome.value);
    const answered = answers.length;
    expect(answered).toBeGreaterThanOrEqual(5);
    expect(refusals.length).toBeGreaterThan(0);
    // Refused because the limit is spent (402), or because requests in flight hold it (429 with Retry-After: they settle for less).
    for (const refusal of refusals) {
      expect([`402 key_limit_exceeded`, `429 key_limit_held`]).toContain(`${refusal.status} ${refusal.code}`);
      expect(typeof (refusal.error as { remaining_millicents?: unknown }).remaining_millicents).toBe('number');
      expect(refusal.message).toMatch(/spending limit \(5000 millicents per day \(UTC\)\)/);
      if (refusal.status === 429) expect(refusal.headers?.get('retry-after')).toBe('2');
    }
    expect(refusals.some((refusal) => refusal.status === 429)).toBe(true);
    await t.quiet(workspace.id);
    const charged = await chargedTo(workspace.apiKeyId);
    expect(charged).toBeLessThanOrEqual(5_000);
    // What was charged is what the answers cost (whole millicents: the wallet carries the fraction).
    const cost = answers.reduce((sum, answer) => sum + (answer as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents, 0);
    expect(Math.abs(charged - cost)).toBeLessThan(1);
    expect(await keyHolds(workspace.apiKeyId)).toBe(0);

    const info = await keyInfo(client);
    expect(info).toMatchObject({ limit: 0.05, limit_millicents: 5_000, limit_reset: 'daily', period_usage_millicents: charged, reserved_millicents: 0 });
    expect(info.limit_remaining_millicents).toBe(5_000 - charged);
    expect(new Date(info.limit_resets_at!).getTime()).toBe(Date.UTC(new Date().getUTCFullYear(), new Date().getUTCMonth(), new Date().getUTCDate() + 1));

    // Another key of the workspace has no limit of its own: the wallet covers it.
    const other = await secondKey(workspace, 'other');
    await expect(ask(other.client)).resolves.toMatchObject({ choices: [{ message: { content: ANSWER } }] });
    // The limited key, asked on one by one, is refused once what is left cannot cover a request...
    let refused: unknown;
    for (let attempt = 0; attempt < 10 && !refused; attempt++) {
      await t.quiet(workspace.id);
      refused = await ask(client).then(() => undefined, (error: unknown) => error);
    }
    expect(refused).toMatchObject({ status: 402, code: 'key_limit_exceeded' });
    // It says when the limit starts again: the next UTC midnight.
    expect((refused as Error).message).toContain(`It starts again at ${info.limit_resets_at}`);
    await t.quiet(workspace.id);
    expect(await chargedTo(workspace.apiKeyId)).toBeLessThanOrEqual(5_000);

    // ...until the next day. The database's clock cannot be moved: the key's spend is moved a day back instead, which is what midnight does to it.
    await db.query(`UPDATE api_key_spend SET day = day - 1 WHERE api_key_id = $1`, [workspace.apiKeyId]);
    expect(await keyInfo(client)).toMatchObject({ period_usage_millicents: 0, limit_remaining_millicents: 5_000 });
    await expect(ask(client)).resolves.toMatchObject({ choices: [{ message: { content: ANSWER } }] });
    await t.quiet(workspace.id);
    expect((await keyInfo(client)).period_usage_millicents).toBeGreaterThan(300);
  });

  it('refuses a model or an assistant the key may not use with 403, before anything is held', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    await keys.setLimits(workspace.apiKeyId, { allowedModels: ['gpt-4o-mini'] });
    const expensive = await t.app.get(AssistantsService).create(workspace.id, { name: 'Big', slug: 'big', model: 'gpt-4o' });
    const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });

    await expect(ask(client, 'gpt-4o')).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    await expect(ask(client, 'assistant/big')).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    // With assistant_id, `model` overrides the assistant's: what runs is what is checked.
    await expect(ask(client, 'gpt-4o', { assistant_id: expensive.id })).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    const balance = await client.get<{ reservedMillicents: number; balanceMillicents: number }>('/wallet');
    expect(balance).toMatchObject({ reservedMillicents: 0, balanceMillicents: 1_000_000 });
    expect(Number((await db.query(`SELECT count(*) AS n FROM wallet_holds WHERE workspace_id = $1`, [workspace.id]))[0].n)).toBe(0);

    await expect(ask(client, 'gpt-4o-mini')).resolves.toMatchObject({ model: 'gpt-4o-mini' });
    // An assistant list: only those assistants.
    await t.app.get(AssistantsService).create(workspace.id, { name: 'Small', slug: 'small', model: 'gpt-4o-mini' });
    await keys.setLimits(workspace.apiKeyId, { allowedAssistants: ['small'] });
    await expect(ask(client, 'assistant/small')).resolves.toMatchObject({ model: 'gpt-4o-mini' });
    await t.app.get(AssistantsService).create(workspace.id, { name: 'Other', slug: 'other-small', model: 'gpt-4o-mini' });
    await expect(ask(client, 'assistant/other-small')).rejects.toMatchObject({ status: 403, code: 'assistant_not_allowed' });
    await t.quiet(workspace.id);
  });

  it("checks every model a request may run against the key: `model` beside `models`, the Responses API, a nerfing downgrade", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    await keys.setLimits(workspace.apiKeyId, { allowedModels: ['gpt-4o-mini'] });
    const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    const servedBefore = upstream.requests.length;

    // `model` runs first; `models` only follows it: both are checked.
    await expect(ask(client, 'gpt-4o', { models: ['gpt-4o-mini'] })).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    await expect(client.responses.create({ model: 'gpt-4o', input: 'Hello!', max_output_tokens: 600 })).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    await expect(client.responses.create({ model: 'gpt-4o-mini', input: 'Hello!', max_output_tokens: 600 })).resolves.toMatchObject({ model: 'gpt-4o-mini' });

    // A key allowed only gpt-4o, under a rule that downgrades gpt-4o to gpt-4o-mini after one request a day: refused, never served by gpt-4o-mini.
    const big = await secondKey(workspace, 'big only');
    await keys.setLimits(big.id, { allowedModels: ['gpt-4o'] });
    await t.app.get(NerfingRulesService).add(workspace.id, { scope: 'all', window: 'day', metric: 'requests', threshold: '1', action: 'downgrade', model: 'gpt-4o-mini' });
    await expect(ask(big.client)).resolves.toMatchObject({ model: 'gpt-4o' });
    const downgraded = await ask(big.client).then(
      (answer) => answer.model,
      (error: unknown) => error,
    );
    expect(downgraded).toMatchObject({ status: 403, code: 'model_not_allowed' });
    expect((downgraded as Error).message).toMatch(/nerfing rule of the workspace downgrades gpt-4o to it/);
    // Of all these requests, upstream saw two: the mini one and the first gpt-4o one.
    expect(upstream.requests.length - servedBefore).toBe(2);
    await t.quiet(workspace.id);
    const served = (await db.query(`SELECT api_key_id, model FROM usage_records WHERE workspace_id = $1 AND status = 'success' ORDER BY created_at`, [workspace.id])) as { api_key_id: string; model: string }[];
    expect(served).toEqual([
      { api_key_id: workspace.apiKeyId, model: 'gpt-4o-mini' },
      { api_key_id: big.id, model: 'gpt-4o' },
    ]);
  });

  it("replays an Idempotency-Key's stored answer only to the key that made it", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const open = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${t.baseUrl}/v1`, maxRetries: 0 });
    const limited = await secondKey(workspace, 'mini only');
    await keys.setLimits(limited.id, { allowedModels: ['gpt-4o-mini'] });
    const withKey = (client: OpenAI) =>
      client.chat.completions.create({ model: 'gpt-4o', max_tokens: 600, messages: [{ role: 'user', content: 'Hello!' }] }, { headers: { 'Idempotency-Key': 'shared' } }).withResponse();

    const first = await withKey(open);
    const refused = await withKey(limited.client).catch((error: unknown) => error);
    expect(refused).toMatchObject({ status: 409, code: 'idempotency_key_reused' });
    expect((refused as Error).message).toMatch(/another API key/);
    // The key that made it gets its answer again.
    const again = await withKey(open);
    expect(again.response.headers.get('idempotent-replayed')).toBe('true');
    expect(again.data.id).toBe(first.data.id);
    await t.quiet(workspace.id);
    expect(await chargedTo(limited.id)).toBe(0);
  });

  it('splits usage by key, and the split adds up to the wallet ledger', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const first = { id: workspace.apiKeyId, client: workspace.client };
    const second = await secondKey(workspace, 'second');
    await Promise.all([ask(first.client), ask(first.client), ask(second.client), ask(first.client, 'gpt-4o-mini')]);
    await t.quiet(workspace.id);

    const summary = (await first.client.get<{ data: { summary: { total_requests: number }; by_api_key: { api_key_id: string; api_key_name: string | null; requests: number }[] } }>('/usage')).data;
    expect(summary.by_api_key.map((entry) => [entry.api_key_id, entry.requests]).sort()).toEqual([[first.id, 3], [second.id, 1]].sort());
    expect(summary.by_api_key.find((entry) => entry.api_key_id === second.id)?.api_key_name).toBe('second');
    const onlySecond = (await first.client.get<{ data: { summary: { total_requests: number } } }>(`/usage?api_key_id=${second.id}`)).data;
    expect(onlySecond.summary.total_requests).toBe(1);
    const recent = await first.client.get<{ data: { api_key_id: string; api_key_name: string }[] }>(`/usage/recent?api_key_id=${second.id}`);
    expect(recent.data).toEqual([expect.objectContaining({ api_key_id: second.id, api_key_name: 'second' })]);
    const daily = await first.client.get<{ data: { requests: number }[] }>(`/usage/daily?api_key_id=${first.id}`);
    expect(daily.data[0].requests).toBe(3);

    // Charged by key (records, and the keys' spend) = what left the wallet (the ledger's usage rows).
    const [ledger] = await db.query(`SELECT -sum(amount_millicents)::bigint AS spent FROM wallet_transactions WHERE workspace_id = $1 AND type = 'usage'`, [workspace.id]);
    const byKey = [await chargedTo(first.id), await chargedTo(second.id)];
    expect(byKey[0] + byKey[1]).toBe(Number(ledger.spent));
    expect((await keyInfo(first.client)).period_usage_millicents).toBe(byKey[0]);
    expect((await keyInfo(second.client)).period_usage_millicents).toBe(byKey[1]);
  });

  it("answers GET /v1/key for a key without limits, OpenRouter's fields included", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    const info = await keyInfo(workspace.client);
    expect(info).toMatchObject({ id: workspace.apiKeyId, limit: null, limit_reset: null, limit_remaining: null, usage: 0, usage_daily: 0, allowed_models: null, rate_limit_rpm: null });
  });

  it("limits a key's own rate within its workspace's, with the key's X-RateLimit headers", async () => {
    const workspace = await t.createWorkspace({ tier: 'pro', balanceMillicents: 1_000_000 });
    await keys.setLimits(workspace.apiKeyId, { rateLimitRpm: 2 });
    const other = await secondKey(workspace, 'unlimited');
    const call = (client: OpenAI) => client.models.list().withResponse();
    const first = await call(workspace.client);
    expect(first.response.headers.get('x-ratelimit-limit')).toBe('2');
    await call(workspace.client);
    await expect(call(workspace.client)).rejects.toMatchObject({ status: 429, code: 'rate_limit_exceeded' });
    const unaffected = await call(other.client);
    expect(Number(unaffected.response.headers.get('x-ratelimit-limit'))).toBeGreaterThan(2);
  });

  it('refuses a key outside its allowed client addresses', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    await keys.setLimits(workspace.apiKeyId, { allowedIps: ['203.0.113.0/24'] });
    await expect(workspace.client.models.list()).rejects.toMatchObject({ status: 403, code: 'ip_not_allowed' });
    await keys.setLimits(workspace.apiKeyId, { allowedIps: ['203.0.113.0/24', '127.0.0.1'] });
    await expect(workspace.client.models.list()).resolves.toBeDefined();
  });

  it('refuses limits a person could get wrong, naming the field', async () => {
    const workspace = await t.createWorkspace();
    await expect(keys.setLimits(workspace.apiKeyId, { spendLimitMillicents: -5 })).rejects.toMatchObject({ param: 'spend_limit' });
    await expect(keys.setLimits(workspace.apiKeyId, { allowedIps: ['10.0.0.0/40'] })).rejects.toMatchObject({ param: 'allowed_ips' });
    await expect(keys.setLimits(workspace.apiKeyId, { allowedModels: [] })).rejects.toMatchObject({ param: 'allowed_models' });
  });
});
