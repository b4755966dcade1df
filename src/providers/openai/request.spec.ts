import { Cancellation } from '../../common/cancellation';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ProviderRequest } from '../provider-adapter';
import { checkOpenAiParameters, toOpenAiParams } from './request';

const MODEL = DEFAULT_CATALOG.find((m) => m.provider === 'openai')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 100, extra: {}, cancellation: new Cancellation(), ...overrides };
}

describe('toOpenAiParams', () => {
  it('names the cap as the client did, else as OpenAI (max_completion_tokens) or a compatible server (max_tokens) wants', () => {
    expect(toOpenAiParams(request(), false)).toMatchObject({ max_completion_tokens: 100 });
    expect(toOpenAiParams(request(), true)).toMatchObject({ max_tokens: 100 });
    expect(toOpenAiParams(request({ maxTokensField: 'max_tokens' }), false)).toMatchObject({ max_tokens: 100 });
    expect(toOpenAiParams(request({ maxTokensField: 'max_completion_tokens' }), true)).not.toHaveProperty('max_tokens');
  });

  it('forwards the standard parameters the client set, and drops the others and nulls', () => {
    const params = toOpenAiParams(request({ extra: { top_p: 0.5, seed: null, store: true, metadata: { a: '1' }, top_k: 3 } }), false);
    expect(params).toMatchObject({ model: MODEL.upstreamModel, top_p: 0.5 });
    for (const name of ['seed', 'store', 'metadata', 'top_k', 'tools', 'temperature']) expect(params).not.toHaveProperty(name);
  });

  it('refuses what would be billed beyond the catalog prices', () => {
    expect(() => checkOpenAiParameters({ service_tier: 'flex' })).toThrow(/service_tier/);
    expect(() => toOpenAiParams(request({ extra: { modalities: ['text', 'audio'] } }), false)).toThrow(/modalities/);
    expect(() => checkOpenAiParameters({ service_tier: 'auto', modalities: ['text'] })).not.toThrow();
  });
});
