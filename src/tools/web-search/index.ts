export type { SearchOptions, SearchProvider, SearchResult, WebSearchProviderName } from './search-provider';
export { WEB_SEARCH_PROVIDERS } from './search-provider';
export { WebSearchError, type WebSearchFailure } from './web-search-error';
export { formatResultsForModel, MAX_SNIPPET_CHARS } from './results';
export {
  DEFAULT_WEB_SEARCH_TIMEOUT_MS,
  WEB_SEARCH_OPTIONS,
  WebSearchService,
  webSearchConfigProblems,
  type WebSearchOptions,
} from './web-search.service';
export { WebSearchModule } from './web-search.module';
export { WebSearchTool } from './web-search.tool';
