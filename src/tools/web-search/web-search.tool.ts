import { Injectable } from '@nestjs/common';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import type { FunctionTool } from '../../providers/provider-adapter';
import { queryArgument, ServerTool, ToolCallError, ToolContext } from '../server-tool';
import { formatResultsForModel } from './results';
import { WebSearchError } from './web-search-error';
import { WebSearchService } from './web-search.service';

/** `web_search`: the configured search backend's top results, each with title, URL and snippet. */
@Injectable()
export class WebSearchTool implements ServerTool {
  static readonly toolName = 'web_search';
  readonly name = WebSearchTool.toolName;
  readonly defaultMaxResults = 5;
  readonly priceMillicents: number;
  readonly definition: FunctionTool = {
    type: 'function',
    function: {
      name: WebSearchTool.toolName,
      description: 'Search the web for current information. Returns the top results with title, URL and snippet.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'What to search for, as you would type it into a search engine.' } },
        required: ['query'],
      },
    },
  };

  constructor(
    @InjectConfig() config: AppConfig,
    private readonly webSearch: WebSearchService,
  ) {
    this.priceMillicents = config.toolPrices.web_search;
  }

  async run(args: string, { maxResults, signal }: ToolContext): Promise<string> {
    const query = queryArgument(args, this.name);
    try {
      const results = await this.webSearch.search(query, { maxResults, signal });
      return results.length ? formatResultsForModel(results) : 'No web results.';
    } catch (error) {
      // A WebSearchError's message is written for the model ("web search failed: timeout").
      throw error instanceof WebSearchError ? new ToolCallError(error.message, { cause: error }) : error;
    }
  }
}
