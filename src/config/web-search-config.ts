import type { AppConfig } from './app-config';

/** The web search backends WEB_SEARCH_PROVIDER may name (tools/web-search implements each). */
export const WEB_SEARCH_PROVIDERS = ['searxng', 'tavily', 'brave'] as const;

/**
 * What is wrong with a web search configuration that was started but not finished
 * (a provider without its key or URL, a key without a provider). Empty when the
 * configuration is complete, or entirely absent (web search off).
 */
export function webSearchConfigProblems(webSearch: AppConfig['webSearch']): string[] {
  const { provider, apiKey, baseUrl } = webSearch;
  if (!provider) {
    return apiKey || baseUrl
      ? [`WEB_SEARCH_PROVIDER is not set, so ${apiKey ? 'WEB_SEARCH_API_KEY' : 'WEB_SEARCH_BASE_URL'} is unused: set it to ${WEB_SEARCH_PROVIDERS.join(', ')}`]
      : [];
  }
  if (!(WEB_SEARCH_PROVIDERS as readonly string[]).includes(provider)) {
    return [`WEB_SEARCH_PROVIDER must be one of ${WEB_SEARCH_PROVIDERS.join(', ')} (got "${provider}")`];
  }
  if (provider === 'searxng' && !baseUrl) {
    return ['WEB_SEARCH_PROVIDER=searxng needs WEB_SEARCH_BASE_URL, the URL of your SearXNG instance'];
  }
  if ((provider === 'tavily' || provider === 'brave') && !apiKey) {
    return [`WEB_SEARCH_PROVIDER=${provider} needs WEB_SEARCH_API_KEY`];
  }
  return [];
}
