import { loadConfig, UPSTREAM_PROVIDERS } from '../config/app-config';
import { DEFAULT_CATALOG, PROVIDER_NAMES } from '../models/model-catalog';
import { AnthropicAdapter } from './anthropic/anthropic.adapter';
import { GoogleAdapter } from './google/google.adapter';
import { OpenAiAdapter } from './openai/openai.adapter';
import { PROVIDERS } from './provider-registry';
import { buildDeployments } from './routing/deployment';

describe('provider registry', () => {
  it('has one entry per upstream provider of the configuration, and the catalog knows them all and the simulator', () => {
    const configured = UPSTREAM_PROVIDERS.map(([name]) => name);
    expect(PROVIDERS.map((entry) => entry.name).sort()).toEqual([...configured].sort());
    expect(PROVIDER_NAMES).toEqual(['openai', 'anthropic', 'google', 'simulator']);
  });

  it('gives each model of a provider with an API key one deployment, labelled with the provider, sharing one adapter', () => {
    expect(buildDeployments(DEFAULT_CATALOG, loadConfig({})).size).toBe(0);

    const deployments = buildDeployments(DEFAULT_CATALOG, loadConfig({ ANTHROPIC_API_KEY: 'sk-ant', GEMINI_API_KEY: 'g', OPENAI_BASE_URL: 'http://vllm.local/v1' }));
    expect([...deployments.keys()]).toEqual(['claude-sonnet-4-6', 'claude-haiku-4-5', 'gemini-2.5-pro', 'gemini-2.5-flash', 'gemini-embedding-001']);
    const [sonnet] = deployments.get('claude-sonnet-4-6')!;
    expect(sonnet).toMatchObject({ id: 'claude-sonnet-4-6/anthropic', label: 'anthropic', keySource: 'env ANTHROPIC_API_KEY', weight: 1 });
    expect(sonnet.adapter).toBeInstanceOf(AnthropicAdapter);
    expect(deployments.get('claude-haiku-4-5')![0].adapter).toBe(sonnet.adapter);
    expect(deployments.get('gemini-2.5-pro')![0].adapter).toBeInstanceOf(GoogleAdapter);

    const openai = buildDeployments(DEFAULT_CATALOG, loadConfig({ OPENAI_API_KEY: 'sk', OPENAI_BASE_URL: 'http://vllm.local/v1' })).get('gpt-4o')!;
    expect(openai).toHaveLength(1);
    expect(openai[0]).toMatchObject({ label: 'openai', baseUrl: 'http://vllm.local/v1', keySource: 'env OPENAI_API_KEY' });
    expect(openai[0].adapter).toBeInstanceOf(OpenAiAdapter);
  });
});
