import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { openAiClient, startTestApp, TestApp, TestWorkspace } from './support/test-app';

const anthropicClient = (baseURL: string, apiKey: string) => new Anthropic({ baseURL, apiKey, maxRetries: 0, timeout: 20_000 });
const refusalOf = (promise: Promise<unknown>) => promise.then(() => undefined, (error: unknown) => error as InstanceType<typeof Anthropic.APIError>);

describe('models through the OpenAI SDK', () => {
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    t = await startTestApp();
    workspace = await t.createWorkspace({ tier: 'enterprise' });
  });
  afterAll(() => t.close());

  it('lists the curated eight chat models with the spec shape, then the embedding models as such', async () => {
    const page = await workspace.client.models.list();
    const all = page.data as unknown as Array<Record<string, unknown>>;
    expect(all).toHaveLength(11);
    const models = all.filter((m) => m.kind === 'chat');
    expect(models).toHaveLength(8);
    expect(all.filter((m) => m.kind === 'embedding')).toEqual([
      expect.objectContaining({ id: 'text-embedding-3-small', object: 'model', embedding: { dimensions: 1536, adjustable: true } }),
      expect.objectContaining({ id: 'text-embedding-3-large', embedding: { dimensions: 3072, adjustable: true } }),
      expect.objectContaining({ id: 'gemini-embedding-001', owned_by: 'google', embedding: { dimensions: 3072, adjustable: true } }),
    ]);
    const contexts = models.map((m) => m.context_length).sort();
    expect(contexts.filter((c) => c === 128_000)).toHaveLength(3);
    expect(contexts.filter((c) => c === 200_000)).toHaveLength(3);
    expect(contexts.filter((c) => c === 1_000_000)).toHaveLength(2);
    expect(new Set(models.map((m) => m.owned_by)).size).toBeGreaterThanOrEqual(3);
    for (const model of models) {
      expect(Object.keys(model).sort()).toEqual(['capabilities', 'context_length', 'created', 'id', 'kind', 'object', 'owned_by']);
      expect(model.object).toBe('model');
      expect(Number.isInteger(model.created)).toBe(true);
      expect(model.capabilities).toEqual({ vision: true, function_calling: true, reasoning: !['gpt-4o', 'gpt-4o-mini', 'gpt-4-turbo'].includes(model.id as string) });
    }
  });

  it('retrieves one model by id', async () => {
    const model = await workspace.client.models.retrieve('claude-sonnet-4-6');
    expect(model).toMatchObject({ id: 'claude-sonnet-4-6', object: 'model', owned_by: 'anthropic', context_length: 200_000 });
  });

  it('answers an unknown model with NotFoundError and code model_not_found', async () => {
    const error = await workspace.client.models.retrieve('gpt-0').catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.NotFoundError);
    expect((error as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({
      type: 'not_found',
      code: 'model_not_found',
    });
  });

  it('raises AuthenticationError for a bad key, with the error body of the contract', async () => {
    const error = await openAiClient(t.baseUrl, 'sk-not-a-real-key-0000000000000000000000000')
      .models.list()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    const apiError = error as InstanceType<typeof OpenAI.AuthenticationError>;
    expect(apiError.status).toBe(401);
    expect(apiError.error).toEqual({
      type: 'authentication_error',
      message: expect.any(String),
      code: 'invalid_api_key',
      param: null,
    });
    expect(apiError.headers?.get('x-ratelimit-limit')).toBe(String(t.config.anonymousRateLimitRpm));
  });

  describe("in Anthropic's shape (a request with anthropic-version, as the Anthropic SDK sends)", () => {
    const catalogIds = ['gpt-4o', 'gpt-4o-mini', 'gpt-4-turbo', 'o4-mini', 'claude-sonnet-4-6', 'claude-haiku-4-5', 'gemini-2.5-pro', 'gemini-2.5-flash'];
    const client = () => anthropicClient(t.baseUrl, workspace.apiKey);

    it('lists the catalog as Anthropic model objects, a page at a time', async () => {
      const page = await client().models.list({ limit: 3 });
      expect(page.data.map((model) => model.id)).toEqual(catalogIds.slice(0, 3));
      expect(page).toMatchObject({ has_more: true, first_id: 'gpt-4o', last_id: 'gpt-4-turbo' });
      expect(page.data[0]).toEqual({
        type: 'model',
        id: 'gpt-4o',
        display_name: 'gpt-4o',
        created_at: '2024-05-10T18:50:49Z',
        max_input_tokens: 128_000,
        max_tokens: 16_384,
      });
      // The SDK follows after_id (last_id) to the end.
      const all: string[] = [];
      for await (const model of client().models.list({ limit: 3 })) all.push(model.id);
      expect(all).toEqual(catalogIds);

      const raw = async (query: string) => {
        const response = await fetch(`${t.baseUrl}/v1/models${query}`, { headers: { 'x-api-key': workspace.apiKey, 'anthropic-version': '2023-06-01' } });
        return { status: response.status, body: (await response.json()) as Record<string, any> };
      };
      expect((await raw('')).body).toMatchObject({ has_more: false, first_id: 'gpt-4o', last_id: 'gemini-2.5-flash' });
      expect((await raw('')).body.data).toHaveLength(8);
      expect((await raw('?after_id=gemini-2.5-pro')).body).toEqual({ data: [expect.objectContaining({ id: 'gemini-2.5-flash' })], has_more: false, first_id: 'gemini-2.5-flash', last_id: 'gemini-2.5-flash' });
      expect((await raw('?before_id=claude-sonnet-4-6&limit=2')).body).toMatchObject({ has_more: true, first_id: 'gpt-4-turbo', last_id: 'o4-mini' });
      expect((await raw('?before_id=gpt-4-turbo')).body).toMatchObject({ has_more: false, first_id: 'gpt-4o', last_id: 'gpt-4o-mini' });
      for (const [query, param] of [['?limit=0', 'limit'], ['?limit=1001', 'limit'], ['?limit=abc', 'limit'], ['?after_id=gpt-0', 'after_id'], ['?after_id=gpt-4o&before_id=o4-mini', 'before_id']]) {
        const refused = await raw(query);
        expect([query, refused.status]).toEqual([query, 400]);
        expect(refused.body).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', param } });
      }
    });

    it('retrieves one model, and answers an unknown one with not_found_error', async () => {
      expect(await client().models.retrieve('claude-sonnet-4-6')).toEqual({
        type: 'model',
        id: 'claude-sonnet-4-6',
        display_name: 'claude-sonnet-4-6',
        created_at: '2026-11-22T00:00:00Z',
        max_input_tokens: 200_000,
        max_tokens: 64_000,
      });
      const unknown = await refusalOf(client().models.retrieve('claude-unknown'));
      expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
      expect(unknown!.error).toMatchObject({ type: 'error', error: { type: 'not_found_error', code: 'model_not_found' } });
    });

    it("refuses a bad key in Anthropic's shape", async () => {
      const refused = await refusalOf(anthropicClient(t.baseUrl, 'sk-not-a-real-key-0000000000000000000000000').models.list());
      expect(refused).toBeInstanceOf(Anthropic.AuthenticationError);
      expect(refused!.error).toMatchObject({ type: 'error', error: { type: 'authentication_error', code: 'invalid_api_key' } });
    });
  });
});

/**
 * Aliases: a catalog whose gpt-4o-mini (served by a fake OpenAI) also answers to Claude's
 * names, beside a simulated model. Requests naming an alias run gpt-4o-mini under the key's
 * checks; the answer shows the name asked for, the usage record the model's id.
 */
describe('model aliases', () => {
  let t: TestApp;
  let upstream: FakeOpenAi;
  let workspace: TestWorkspace;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    const file = path.join(mkdtempSync(path.join(tmpdir(), 'catalog-')), 'models.json');
    writeFileSync(
      file,
      JSON.stringify({
        models: [
          { id: 'gpt-4o-mini', provider: 'openai', context_length: 128_000, max_output_tokens: 16_384, input_price: 15_000, output_price: 60_000, aliases: ['claude-sonnet-4-6', 'claude-haiku-4-5'] },
          { id: 'local-echo', provider: 'simulator', context_length: 32_000, input_price: 1_000, output_price: 2_000 },
        ],
      }),
    );
    t = await startTestApp({ config: { llmSimulator: 'off', simulatorWordDelayMs: 0, upstreamMaxRetries: 0, modelCatalogFile: file, providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } } } });
    db = t.app.get(DataSource);
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  const recordedModels = async (workspaceId: string) => {
    await t.settled(workspaceId);
    const rows = (await db.query(`SELECT model, status FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [workspaceId])) as Array<{ model: string; status: string }>;
    return rows.map((row) => `${row.status} ${row.model}`);
  };

  it('runs the model through chat completions, Responses and Messages, answering under the alias and recording the id', async () => {
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const completion = await own.client.chat.completions.create({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: 'Hello' }] });
    expect(completion.model).toBe('claude-sonnet-4-6');
    expect(upstream.requests.at(-1)!.body).toMatchObject({ model: 'gpt-4o-mini' });

    const streamed: string[] = [];
    for await (const chunk of await own.client.chat.completions.create({ model: 'claude-haiku-4-5', stream: true, messages: [{ role: 'user', content: 'Hello' }] })) {
      streamed.push(chunk.model);
    }
    expect(new Set(streamed)).toEqual(new Set(['claude-haiku-4-5']));

    const response = await own.client.responses.create({ model: 'claude-sonnet-4-6', input: 'Hello' });
    expect(response.model).toBe('claude-sonnet-4-6');

    const anthropic = anthropicClient(t.baseUrl, own.apiKey);
    const message = await anthropic.messages.create({ model: 'claude-sonnet-4-6', max_tokens: 32_000, messages: [{ role: 'user', content: 'Hello' }] });
    expect(message.model).toBe('claude-sonnet-4-6');
    expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
    expect(upstream.requests.at(-1)!.body).toMatchObject({ model: 'gpt-4o-mini', max_tokens: 16_384 });
    expect(await anthropic.messages.countTokens({ model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'Hello' }] })).toEqual({ input_tokens: expect.any(Number) });

    expect(await recordedModels(own.id)).toEqual(['success gpt-4o-mini', 'success gpt-4o-mini', 'success gpt-4o-mini', 'success gpt-4o-mini']);
  });

  it("never lets an alias past a key's allowed models, which name models by id", async () => {
    const keys = t.app.get(ApiKeysService);
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    await expect(keys.setLimits(own.apiKeyId, { allowedModels: ['claude-sonnet-4-6'] })).rejects.toMatchObject({
      status: 400,
      param: 'allowed_models',
      message: expect.stringContaining('"claude-sonnet-4-6" is an alias of gpt-4o-mini'),
    });
    await keys.setLimits(own.apiKeyId, { allowedModels: ['local-echo'] });
    const chat = await own.client.chat.completions.create({ model: 'claude-sonnet-4-6', messages: [{ role: 'user', content: 'Hello' }] }).catch((e: unknown) => e);
    expect(chat).toBeInstanceOf(OpenAI.PermissionDeniedError);
    expect((chat as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ code: 'model_not_allowed', message: expect.stringContaining('gpt-4o-mini') });
    const asFallback = await own.client.chat.completions
      .create({ model: 'local-echo', models: ['claude-haiku-4-5'], messages: [{ role: 'user', content: 'Hello' }] } as OpenAI.ChatCompletionCreateParamsNonStreaming)
      .catch((e: unknown) => e);
    expect(asFallback).toBeInstanceOf(OpenAI.PermissionDeniedError);
    const message = await refusalOf(anthropicClient(t.baseUrl, own.apiKey).messages.create({ model: 'claude-haiku-4-5', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
    expect(message).toBeInstanceOf(Anthropic.PermissionDeniedError);
    expect(message!.error).toMatchObject({ error: { type: 'permission_error', code: 'model_not_allowed' } });

    // The model's id in the list lets every name of it through.
    await keys.setLimits(own.apiKeyId, { allowedModels: ['gpt-4o-mini'] });
    const allowed = await own.client.chat.completions.create({ model: 'claude-haiku-4-5', models: ['claude-sonnet-4-6'], messages: [{ role: 'user', content: 'Hello' }] } as OpenAI.ChatCompletionCreateParamsNonStreaming);
    expect(allowed.model).toBe('claude-haiku-4-5');
    expect((await recordedModels(own.id)).filter((record) => record.startsWith('success'))).toEqual(['success gpt-4o-mini']);
  });

  it('lists each alias as its own entry, in both shapes, and retrieves it', async () => {
    const openAiList = (await workspace.client.models.list()).data as unknown as Array<Record<string, unknown>>;
    expect(openAiList.map((model) => [model.id, model.alias_of])).toEqual([
      ['gpt-4o-mini', undefined],
      ['claude-sonnet-4-6', 'gpt-4o-mini'],
      ['claude-haiku-4-5', 'gpt-4o-mini'],
      ['local-echo', undefined],
    ]);
    expect(openAiList[1]).toMatchObject({ object: 'model', owned_by: 'openai', context_length: 128_000 });
    expect(await workspace.client.models.retrieve('claude-sonnet-4-6')).toMatchObject({ id: 'claude-sonnet-4-6', alias_of: 'gpt-4o-mini' });

    const anthropic = anthropicClient(t.baseUrl, workspace.apiKey);
    const page = await anthropic.models.list();
    expect(page.data.map((model) => [model.id, model.display_name])).toEqual([
      ['gpt-4o-mini', 'gpt-4o-mini'],
      ['claude-sonnet-4-6', 'claude-sonnet-4-6 (gpt-4o-mini)'],
      ['claude-haiku-4-5', 'claude-haiku-4-5 (gpt-4o-mini)'],
      ['local-echo', 'local-echo'],
    ]);
    expect((await anthropic.models.list({ after_id: 'claude-sonnet-4-6', limit: 1 })).data.map((model) => model.id)).toEqual(['claude-haiku-4-5']);
    expect(await anthropic.models.retrieve('claude-haiku-4-5')).toMatchObject({ type: 'model', id: 'claude-haiku-4-5', display_name: 'claude-haiku-4-5 (gpt-4o-mini)' });
  });
});
