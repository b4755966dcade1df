import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * What of a client's request reaches OpenAI (or a compatible server). Billing multiplies the
 * upstream's token counts by the catalog's prices, so a parameter that makes a token cost
 * more (a priority tier) or adds a charge of another kind (audio, web search, predicted
 * outputs) would bill the operator for what the client does not pay: those are refused before
 * any money is held; standard parameters are forwarded; anything else is dropped.
 */
describe('the OpenAI adapter forwards standard parameters only', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let workspace: TestWorkspace;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({ config: { providers: { openai: { apiKey: 'sk-upstream-secret', baseUrl: upstream.url } }, upstreamMaxRetries: 0 } });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const lastBody = () => upstream.requests[upstream.requests.length - 1].body;
  const create = (client: OpenAI, fields: Record<string, unknown>) =>
    client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], ...fields } as never);

  it('forwards the standard chat-completion parameters as the client set them', async () => {
    const standard = {
      top_p: 0.9,
      seed: 42,
      stop: ['END'],
      n: 2,
      response_format: { type: 'json_object' },
      tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }],
      tool_choice: 'none',
      parallel_tool_calls: false,
      logprobs: true,
      top_logprobs: 3,
      frequency_penalty: 0.5,
      presence_penalty: -0.5,
      logit_bias: { '1734': -100 },
      user: 'user-7',
      safety_identifier: 'hash-7',
      verbosity: 'low',
      service_tier: 'default',
      modalities: ['text'],
    };
    await create(workspace.client, { ...standard, max_tokens: 50 });
    expect(lastBody()).toMatchObject({ ...standard, model: 'gpt-4o-mini', max_tokens: 50 });

    await create(workspace.client, { service_tier: 'auto' });
    expect(lastBody()).toMatchObject({ service_tier: 'auto' });
  });

  it('forwards reasoning_effort to a model that reasons (o4-mini), and drops it for one that does not (gpt-4o-mini)', async () => {
    await create(workspace.client, { model: 'o4-mini', reasoning_effort: 'high' });
    expect(lastBody()).toMatchObject({ model: 'o4-mini', reasoning_effort: 'high' });

    // OpenAI answers 400 to reasoning_effort on gpt-4o-mini: it must never get there.
    const completion = await create(workspace.client, { reasoning_effort: 'low' });
    expect((completion as OpenAI.Chat.ChatCompletion).choices[0].message.content).toBe('Hello from the fake upstream.');
    expect(lastBody()).toMatchObject({ model: 'gpt-4o-mini' });
    expect(lastBody()).not.toHaveProperty('reasoning_effort');
  });

  it('drops every other field, plain and streamed', async () => {
    const others = {
      store: true,
      metadata: { project: 'x' },
      best_of: 5,
      prompt_cache_key: 'another-tenant',
      top_k: 40,
      echo: true,
      some_future_field: { anything: 1 },
      service_tier: null,
    };
    const completion = await create(workspace.client, others);
    expect((completion as OpenAI.Chat.ChatCompletion).choices[0].message.content).toBe('Hello from the fake upstream.');
    for (const name of Object.keys(others)) expect(lastBody()).not.toHaveProperty(name);

    const stream = (await create(workspace.client, { ...others, stream: true })) as unknown as AsyncIterable<OpenAI.Chat.ChatCompletionChunk>;
    for await (const chunk of stream) void chunk;
    for (const name of Object.keys(others)) expect(lastBody()).not.toHaveProperty(name);
    expect(lastBody()).toMatchObject({ stream: true, stream_options: { include_usage: true } });
  });

  describe('refuses what would bill beyond the catalog prices, before any money is held', () => {
    it.each([
      ['service_tier', { service_tier: 'priority' }],
      ['service_tier', { service_tier: 'flex' }],
      ['service_tier', { service_tier: 'scale' }],
      ['modalities', { modalities: ['text', 'audio'] }],
      ['modalities', { modalities: 'audio' }],
      ['audio', { audio: { voice: 'alloy', format: 'wav' } }],
      ['web_search_options', { web_search_options: {} }],
      ['prediction', { prediction: { type: 'content', content: 'a long guess' } }],
    ])('%s: %j', async (param, fields) => {
      const before = upstream.requests.length;
      // The earlier tests' requests committed and their lease went back: nothing is held.
      await t.quiet(workspace.id);
      const { balance } = await walletInvariants(db, workspace.id);
      for (const stream of [false, true]) {
        const error = await create(workspace.client, { ...fields, stream }).then(
          () => undefined,
          (e: unknown) => e,
        );
        expect(error).toBeInstanceOf(OpenAI.BadRequestError);
        expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({
          type: 'bad_request',
          code: 'unsupported_parameter',
          param,
        });
      }
      expect(upstream.requests.length).toBe(before);
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance, reserved: 0, ledger: balance, holds: 0 });
    });

    it('answers an empty wallet with the refusal, not insufficient_balance: the check comes before the hold', async () => {
      const broke = await t.createWorkspace({ balanceMillicents: 0 });
      const error = await create(broke.client, { service_tier: 'priority' }).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ code: 'unsupported_parameter', param: 'service_tier' });
      const [record] = await db.query(`SELECT status, error_code FROM usage_records WHERE workspace_id = $1`, [broke.id]);
      expect(record).toEqual({ status: 'error', error_code: 'unsupported_parameter' });
    });
  });
});
