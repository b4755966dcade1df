import { WEB_SEARCH_PROVIDERS } from '../../config/web-search-config';

/** One web search hit, as the `web_search` tool hands it to the model. */
export interface SearchResult {
  title: string;
  /** Always an absolute http(s) URL. */
  url: string;
  /** Plain text (no HTML), whitespace collapsed, at most ~500 characters. */
  snippet: string;
}

export interface SearchOptions {
  /** How many results the caller wants; a provider may return more, the service trims. */
  maxResults: number;
  /** Aborts the request: the caller's cancellation and the service's timeout together. */
  signal: AbortSignal;
}

/**
 * A search backend speaking one service's wire format. Implementations return the raw
 * hits mapped to `SearchResult` (cleaning and trimming is the service's job) and throw
 * `WebSearchError` for HTTP and format failures; an abort surfaces as the fetch error.
 */
export interface SearchProvider {
  readonly name: WebSearchProviderName;
  search(query: string, options: SearchOptions): Promise<SearchResult[]>;
}

export { WEB_SEARCH_PROVIDERS };
export type WebSearchProviderName = (typeof WEB_SEARCH_PROVIDERS)[number];
