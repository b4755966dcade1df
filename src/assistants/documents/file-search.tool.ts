import { Injectable } from '@nestjs/common';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import type { FunctionTool } from '../../providers/provider-adapter';
import { queryArgument, ServerTool, ToolContext } from '../../tools/server-tool';
import { DocumentSearch } from './document-search';

/** `file_search`: the passages of the assistant's documents that best match the model's query. */
@Injectable()
export class FileSearchTool implements ServerTool {
  static readonly toolName = 'file_search';
  readonly name = FileSearchTool.toolName;
  readonly defaultMaxResults = 5;
  readonly priceMillicents: number;
  readonly definition: FunctionTool = {
    type: 'function',
    function: {
      name: FileSearchTool.toolName,
      description:
        "Search the documents attached to this assistant. Returns the most relevant passages with their document's name and position.",
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'Keywords or a question about the documents.' } },
        required: ['query'],
      },
    },
  };

  constructor(
    @InjectConfig() config: AppConfig,
    private readonly documents: DocumentSearch,
  ) {
    this.priceMillicents = config.toolPrices.file_search;
  }

  async run(args: string, { assistant, maxResults }: ToolContext): Promise<string> {
    const results = await this.documents.search(assistant.id, queryArgument(args, this.name), maxResults);
    return results.length ? this.documents.formatResultsForModel(results) : 'No passage of the documents matches.';
  }
}
