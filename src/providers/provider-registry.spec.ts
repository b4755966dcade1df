import { loadConfig, UPSTREAM_PROVIDERS } from '../config/app-config';
import { PROVIDER_NAMES } from '../models/model-catalog';
import { AnthropicAdapter } from './anthropic/anthropic.adapter';
import { GoogleAdapter } from './google/google.adapter';
import { OpenAiAdapter } from './openai/openai.adapter';
import { createConfiguredAdapters, PROVIDERS } from './provider-registry';

describe('provider registry', () => {
  it('has one entry per upstream provider of the configuration, and the catalog knows them all and the simulator', () => {
    const configured = UPSTREAM_PROVIDERS.map(([name]) => name);
    expect(PROVIDERS.map((entry) => entry.name).sort()).toEqual([...configured].sort());
    expect(PROVIDER_NAMES).toEqual(['openai', 'anthropic', 'google', 'simulator']);
  });

  it('builds an adapter for each provider with an API key only', () => {
    expect(createConfiguredAdapters(loadConfig({})).size).toBe(0);

    const adapters = createConfiguredAdapters(loadConfig({ ANTHROPIC_API_KEY: 'sk-ant', GEMINI_API_KEY: 'g', OPENAI_BASE_URL: 'http://vllm.local/v1' }));
    expect([...adapters.keys()]).toEqual(['anthropic', 'google']);
    expect(adapters.get('anthropic')).toBeInstanceOf(AnthropicAdapter);
    expect(adapters.get('google')).toBeInstanceOf(GoogleAdapter);

    const openai = createConfiguredAdapters(loadConfig({ OPENAI_API_KEY: 'sk', OPENAI_BASE_URL: 'http://vllm.local/v1' })).get('openai');
    expect(openai).toBeInstanceOf(OpenAiAdapter);
  });
});
