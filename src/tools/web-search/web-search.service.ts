import { Inject, Injectable, Logger, OnModuleInit, Optional } from '@nestjs/common';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { BraveProvider, DEFAULT_BASE_URLS, PROVIDER_MAX_RESULTS, SearxngProvider, TavilyProvider } from './providers';
import { normalizeResults } from './results';
import { WEB_SEARCH_PROVIDERS, type SearchProvider, type SearchResult, type WebSearchProviderName } from './search-provider';
import { webSearchConfigProblems } from '../../config/web-search-config';
import { WebSearchError } from './web-search-error';

export { webSearchConfigProblems } from '../../config/web-search-config';

export const DEFAULT_WEB_SEARCH_TIMEOUT_MS = 10_000;
/** Brave refuses queries over 400 characters; no useful search query is longer. */
export const MAX_QUERY_CHARS = 400;

/** Injection token for `WebSearchOptions` (optional; tests construct the service directly). */
export const WEB_SEARCH_OPTIONS = Symbol('WEB_SEARCH_OPTIONS');

export interface WebSearchOptions {
  /** Bound of one search, request and answer together. Default 10 s. */
  timeoutMs?: number;
}


/**
 * The `web_search` tool's backend: one provider chosen by WEB_SEARCH_PROVIDER, requests
 * only to its base URL, bounded by a timeout, answers cleaned for the model. Every
 * failure is a `WebSearchError` whose message can be shown to the model as the tool
 * result; an unconfigured service sends nothing anywhere.
 */
@Injectable()
export class WebSearchService implements OnModuleInit {
  private readonly logger = new Logger('WebSearch');
  private readonly provider?: SearchProvider;
  private readonly problem?: string;
  private readonly timeoutMs: number;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    @Optional() @Inject(WEB_SEARCH_OPTIONS) options: WebSearchOptions = {},
  ) {
    this.timeoutMs = options.timeoutMs ?? DEFAULT_WEB_SEARCH_TIMEOUT_MS;
    const { provider, apiKey, baseUrl } = config.webSearch;
    const problems = webSearchConfigProblems(config.webSearch);
    if (problems.length > 0) {
      this.problem = problems.join('; ');
    } else if (!provider) {
      this.problem = `WEB_SEARCH_PROVIDER is not set (${WEB_SEARCH_PROVIDERS.join(', ')})`;
    } else {
      this.provider = createProvider(provider as WebSearchProviderName, apiKey, baseUrl);
    }
  }

  onModuleInit(): void {
    if (this.provider) {
      this.logger.log(`Web search through ${this.provider.name}`);
    } else if (webSearchConfigProblems(this.config.webSearch).length > 0) {
      this.logger.warn(`Web search is off: ${this.problem}`);
    }
  }

  isConfigured(): boolean {
    return this.provider !== undefined;
  }

  /** The configured provider's name, undefined when web search is off. */
  providerName(): WebSearchProviderName | undefined {
    return this.provider?.name;
  }

  /** Why web search is off (names the variables to set); undefined when it is on. */
  configurationProblem(): string | undefined {
    return this.provider ? undefined : this.problem;
  }

  /**
   * Searches the web. `maxResults` is clamped to 1..20; the query is whitespace-collapsed
   * and cut to 400 characters. Throws `WebSearchError` (reason `aborted` when `signal`
   * fired, `timeout` when the service's own bound did).
   */
  async search(query: string, options: { maxResults: number; signal: AbortSignal }): Promise<SearchResult[]> {
    const provider = this.provider;
    if (!provider) throw new WebSearchError('not_configured', { detail: this.problem });
    const q = query.replace(/\s+/g, ' ').trim().slice(0, MAX_QUERY_CHARS).trim();
    if (!q) throw new WebSearchError('invalid_query');
    const maxResults = clampResults(options.maxResults);
    const caller = options.signal;
    if (caller.aborted) throw new WebSearchError('aborted');

    const timeout = new AbortController();
    const timer = setTimeout(() => timeout.abort(), this.timeoutMs);
    const started = Date.now();
    try {
      const hits = await provider.search(q, { maxResults, signal: AbortSignal.any([caller, timeout.signal]) });
      const results = normalizeResults(hits, maxResults);
      this.logger.debug(`${provider.name}: ${results.length} results in ${Date.now() - started} ms`);
      return results;
    } catch (error) {
      const failure = caller.aborted
        ? new WebSearchError('aborted', { cause: error })
        : timeout.signal.aborted
          ? new WebSearchError('timeout', { detail: `no answer within ${this.timeoutMs} ms` })
          : error instanceof WebSearchError
            ? error
            : new WebSearchError('network', { cause: error, detail: (error as Error)?.message });
      if (failure.reason !== 'aborted') {
        this.logger.warn(
          `${provider.name} search failed after ${Date.now() - started} ms: ${failure.message}` +
            (failure.detail ? ` (${redactKey(failure.detail, this.config.webSearch.apiKey)})` : ''),
        );
      }
      throw failure;
    } finally {
      clearTimeout(timer);
    }
  }
}

function createProvider(name: WebSearchProviderName, apiKey: string | undefined, baseUrl: string | undefined): SearchProvider {
  switch (name) {
    case 'searxng':
      return new SearxngProvider({ baseUrl: baseUrl!, apiKey });
    case 'tavily':
      return new TavilyProvider({ baseUrl: baseUrl ?? DEFAULT_BASE_URLS.tavily!, apiKey: apiKey! });
    case 'brave':
      return new BraveProvider({ baseUrl: baseUrl ?? DEFAULT_BASE_URLS.brave!, apiKey: apiKey! });
  }
}

function clampResults(value: number): number {
  if (!Number.isFinite(value)) return 5;
  return Math.min(PROVIDER_MAX_RESULTS, Math.max(1, Math.floor(value)));
}

function redactKey(text: string, key: string | undefined): string {
  return key ? text.split(key).join('[redacted]') : text;
}
