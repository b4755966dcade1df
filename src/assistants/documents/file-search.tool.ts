import { Injectable } from '@nestjs/common';
import type { FunctionTool } from '../../providers/provider-adapter';
import { CITE_INSTRUCTION, CitedSource } from '../../tools/citations';
import { queryArgument, ServerTool, ServerToolDescriptor, ToolContext, ToolRun } from '../../tools/server-tool';
import { DocumentFilters, documentsMatching, sourceAttributes } from './document-filters';
import { DocumentSearch } from './document-search';

/** What the model reads when nothing matches. */
export const NO_PASSAGE = 'No passage of the documents matches.';

/**
 * `file_search`: the passages of the assistant's documents that best match the model's
 * query, with the assistant's (or the Responses request's) options: how many, the score
 * threshold, and the attribute filters. Each passage is numbered for the answer to cite.
 */
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

  constructor(
    private readonly documents: DocumentSearch,
    private readonly filters: DocumentFilters,
  ) {}

  async run(args: string, { assistant, maxResults, settings, sources }: ToolContext): Promise<ToolRun> {
    const query = queryArgument(args, FileSearchTool.descriptor.name);
    const attributes = await this.filters.attributesOf(assistant.id);
    const documentIds = settings.filters ? documentsMatching(settings.filters, attributes) : undefined;
    const scoreThreshold = settings.ranking_options?.score_threshold;
    const results = await this.documents.search(assistant.id, query, {
      maxResults,
      ...(scoreThreshold !== undefined ? { scoreThreshold } : {}),
      ...(documentIds ? { documentIds } : {}),
    });
    if (results.length === 0) return { content: NO_PASSAGE, results: [] };
    const cited = results.map((result) => {
      const found = attributes.get(result.document_id);
      return sources.add({
        type: 'file',
        file_id: result.document_id,
        filename: result.document_name,
        score: result.score,
        text: result.content,
        attributes: found ? sourceAttributes(found) : { filename: result.document_name },
      });
    });
    const passages = this.documents.formatResultsForModel(
      results,
      cited.map((entry) => entry?.number),
    );
    return {
      content: `${passages}\n\n---\n\n${CITE_INSTRUCTION}`,
      results: cited.filter((entry): entry is CitedSource => entry !== undefined),
    };
  }
}
