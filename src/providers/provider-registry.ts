import type { AppConfig } from '../config/app-config';
import type { ProviderName } from '../models/model-catalog';
import { AnthropicAdapter } from './anthropic.adapter';
import { GoogleAdapter } from './google.adapter';
import { OpenAiAdapter } from './openai.adapter';
import type { ProviderAdapter } from './provider-adapter';

/**
 * The upstream providers the service can talk to, each built from its configuration.
 * A provider without an API key is not configured (the simulator may stand in for it).
 * To add a provider: an adapter class, a name in the catalog's PROVIDER_NAMES, a line here.
 */
export function createConfiguredAdapters(config: AppConfig): Map<ProviderName, ProviderAdapter> {
  const adapters = new Map<ProviderName, ProviderAdapter>();
  const timeoutMs = config.upstreamTimeoutMs;
  if (config.openai.apiKey) {
    adapters.set('openai', new OpenAiAdapter({ apiKey: config.openai.apiKey, baseUrl: config.openai.baseUrl, timeoutMs }));
  }
  if (config.anthropic.apiKey) {
    adapters.set(
      'anthropic',
      new AnthropicAdapter({ apiKey: config.anthropic.apiKey, baseUrl: config.anthropic.baseUrl, timeoutMs }),
    );
  }
  if (config.gemini.apiKey) {
    adapters.set('google', new GoogleAdapter({ apiKey: config.gemini.apiKey, baseUrl: config.gemini.baseUrl, timeoutMs }));
  }
  return adapters;
}
