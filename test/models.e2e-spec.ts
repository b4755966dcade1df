import OpenAI from 'openai';
import { openAiClient, startTestApp, TestApp, TestWorkspace } from './support/test-app';

describe('models through the OpenAI SDK', () => {
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    t = await startTestApp();
    workspace = await t.createWorkspace({ tier: 'enterprise' });
  });
  afterAll(() => t.close());

  it('lists the curated eight models with the spec shape', async () => {
    const page = await workspace.client.models.list();
    const models = page.data as unknown as Array<Record<string, unknown>>;
    expect(models).toHaveLength(8);
    const contexts = models.map((m) => m.context_length).sort();
    expect(contexts.filter((c) => c === 128_000)).toHaveLength(3);
    expect(contexts.filter((c) => c === 200_000)).toHaveLength(3);
    expect(contexts.filter((c) => c === 1_000_000)).toHaveLength(2);
    expect(new Set(models.map((m) => m.owned_by)).size).toBeGreaterThanOrEqual(3);
    for (const model of models) {
      expect(Object.keys(model).sort()).toEqual(['capabilities', 'context_length', 'created', 'id', 'object', 'owned_by']);
      expect(model.object).toBe('model');
      expect(Number.isInteger(model.created)).toBe(true);
      expect(model.capabilities).toEqual({ vision: true, function_calling: true });
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
});
