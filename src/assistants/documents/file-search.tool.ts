import { Injectable } from '@nestjs/common';
import type { FunctionTool } from '../../providers/provider-adapter';
import { queryArgument, ServerTool, ServerToolDescriptor, ToolContext } from '../../tools/server-tool';
import { DocumentSearch } from './document-search';

/** `file_search`: the passages of the assistant's documents that best match the model's query. */
@Injectable()
export class FileSearchTool implements ServerTool {
  static readonly descriptor = {
    name: 'file_search',
    label: 'file_search: search the documents below',
    help: "The model can look up passages of this assistant's documents.",
    price: 'file_search',
  } as const satisfies ServerToolDescriptor;
  readonly defaultMaxResults = 5;
  readonly definition: FunctionTool = {
    type: 'function',
    function: {
      name: FileSearchTool.descriptor.name,
      description:
        "Search the documents attached to this assistant. Returns the most relevant passages with their document's name and position.",
      parameters: {
        type: 'object',
        properties: { query: { type: 'string', description: 'Keywords or a question about the documents.' } },
        required: ['query'],
      },
    },
  };

  constructor(private readonly documents: DocumentSearch) {}

  async run(args: string, { assistant, maxResults }: ToolContext): Promise<string> {
    const results = await this.documents.search(assistant.id, queryArgument(args, FileSearchTool.descriptor.name), { maxResults });
    return results.length ? this.documents.formatResultsForModel(results) : 'No passage of the documents matches.';
  }
}
