import { ToolArgumentsError, ToolContext } from '../../tools/server-tool';
import { DocumentSearch } from './document-search';
import { FileSearchOptions, FileSearchResult, formatResultsForModel } from './documents.service';
import { FileSearchTool } from './file-search.tool';

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
  formatResultsForModel(results: FileSearchResult[]): string {
    return formatResultsForModel(results);
  }
}

describe('FileSearchTool', () => {
  const context = (maxResults = 4): ToolContext => ({ assistant: { id: 'assistant-7', tools: [] }, maxResults, signal: new AbortController().signal });
  const passage: FileSearchResult = { document_id: 'd1', document_name: 'policy.md', position: 2, content: 'Returns within 30 days.', score: 0.75 };

  it('is file_search, priced by FILE_SEARCH_PRICE_MILLICENTS, offered as a function of {"query"}', () => {
    const tool = new FileSearchTool(new FakeDocumentSearch([]));
    expect(FileSearchTool.descriptor).toMatchObject({ name: 'file_search', label: 'file_search: search the documents below', price: 'file_search' });
    expect(tool.defaultMaxResults).toBe(5);
    expect(tool.definition.function).toMatchObject({ name: 'file_search', parameters: { required: ['query'] } });
  });

  it("searches the assistant's documents with the query and the result count, and renders the passages", async () => {
    const documents = new FakeDocumentSearch([passage]);
    const content = await new FileSearchTool(documents).run('{"query":" returns "}', context(4));
    expect(documents.searches).toEqual([{ assistantId: 'assistant-7', query: 'returns', options: { maxResults: 4 } }]);
    expect(content).toBe('[1] policy.md, passage 3\nReturns within 30 days.');
  });

  it('says when no passage matches', async () => {
    expect(await new FileSearchTool(new FakeDocumentSearch([])).run('{"query":"x"}', context())).toBe('No passage of the documents matches.');
  });

  it('refuses arguments without a query before searching', async () => {
    const documents = new FakeDocumentSearch([passage]);
    await expect(new FileSearchTool(documents).run('{}', context())).rejects.toThrow(ToolArgumentsError);
    expect(documents.searches).toEqual([]);
  });
});
