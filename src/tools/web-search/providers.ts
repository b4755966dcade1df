import { endpoint, requestJson } from './http';
import type { SearchOptions, SearchProvider, SearchResult, WebSearchProviderName } from './search-provider';
import { WebSearchError } from './web-search-error';

export const DEFAULT_BASE_URLS: Partial<Record<WebSearchProviderName, string>> = {
  tavily: 'https://api.tavily.com',
  brave: 'https://api.search.brave.com',
};

/** Brave's `count` and Tavily's `max_results` both stop at 20. */
export const PROVIDER_MAX_RESULTS = 20;

export interface ProviderSettings {
  baseUrl: string;
  apiKey?: string;
}

/**
 * A SearXNG instance's JSON API: `GET /search?q=&format=json` (the instance must list
 * `json` under `search.formats` in its settings.yml, or it answers 403). SearXNG has no
 * result count parameter: the service trims its page. The key, if any, is for a proxy in
 * front of the instance.
 */
export class SearxngProvider implements SearchProvider {
  readonly name = 'searxng' as const;

  constructor(private readonly settings: ProviderSettings) {}

  async search(query: string, { signal }: SearchOptions): Promise<SearchResult[]> {
    const url = endpoint(this.settings.baseUrl, '/search');
    url.searchParams.set('q', query);
    url.searchParams.set('format', 'json');
    const body = await requestJson({
      method: 'GET',
      url,
      headers: this.settings.apiKey ? { Authorization: `Bearer ${this.settings.apiKey}` } : {},
      signal,
      secret: this.settings.apiKey,
      hints: { 403: 'SearXNG answers 403 when "json" is missing from search.formats in its settings.yml' },
    });
    return hits(body, (root) => root.results, { title: 'title', url: 'url', snippet: 'content' });
  }
}

/** Tavily's search API: `POST /search` with a JSON body and the key as a bearer token. */
export class TavilyProvider implements SearchProvider {
  readonly name = 'tavily' as const;

  constructor(private readonly settings: ProviderSettings & { apiKey: string }) {}

  async search(query: string, { maxResults, signal }: SearchOptions): Promise<SearchResult[]> {
    const body = await requestJson({
      method: 'POST',
      url: endpoint(this.settings.baseUrl, '/search'),
      headers: { Authorization: `Bearer ${this.settings.apiKey}` },
      body: { query, max_results: maxResults, search_depth: 'basic' },
      signal,
      secret: this.settings.apiKey,
    });
    return hits(body, (root) => root.results, { title: 'title', url: 'url', snippet: 'content' });
  }
}

/**
 * Brave Search's web search API: `GET /res/v1/web/search?q=&count=` with the key in
 * `X-Subscription-Token`. Descriptions carry `<strong>` highlights, which the service strips.
 * An answer without a `web` section (no web results) is an empty list.
 */
export class BraveProvider implements SearchProvider {
  readonly name = 'brave' as const;

  constructor(private readonly settings: ProviderSettings & { apiKey: string }) {}

  async search(query: string, { maxResults, signal }: SearchOptions): Promise<SearchResult[]> {
    const url = endpoint(this.settings.baseUrl, '/res/v1/web/search');
    url.searchParams.set('q', query);
    url.searchParams.set('count', String(maxResults));
    const body = await requestJson({
      method: 'GET',
      url,
      headers: { 'X-Subscription-Token': this.settings.apiKey },
      signal,
      secret: this.settings.apiKey,
    });
    return hits(
      body,
      (root) => {
        if (root.web === undefined || root.web === null) return [];
        return isObject(root.web) ? root.web.results : undefined;
      },
      { title: 'title', url: 'url', snippet: 'description' },
    );
  }
}

type Json = Record<string, unknown>;

/** Maps the answer's result list; anything that is not an object holding a list is malformed. */
function hits(
  body: unknown,
  list: (root: Json) => unknown,
  fields: { title: string; url: string; snippet: string },
): SearchResult[] {
  const items = isObject(body) ? list(body) : undefined;
  if (!Array.isArray(items)) {
    throw new WebSearchError('malformed_response', { detail: 'the answer has no result list' });
  }
  return items.filter(isObject).map((item) => ({
    title: text(item[fields.title]),
    url: text(item[fields.url]),
    snippet: text(item[fields.snippet]),
  }));
}

function isObject(value: unknown): value is Json {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function text(value: unknown): string {
  return typeof value === 'string' ? value : typeof value === 'number' ? String(value) : '';
}
