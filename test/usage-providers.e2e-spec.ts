import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { FakeAnthropic, startFakeAnthropic, textReply } from './fakes/fake-anthropic';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface XService {
  cost_millicents: number;
  provider: string | null;
  deployment: string | null;
  attempts: number;
}
interface RecordOut {
  request_id: string;
  model: string;
  status: string;
  provider: string | null;
  deployment: string | null;
  attempts: number;
  total_cost_millicents: number;
}
interface Summary {
  summary: { total_requests: number; total_cost_millicents: number };
  by_provider: { provider: string | null; requests: number; cost_millicents: number }[];
}

/**
 * Who answered, through the whole service: chat requests of two providers (the default
 * catalog's gpt-4o-mini is OpenAI's, claude-haiku-4-5 Anthropic's, each with the single-key
 * deployment labelled with the provider's name) leave usage records that say so, and
 * /v1/usage groups them by provider, a request no provider answered under null.
 */
describe('usage by provider', () => {
  let openai: FakeOpenAi;
  let anthropic: FakeAnthropic;
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    openai = await startFakeOpenAi();
    anthropic = await startFakeAnthropic({ apiKey: 'sk-ant-test' });
    t = await startTestApp({
      config: {
        providers: {
          openai: { apiKey: 'sk-openai-test', baseUrl: openai.url },
          anthropic: { apiKey: 'sk-ant-test', baseUrl: anthropic.url },
        },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
      },
    });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await anthropic.close();
    await openai.close();
  });

  const get = <T>(path: string, client = workspace.client) => client.get(path) as Promise<T>;

  it('records a request refused before any upstream attempt with no provider, no deployment and 0 attempts', async () => {
    const broke = await t.createWorkspace({ balanceMillicents: 0 });
    await expect(broke.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello!' }] })).rejects.toMatchObject({
      status: 402,
    });
    const recent = await get<{ data: RecordOut[] }>('/usage/recent', broke.client);
    expect(recent.data.map((record) => [record.status, record.provider, record.deployment, record.attempts])).toEqual([['error', null, null, 0]]);
    const { data } = await get<{ data: Summary }>('/usage', broke.client);
    expect(data.by_provider).toEqual([{ provider: null, requests: 1, cost_millicents: 0 }]);
    expect(openai.requests).toHaveLength(0);
  });

  it('keeps the provider, deployment and attempts of each request on its record, and sums /v1/usage by provider exactly', async () => {
    const chat = async (model: string) => {
      const { data, response } = await workspace.client.chat.completions
        .create({ model, messages: [{ role: 'user', content: 'Hello!' }] })
        .withResponse();
      return { xService: (data as unknown as { x_service: XService }).x_service, requestId: response.headers.get('x-request-id')! };
    };
    openai.script(
      { kind: 'text', text: 'One.', usage: { prompt_tokens: 1_000, completion_tokens: 10 } },
      { kind: 'text', text: 'Two.', usage: { prompt_tokens: 3_000, completion_tokens: 30 } },
    );
    anthropic.script(textReply('Three.', { usage: { input_tokens: 2_000, output_tokens: 20 } }));
    const answered = [await chat('gpt-4o-mini'), await chat('gpt-4o-mini'), await chat('claude-haiku-4-5')];
    expect(answered.map(({ xService }) => [xService.provider, xService.deployment, xService.attempts])).toEqual([
      ['openai', 'openai', 1],
      ['openai', 'openai', 1],
      ['anthropic', 'anthropic', 1],
    ]);

    // An upstream failure with no other deployment to move to: no provider answered it.
    openai.script({ kind: 'http_error', status: 500, body: { error: { message: 'down', type: 'server_error' } } });
    await expect(chat('gpt-4o-mini')).rejects.toMatchObject({ status: expect.any(Number) as number });

    // Each answered request's own record says who answered it (records settled in one batch share a timestamp: not ordered here).
    const recent = await get<{ data: RecordOut[] }>('/usage/recent');
    expect(recent.data).toHaveLength(4);
    const byRequest = new Map(recent.data.map((record) => [record.request_id, record]));
    expect(answered.map(({ requestId }) => byRequest.get(requestId)).map((record) => [record?.model, record?.status, record?.provider, record?.deployment, record?.attempts])).toEqual([
      ['gpt-4o-mini', 'success', 'openai', 'openai', 1],
      ['gpt-4o-mini', 'success', 'openai', 'openai', 1],
      ['claude-haiku-4-5', 'success', 'anthropic', 'anthropic', 1],
    ]);
    const failed = recent.data.filter((record) => record.status === 'error');
    expect(failed.map((record) => [record.model, record.provider, record.deployment, record.attempts])).toEqual([['gpt-4o-mini', null, null, 1]]);

    // In micro-millicents, exact: gpt-4o-mini costs 15,000 and 60,000 millicents per million
    // tokens, claude-haiku-4-5 100,000 and 500,000.
    const openaiMicros = 1_000 * 15_000 + 10 * 60_000 + 3_000 * 15_000 + 30 * 60_000;
    const anthropicMicros = 2_000 * 100_000 + 20 * 500_000;
    const [openaiCost, anthropicCost] = [openaiMicros / 1e6, anthropicMicros / 1e6];
    expect(answered.map(({ xService }) => xService.cost_millicents)).toEqual([15.6, 46.8, anthropicCost]);
    const { data } = await get<{ data: Summary }>('/usage');
    expect(data.by_provider).toEqual([
      { provider: 'anthropic', requests: 1, cost_millicents: anthropicCost },
      { provider: 'openai', requests: 2, cost_millicents: openaiCost },
      { provider: null, requests: 1, cost_millicents: 0 },
    ]);
    expect(data.summary).toMatchObject({ total_requests: 4, total_cost_millicents: (openaiMicros + anthropicMicros) / 1e6 });
  });
});

describe('usage by provider, after a failover', () => {
  let down: FakeOpenAi;
  let up: FakeOpenAi;
  let t: TestApp;

  beforeAll(async () => {
    [down, up] = await Promise.all([startFakeOpenAi(), startFakeOpenAi()]);
    down.setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'down', type: 'server_error' } } });
    up.setDefault({ kind: 'text', text: 'From the fallback.', usage: { prompt_tokens: 100, completion_tokens: 10 } });
    process.env.USAGE_PROVIDERS_TEST_KEY = 'sk-usage-providers';
    const deployment = (label: string, fake: FakeOpenAi) => ({ label, provider: 'openai', base_url: fake.url, api_key_env: 'USAGE_PROVIDERS_TEST_KEY' });
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'usage-providers-')), 'models.json');
    writeFileSync(
      file,
      JSON.stringify({
        models: [
          { id: 'gpt-4o-mini', provider: 'openai', context_length: 128_000, input_price: 15_000, output_price: 60_000, deployments: [deployment('mini-up', up)] },
          {
            id: 'big-model',
            provider: 'openai',
            context_length: 128_000,
            input_price: 100_000,
            output_price: 400_000,
            deployments: [deployment('big-down', down)],
            fallbacks: ['gpt-4o-mini'],
          },
        ],
      }),
    );
    t = await startTestApp({ config: { llmSimulator: 'off', modelCatalogFile: file, upstreamMaxRetries: 0 } });
  });
  afterAll(async () => {
    await t.close();
    await Promise.all([down.close(), up.close()]);
  });

  it('records the deployment that answered and every attempt, the failed one included, and charges only the answer', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const completion = await workspace.client.chat.completions.create({ model: 'big-model', messages: [{ role: 'user', content: 'Hello!' }] });
    const xService = (completion as unknown as { x_service: XService }).x_service;
    expect(xService).toMatchObject({ provider: 'openai', deployment: 'mini-up', attempts: 2 });
    expect(down.requests).toHaveLength(1);

    const recent = (await workspace.client.get('/usage/recent')) as { data: RecordOut[] };
    expect(recent.data).toEqual([
      expect.objectContaining({ status: 'success', provider: 'openai', deployment: 'mini-up', attempts: 2, total_cost_millicents: xService.cost_millicents }),
    ]);
    // gpt-4o-mini's prices, where the answer came from: the failed attempt on big-model cost nothing.
    expect(xService.cost_millicents).toBe((100 * 15_000 + 10 * 60_000) / 1e6);
    const { data } = (await workspace.client.get('/usage')) as { data: Summary };
    expect(data.by_provider).toEqual([{ provider: 'openai', requests: 1, cost_millicents: xService.cost_millicents }]);
  });
});
