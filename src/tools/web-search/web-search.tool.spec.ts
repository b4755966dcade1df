import { SourceList } from '../citations';
import { ToolArgumentsError, ToolCallError, ToolContext } from '../server-tool';
import type { SearchResult } from './search-provider';
import { WebSearchError } from './web-search-error';
import type { WebSearchService } from './web-search.service';
import { WebSearchTool } from './web-search.tool';

describe('WebSearchTool', () => {
  const context = (maxResults = 3, sources = new SourceList()): ToolContext => ({
    assistant: { id: 'a1', tools: [] },
    maxResults,
    settings: { type: 'web_search' },
    signal: new AbortController().signal,
    sources,
  });
  const toolWith = (search: (query: string, options: { maxResults: number; signal: AbortSignal }) => Promise<SearchResult[]>) => {
    const searches: Array<{ query: string; maxResults: number }> = [];
    const service = {
      search: async (query: string, options: { maxResults: number; signal: AbortSignal }) => {
        searches.push({ query, maxResults: options.maxResults });
        return search(query, options);
      },
    } as unknown as WebSearchService;
    return { tool: new WebSearchTool(service), searches };
  };

  it('is web_search, priced by WEB_SEARCH_PRICE_MILLICENTS, served to the Responses API under OpenAI\'s names too, offered as a function of {"query"}', () => {
    const { tool } = toolWith(async () => []);
    expect(WebSearchTool.descriptor).toMatchObject({
      name: 'web_search',
      label: 'web_search: search the web',
      price: 'web_search',
      responsesAliases: ['web_search_preview', 'web_search_2025_08_26', 'web_search_preview_2025_03_11'],
    });
    expect(tool.defaultMaxResults).toBe(5);
    expect(tool.definition.function).toMatchObject({ name: 'web_search', parameters: { required: ['query'] } });
  });

  it('searches with the query and the result count, and renders the results for the model with their numbers', async () => {
    const { tool, searches } = toolWith(async () => [{ title: 'Node 24', url: 'https://nodejs.org/24', snippet: 'Out now.' }]);
    const run = await tool.run('{"query":"node release"}', context(2));
    expect(searches).toEqual([{ query: 'node release', maxResults: 2 }]);
    expect(run.content).toContain('[1] Node 24');
    expect(run.content).toContain('https://nodejs.org/24');
    expect(run.content).toContain('square brackets');
    expect(run.results).toEqual([{ number: 1, source: { type: 'url', url: 'https://nodejs.org/24', title: 'Node 24' } }]);
  });

  it("numbers its results after the request's earlier sources, and a page found again keeps its number", async () => {
    const sources = new SourceList();
    sources.add({ type: 'url', url: 'https://earlier.example/', title: 'Earlier' });
    sources.add({ type: 'url', url: 'https://nodejs.org/24', title: 'Node 24' });
    const { tool } = toolWith(async () => [
      { title: 'New', url: 'https://new.example/', snippet: '' },
      { title: 'Node 24', url: 'https://nodejs.org/24', snippet: '' },
    ]);
    const run = await tool.run('{"query":"node"}', context(2, sources));
    expect(run.results.map((result) => result.number)).toEqual([3, 2]);
    expect(run.content).toMatch(/^\[3\] New\n[\s\S]*\[2\] Node 24/);
  });

  it('says when there is nothing', async () => {
    const { tool } = toolWith(async () => []);
    expect(await tool.run('{"query":"nothing"}', context())).toEqual({ content: 'No web results.', results: [] });
  });

  it('refuses arguments without a query before searching', async () => {
    const { tool, searches } = toolWith(async () => []);
    await expect(tool.run('{"q":"x"}', context())).rejects.toThrow(ToolArgumentsError);
    expect(searches).toEqual([]);
  });

  it("turns a WebSearchError into a ToolCallError with the same message (it is written for the model); other errors pass", async () => {
    const failing = toolWith(async () => {
      throw new WebSearchError('timeout');
    }).tool;
    await expect(failing.run('{"query":"x"}', context())).rejects.toEqual(new ToolCallError('web search failed: timeout'));
    const bug = new TypeError('bug');
    const broken = toolWith(async () => {
      throw bug;
    }).tool;
    await expect(broken.run('{"query":"x"}', context())).rejects.toBe(bug);
  });
});
