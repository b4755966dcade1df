import { Injectable, Logger } from '@nestjs/common';
import type { Assistant, AssistantTool, ServerToolType } from '../assistants/entities/assistant.entity';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import type { FunctionTool } from '../providers/provider-adapter';
import { MicroMillicents, microsOf } from '../wallet/cost';
import { formatResultsForModel as formatWebResults, WebSearchError, WebSearchService } from './web-search';

/** Results a tool call returns when the assistant's tool settings do not say. */
const DEFAULT_MAX_RESULTS: Record<ServerToolType, number> = { web_search: 5, file_search: 5 };

/** How the model sees the server tools: functions taking `{"query": string}`. */
const DEFINITIONS: Record<ServerToolType, FunctionTool> = {
  web_search: {
    type: 'function',
    function: {
      name: 'web_search',
      description: 'Search the web for current information. Returns the top results with title, URL and snippet.',
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'What to search for, as you would type it into a search engine.' } },
        required: ['query'],
      },
    },
  },
  file_search: {
    type: 'function',
    function: {
      name: 'file_search',
      description:
        "Search the documents attached to this assistant. Returns the most relevant passages with their document's name and position.",
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'Keywords or a question about the documents.' } },
        required: ['query'],
      },
    },
  },
};

/**
 * What file_search needs from the documents module. The module provides it under this
 * token, so tools do not depend on how documents are stored and indexed.
 */
export abstract class DocumentSearch {
  abstract search(assistantId: string, query: string, maxResults: number): Promise<unknown[]>;
  abstract formatResultsForModel(results: unknown[]): string;
}

export interface ServerToolCall {
  id: string;
  name: ServerToolType;
  arguments: string;
}

export interface ToolOutcome {
  /** The tool message content shown to the model: results, or why there are none. */
  content: string;
  /** What the call costs the caller: its price when it ran, nothing when it could not. */
  costMicros: MicroMillicents;
  ran: boolean;
}

/** The server-side tools of assistants: their definitions for the model, and running them. */
@Injectable()
export class ToolsService {
  private readonly logger = new Logger('Tools');

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly webSearch: WebSearchService,
    private readonly documents: DocumentSearch,
  ) {}

  definitions(tools: AssistantTool[]): FunctionTool[] {
    return tools.map((tool) => DEFINITIONS[tool.type]);
  }

  isServerTool(name: string | undefined, tools: AssistantTool[]): name is ServerToolType {
    return tools.some((tool) => tool.type === name);
  }

  /** The most a call of these tools can cost, for holds. */
  maxPriceMicros(tools: AssistantTool[]): MicroMillicents {
    return tools.reduce((max, tool) => {
      const price = microsOf(this.config.toolPrices[tool.type]);
      return price > max ? price : max;
    }, 0n);
  }

  /**
   * Runs one call. Never throws for a tool's own failure: the model is told what went wrong
   * in the tool message (and may answer without it), and a call that could not run is free.
   */
  async run(call: ServerToolCall, assistant: Assistant, signal: AbortSignal): Promise<ToolOutcome> {
    const query = parseQuery(call.arguments);
    if (query === undefined) {
      return { content: `${call.name} needs arguments of the form {"query": "..."}.`, costMicros: 0n, ran: false };
    }
    const settings = assistant.tools.find((tool) => tool.type === call.name);
    const maxResults = settings?.max_results ?? DEFAULT_MAX_RESULTS[call.name];
    const price = microsOf(this.config.toolPrices[call.name]);
    try {
      if (call.name === 'web_search') {
        const results = await this.webSearch.search(query, { maxResults, signal });
        return { content: results.length ? formatWebResults(results) : 'No web results.', costMicros: price, ran: true };
      }
      const results = await this.documents.search(assistant.id, query, maxResults);
      return {
        content: results.length ? this.documents.formatResultsForModel(results) : 'No passage of the documents matches.',
        costMicros: price,
        ran: true,
      };
    } catch (error) {
      if (signal.aborted) throw error;
      // WebSearchError messages are written for the model ("web search failed: timeout").
      const reason = error instanceof WebSearchError ? error.message : `${call.name} failed`;
      this.logger.warn(`${call.name} failed for assistant ${assistant.id}: ${error instanceof Error ? error.message : String(error)}`);
      return { content: `${reason}. Answer without it, or say that you could not look it up.`, costMicros: 0n, ran: false };
    }
  }
}

function parseQuery(args: string): string | undefined {
  try {
    const parsed = JSON.parse(args || '{}') as { query?: unknown };
    return typeof parsed.query === 'string' && parsed.query.trim() ? parsed.query.trim() : undefined;
  } catch {
    return undefined;
  }
}
