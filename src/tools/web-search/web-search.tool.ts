import { Injectable } from '@nestjs/common';
import type { FunctionTool } from '../../providers/provider-adapter';
import { CITE_INSTRUCTION, CitedSource } from '../citations';
import { queryArgument, ServerTool, ServerToolDescriptor, ToolCallError, ToolContext, ToolRun } from '../server-tool';
import { formatResultsForModel } from './results';
import { WebSearchError } from './web-search-error';
import { WebSearchService } from './web-search.service';

/** `web_search`: the configured search backend's top results, each with title, URL and snippet. */
@Injectable()
export class WebSearchTool implements ServerTool {
  static readonly descriptor = {
    name: 'web_search',
    label: 'web_search: search the web',
    help: 'The model can search the web; each search is charged to the wallet.',
    price: 'web_search',
    // OpenAI's names of its own web search tool, which clients of the Responses API send.
    responsesAliases: ['web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11'],
  } as const satisfies ServerToolDescriptor;
  readonly defaultMaxResults = 5;
  readonly definition: FunctionTool = {
    type: 'function',
    function: {
      name: WebSearchTool.descriptor.name,
      description: 'Search the web for current information. Returns the top results with title, URL and snippet.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'What to search for, as you would type it into a search engine.' } },
        required: ['query'],
      },
    },
  };

  constructor(private readonly webSearch: WebSearchService) {}

  async run(args: string, { maxResults, signal, sources }: ToolContext): Promise<ToolRun> {
    const query = queryArgument(args, WebSearchTool.descriptor.name);
    try {
      const results = await this.webSearch.search(query, { maxResults, signal });
      if (results.length === 0) return { content: 'No web results.', results: [] };
      const cited = results.map((result) => sources.add({ type: 'url', url: result.url, title: result.title }));
      return {
        content: `${formatResultsForModel(results, cited.map((entry) => entry?.number))}\n\n${CITE_INSTRUCTION}`,
        results: cited.filter((entry): entry is CitedSource => entry !== undefined),
      };
    } catch (error) {
      // A WebSearchError's message is written for the model ("web search failed: timeout").
      throw error instanceof WebSearchError ? new ToolCallError(error.message, { cause: error }) : error;
    }
  }
}
