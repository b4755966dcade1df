import { SourceList } from '../../tools/citations';
import { ToolArgumentsError, ToolContext, ToolSettings } from '../../tools/server-tool';
import { DocumentAttributes, DocumentFilters } from './document-filters';
import { DocumentSearch } from './document-search';
import { FileSearchOptions, FileSearchResult, formatResultsForModel } from './documents.service';
import { FileSearchTool, NO_PASSAGE } from './file-search.tool';

/** The port with a plain fake behind it: no database. */
class FakeDocumentSearch extends DocumentSearch {
  readonly searches: Array<{ assistantId: string; query: string; options: FileSearchOptions }> = [];
  constructor(private readonly results: FileSearchResult[]) {
    super();
  }
  async search(assistantId: string, query: string, options: FileSearchOptions): Promise<FileSearchResult[]> {
    this.searches.push({ assistantId, query, options });
    return this.results;
  }
  formatResultsForModel(results: FileSearchResult[], numbers?: ReadonlyArray<number | undefined>): string {
    return formatResultsForModel(results, numbers);
  }
}

const ATTRIBUTES = new Map<string, DocumentAttributes>([
  ['d1', { filename: 'policy.md', type: 'text/markdown', uploaded_at: 1_700_000_000 }],
  ['d2', { filename: 'prices.pdf', type: 'application/pdf', uploaded_at: 1_800_000_000 }],
]);
const filters = { attributesOf: async () => ATTRIBUTES } as unknown as DocumentFilters;

describe('FileSearchTool', () => {
  const context = (maxResults = 4, settings: ToolSettings = { type: 'file_search' }, sources = new SourceList()): ToolContext => ({
    assistant: { id: 'assistant-7', tools: [] },
    maxResults,
    settings,
    signal: new AbortController().signal,
    sources,
  });
  const passage: FileSearchResult = { document_id: 'd1', document_name: 'policy.md', position: 2, content: 'Returns within 30 days.', score: 0.75 };

  it('is file_search, priced by FILE_SEARCH_PRICE_MILLICENTS, offered as a function of {"query"}', () => {
    const tool = new FileSearchTool(new FakeDocumentSearch([]), filters);
    expect(FileSearchTool.descriptor).toMatchObject({ name: 'file_search', label: 'file_search: search the documents below', price: 'file_search' });
    expect(tool.defaultMaxResults).toBe(5);
    expect(tool.definition.function).toMatchObject({ name: 'file_search', parameters: { required: ['query'] } });
  });

  it("searches the assistant's documents with the query and the result count, renders the passages numbered, and returns them as sources", async () => {
    const documents = new FakeDocumentSearch([passage]);
    const run = await new FileSearchTool(documents, filters).run('{"query":" returns "}', context(4));
    expect(documents.searches).toEqual([{ assistantId: 'assistant-7', query: 'returns', options: { maxResults: 4 } }]);
    expect(run.content).toMatch(/^\[1\] policy\.md, passage 3\nReturns within 30 days\.\n\n---\n\nCite the sources/);
    expect(run.results).toEqual([
      {
        number: 1,
        source: {
          type: 'file',
          file_id: 'd1',
          filename: 'policy.md',
          score: 0.75,
          text: 'Returns within 30 days.',
          attributes: { filename: 'policy.md', type: 'text/markdown', uploaded_at: 1_700_000_000 },
        },
      },
    ]);
  });

  it('passes the score threshold, and resolves the filters to the documents they leave', async () => {
    const documents = new FakeDocumentSearch([]);
    const settings: ToolSettings = { type: 'file_search', ranking_options: { score_threshold: 0.4 }, filters: { type: 'eq', key: 'type', value: 'pdf' } };
    await new FileSearchTool(documents, filters).run('{"query":"x"}', context(3, settings));
    expect(documents.searches[0].options).toEqual({ maxResults: 3, scoreThreshold: 0.4, documentIds: ['d2'] });
  });

  it('says when no passage matches', async () => {
    expect(await new FileSearchTool(new FakeDocumentSearch([]), filters).run('{"query":"x"}', context())).toEqual({ content: NO_PASSAGE, results: [] });
  });

  it('refuses arguments without a query before searching', async () => {
    const documents = new FakeDocumentSearch([passage]);
    await expect(new FileSearchTool(documents, filters).run('{}', context())).rejects.toThrow(ToolArgumentsError);
    expect(documents.searches).toEqual([]);
  });
});
