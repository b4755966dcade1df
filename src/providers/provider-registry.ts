import type { UpstreamProviderName } from '../config/app-config';
import type { ProviderName } from '../models/model-catalog';
import { AnthropicAdapter } from './anthropic/anthropic.adapter';
import { GoogleAdapter } from './google/google.adapter';
import { OpenAiAdapter } from './openai/openai.adapter';
import type { ProviderAdapter } from './provider-adapter';

/** What an upstream adapter is built from: its provider's configuration and the service's upstream timeout. */
export interface UpstreamOptions {
  apiKey: string;
  baseUrl?: string;
  timeoutMs: number;
}

/** One upstream provider: its name (in the catalog and in `AppConfig.providers`) and how to build its adapter. */
export interface ProviderEntry {
  name: UpstreamProviderName & ProviderName;
  create(options: UpstreamOptions): ProviderAdapter;
}

/**
 * Every upstream provider the service can talk to. Adding one: an adapter (a folder beside
 * this file), its name and the prefix of its variables in config's UPSTREAM_PROVIDERS (the
 * catalog's provider names follow from it), and a line here.
 */
export const PROVIDERS: readonly ProviderEntry[] = [
  { name: 'openai', create: (options) => new OpenAiAdapter(options) },
  { name: 'anthropic', create: (options) => new AnthropicAdapter(options) },
  { name: 'google', create: (options) => new GoogleAdapter(options) },
];
