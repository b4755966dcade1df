import { Logger, Module } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { type AppConfig, loadConfig } from '../src/config/app-config';
import { ConfigModule } from '../src/config/config.module';
import {
  formatResultsForModel,
  MAX_SNIPPET_CHARS,
  type SearchResult,
  WebSearchError,
  WebSearchModule,
  WebSearchService,
  webSearchConfigProblems,
} from '../src/tools/web-search';
import { type FakeSearch, httpError, resultsScenario, startFakeSearch } from './fakes/fake-search';

/** The web search backends (SearXNG, Tavily, Brave) against one fake search server on 127.0.0.1. */

const KEY = 'tvly-test-0123456789-secret';

let fake: FakeSearch;
let warnings: jest.SpyInstance;

beforeAll(async () => {
  fake = await startFakeSearch({ apiKey: KEY });
});
afterAll(() => fake.close());
beforeEach(() => {
  fake.reset();
  warnings = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
});
afterEach(() => jest.restoreAllMocks());

/**
 * The service's view of these variables. loadConfig refuses an incomplete web search
 * configuration at start, so the web search part is read apart from the rest here, to see
 * what the service itself does with one (a process started another way, a test).
 */
function configFor(env: Record<string, string>): AppConfig {
  const { WEB_SEARCH_PROVIDER, WEB_SEARCH_API_KEY, WEB_SEARCH_BASE_URL, ...rest } = env;
  return {
    ...loadConfig(rest),
    webSearch: { provider: WEB_SEARCH_PROVIDER, apiKey: WEB_SEARCH_API_KEY, baseUrl: WEB_SEARCH_BASE_URL },
  };
}

function serviceFor(env: Record<string, string>, timeoutMs = 5_000): WebSearchService {
  return new WebSearchService(configFor(env), { timeoutMs });
}

const searxng = (extra: Record<string, string> = {}) =>
  serviceFor({ WEB_SEARCH_PROVIDER: 'searxng', WEB_SEARCH_BASE_URL: fake.url, ...extra });
const tavily = (timeoutMs?: number) =>
  serviceFor({ WEB_SEARCH_PROVIDER: 'tavily', WEB_SEARCH_API_KEY: KEY, WEB_SEARCH_BASE_URL: fake.url }, timeoutMs);
const brave = () => serviceFor({ WEB_SEARCH_PROVIDER: 'brave', WEB_SEARCH_API_KEY: KEY, WEB_SEARCH_BASE_URL: fake.url });

function opts(maxResults = 5, signal: AbortSignal = new AbortController().signal) {
  return { maxResults, signal };
}

async function failure(promise: Promise<unknown>): Promise<WebSearchError> {
  const error = await promise.then(
    () => {
      throw new Error('expected the search to fail');
    },
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(WebSearchError);
  return error as WebSearchError;
}

function hits(n: number) {
  return Array.from({ length: n }, (_, i) => ({ title: `Result ${i + 1}`, url: `https://example.com/${i + 1}`, snippet: `Snippet ${i + 1}` }));
}

describe('SearXNG', () => {
  it('sends GET {base}/search?q=&format=json without credentials and maps results[].content', async () => {
    fake.script(resultsScenario(hits(8)));
    const results = await searxng().search('  node   streams  ', opts(3));

    expect(fake.requests).toHaveLength(1);
    const request = fake.requests[0];
    expect(request).toMatchObject({ service: 'searxng', method: 'GET', path: '/search' });
    expect(request.query).toEqual({ q: 'node streams', format: 'json' });
    expect(request.headers.authorization).toBeUndefined();
    expect(request.headers.accept).toBe('application/json');
    // SearXNG has no count parameter: its page is trimmed here.
    expect(results).toEqual([
      { title: 'Result 1', url: 'https://example.com/1', snippet: 'Snippet 1' },
      { title: 'Result 2', url: 'https://example.com/2', snippet: 'Snippet 2' },
      { title: 'Result 3', url: 'https://example.com/3', snippet: 'Snippet 3' },
    ]);
  });

  it('keeps the path of the base URL (an instance under /searxng/) and sends an optional key as a bearer token', async () => {
    const service = serviceFor({ WEB_SEARCH_PROVIDER: 'searxng', WEB_SEARCH_BASE_URL: `${fake.url}/searxng/`, WEB_SEARCH_API_KEY: KEY });
    await service.search('q', opts());
    expect(fake.requests[0].path).toBe('/searxng/search');
    expect(fake.requests[0].headers.authorization).toBe(`Bearer ${KEY}`);
  });

  it('reports a 403 (JSON format not enabled on the instance) as an http_error with an operator hint', async () => {
    fake.script(httpError(403, { error: 'forbidden' }));
    const error = await failure(searxng().search('q', opts()));
    expect(error).toMatchObject({ reason: 'http_error', status: 403 });
    expect(error.message).toBe('web search failed: the search service refused the request (HTTP 403)');
    expect(error.detail).toContain('search.formats');
  });
});

describe('Tavily', () => {
  it('sends POST {base}/search with {query, max_results, search_depth} and the key as a bearer token', async () => {
    fake.script(
      resultsScenario([
        { title: 'Tavily hit', url: 'https://tavily.example/a', snippet: 'Clean content.' },
        { title: 'Second', url: 'https://tavily.example/b', snippet: 'More content.' },
      ]),
    );
    const results = await tavily().search('latest node release', opts(4));

    const request = fake.requests[0];
    expect(request).toMatchObject({ service: 'tavily', method: 'POST', path: '/search', query: {} });
    expect(request.body).toEqual({ query: 'latest node release', max_results: 4, search_depth: 'basic' });
    expect(request.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(request.headers['content-type']).toBe('application/json');
    expect(results).toEqual([
      { title: 'Tavily hit', url: 'https://tavily.example/a', snippet: 'Clean content.' },
      { title: 'Second', url: 'https://tavily.example/b', snippet: 'More content.' },
    ]);
  });

  it('clamps maxResults to 1..20', async () => {
    await tavily().search('q', opts(50));
    await tavily().search('q', opts(0));
    await tavily().search('q', opts(Number.NaN));
    expect(fake.requests.map((r) => r.body.max_results)).toEqual([20, 1, 5]);
  });

  it('a rejected key is an http_error, and neither the message nor the log carries the key', async () => {
    const service = serviceFor({ WEB_SEARCH_PROVIDER: 'tavily', WEB_SEARCH_API_KEY: 'tvly-wrong-key-abcdef', WEB_SEARCH_BASE_URL: fake.url });
    const error = await failure(service.search('q', opts()));
    expect(error).toMatchObject({ reason: 'http_error', status: 401 });
    expect(error.message).toBe('web search failed: the search service refused the request (HTTP 401)');
    expect(JSON.stringify({ m: error.message, d: error.detail })).not.toContain('tvly-wrong-key-abcdef');
  });

  it('redacts the key when an upstream error body echoes it', async () => {
    fake.script(httpError(400, { detail: { error: `Invalid request for key ${KEY}` } }));
    const error = await failure(tavily().search('q', opts()));
    expect(error).toMatchObject({ reason: 'http_error', status: 400 });
    expect(error.message).not.toContain(KEY);
    expect(error.detail).toContain('[redacted]');
    expect(error.detail).not.toContain(KEY);
    const logged = warnings.mock.calls.flat().join('\n');
    expect(logged).toContain('tavily search failed');
    expect(logged).not.toContain(KEY);
  });
});

describe('Brave', () => {
  it('sends GET {base}/res/v1/web/search?q=&count= with X-Subscription-Token and strips the HTML of descriptions', async () => {
    fake.script(
      resultsScenario([
        {
          title: 'What is <strong>Node</strong>.js? &ndash; Guide',
          url: 'https://nodejs.org/en/learn',
          snippet: '<strong>Node</strong>.js is an open-source, cross-platform <strong>JavaScript</strong> runtime &amp; it&#x27;s <em>fast</em>.<br>Second line',
        },
      ]),
    );
    const results = await brave().search('what is node.js', opts(7));

    const request = fake.requests[0];
    expect(request).toMatchObject({ service: 'brave', method: 'GET', path: '/res/v1/web/search' });
    expect(request.query).toEqual({ q: 'what is node.js', count: '7' });
    expect(request.headers['x-subscription-token']).toBe(KEY);
    expect(request.headers.authorization).toBeUndefined();
    expect(results).toEqual([
      {
        title: 'What is Node.js? – Guide',
        url: 'https://nodejs.org/en/learn',
        snippet: "Node.js is an open-source, cross-platform JavaScript runtime & it's fast. Second line",
      },
    ]);
  });

  it('an answer without a web section is no results', async () => {
    fake.script({ kind: 'raw', body: JSON.stringify({ type: 'search', query: { original: 'zzz' } }) });
    await expect(brave().search('zzz', opts())).resolves.toEqual([]);
  });

  it('a 422 (invalid parameter) is an http_error', async () => {
    fake.script(httpError(422, { type: 'ErrorResponse', error: { code: 'VALIDATION', status: 422 } }));
    const error = await failure(brave().search('q', opts()));
    expect(error).toMatchObject({ reason: 'http_error', status: 422, message: 'web search failed: the search service answered HTTP 422' });
  });
});

describe('result cleaning', () => {
  it('drops hits without an http(s) URL and repeated URLs, fills missing titles, collapses whitespace, trims to maxResults', async () => {
    fake.script(
      resultsScenario([
        { title: 'No URL', snippet: 'dropped' },
        { title: 'Empty URL', url: '   ', snippet: 'dropped' },
        { title: 'Script', url: 'javascript:alert(1)', snippet: 'dropped' },
        { title: 'FTP', url: 'ftp://files.example/x', snippet: 'dropped' },
        { title: 'Relative', url: '/local/page', snippet: 'dropped' },
        { title: 'Number URL', url: 42, snippet: 'dropped' },
        { title: '  Spaced \n\t  title ', url: 'https://a.example/1', snippet: 'line one\n\n   line\ttwo\u0000 ' },
        { title: 'Duplicate', url: 'https://a.example/1', snippet: 'dropped' },
        { url: 'http://b.example/path', snippet: null },
        { title: 'Third', url: 'https://c.example', snippet: 'kept' },
        { title: 'Fourth', url: 'https://d.example', snippet: 'over maxResults' },
      ]),
    );
    const results = await searxng().search('q', opts(3));
    expect(results).toEqual([
      { title: 'Spaced title', url: 'https://a.example/1', snippet: 'line one line two' },
      { title: 'b.example', url: 'http://b.example/path', snippet: '' },
      { title: 'Third', url: 'https://c.example', snippet: 'kept' },
    ]);
  });

  it('trims long snippets to about 500 characters at a word boundary', async () => {
    const long = Array.from({ length: 200 }, (_, i) => `word${i}`).join(' ');
    fake.script(resultsScenario([{ title: 'x'.repeat(400), url: 'https://long.example', snippet: long }]));
    const [result] = await tavily().search('q', opts());
    expect(result.snippet.length).toBeLessThanOrEqual(MAX_SNIPPET_CHARS);
    expect(result.snippet.length).toBeGreaterThan(MAX_SNIPPET_CHARS * 0.8);
    expect(result.snippet.endsWith('…')).toBe(true);
    expect(long.startsWith(result.snippet.slice(0, -1))).toBe(true);
    expect(result.snippet.slice(0, -1)).toMatch(/word\d+$/);
    expect(result.title.length).toBeLessThanOrEqual(200);
  });

  it('cuts long queries to 400 characters and refuses an empty one without sending anything', async () => {
    await tavily().search('a '.repeat(300), opts());
    expect(fake.requests[0].body.query.length).toBeLessThanOrEqual(400);
    const error = await failure(tavily().search(' \n\t ', opts()));
    expect(error).toMatchObject({ reason: 'invalid_query', message: 'web search failed: empty query' });
    expect(fake.requests).toHaveLength(1);
  });
});

describe('failures', () => {
  it.each([
    [500, 'web search failed: the search service answered HTTP 500'],
    [502, 'web search failed: the search service answered HTTP 502'],
    [429, 'web search failed: the search service is rate limiting us (HTTP 429)'],
    [404, 'web search failed: the search service answered HTTP 404'],
  ])('HTTP %i is an http_error', async (status, message) => {
    fake.script(httpError(status));
    const error = await failure(tavily().search('q', opts()));
    expect(error).toMatchObject({ reason: 'http_error', status, message });
  });

  it('no answer within the timeout is reason timeout, and the request is cancelled', async () => {
    fake.script({ kind: 'hang' });
    const started = Date.now();
    const error = await failure(tavily(150).search('q', opts()));
    expect(error).toMatchObject({ reason: 'timeout', message: 'web search failed: timeout' });
    // The search hangs for good; what is shown is that the 150 ms timeout ends it, with room for a loaded machine.
    expect(Date.now() - started).toBeLessThan(5_000);
    await waitFor(() => fake.requests[0].closedEarly);
  });

  it('a slow answer within the timeout succeeds', async () => {
    fake.script(resultsScenario(hits(2), 100));
    await expect(tavily(2_000).search('q', opts())).resolves.toHaveLength(2);
  });

  it('a slow answer past the timeout is a timeout', async () => {
    fake.script(resultsScenario(hits(2), 500));
    const error = await failure(tavily(100).search('q', opts()));
    expect(error.reason).toBe('timeout');
  });

  it.each([
    ['truncated JSON', '{"results": [{"title": "a", "url": "https://a.example"'],
    ['an HTML page', '<!doctype html><html><body>Welcome to nginx</body></html>'],
    ['JSON without a result list', '{"message": "ok"}'],
    ['results that are not a list', '{"results": {"title": "a"}}'],
    ['JSON null', 'null'],
  ])('%s is a malformed_response', async (_label, body) => {
    fake.script({ kind: 'raw', body });
    const error = await failure(searxng().search('q', opts()));
    expect(error).toMatchObject({ reason: 'malformed_response', message: 'web search failed: malformed response from the search service' });
  });

  it('an answer over 2 MB is refused as malformed', async () => {
    fake.script({ kind: 'raw', body: JSON.stringify({ results: [{ title: 'x', url: 'https://x.example', content: 'y'.repeat(3 * 1024 * 1024) }] }) });
    const error = await failure(searxng().search('q', opts()));
    expect(error.reason).toBe('malformed_response');
  });

  it("the caller's abort stops the search at once with reason aborted", async () => {
    fake.script({ kind: 'hang' });
    const controller = new AbortController();
    setTimeout(() => controller.abort(), 50);
    const started = Date.now();
    const error = await failure(tavily(10_000).search('q', opts(5, controller.signal)));
    expect(error).toMatchObject({ reason: 'aborted', message: 'web search failed: aborted' });
    // Before its own 10 s timeout: half of it, room for a loaded machine.
    expect(Date.now() - started).toBeLessThan(5_000);
    await waitFor(() => fake.requests[0].closedEarly);
  });

  it('an already aborted signal sends nothing', async () => {
    const error = await failure(tavily().search('q', opts(5, AbortSignal.abort())));
    expect(error.reason).toBe('aborted');
    expect(fake.requests).toHaveLength(0);
  });

  it('an unreachable backend is reason network', async () => {
    const port = await closedPort();
    const service = serviceFor({ WEB_SEARCH_PROVIDER: 'searxng', WEB_SEARCH_BASE_URL: `http://127.0.0.1:${port}` });
    const error = await failure(service.search('q', opts()));
    expect(error).toMatchObject({ reason: 'network', message: 'web search failed: the search service could not be reached' });
  });

  it('a redirect is not followed: the key never leaves the configured base URL', async () => {
    const elsewhere = await startFakeSearch();
    try {
      fake.script({ kind: 'redirect', location: `${elsewhere.url}/res/v1/web/search?q=q&count=5` });
      const error = await failure(brave().search('q', opts()));
      expect(error).toMatchObject({ reason: 'redirect', status: 302 });
      expect(elsewhere.requests).toHaveLength(0);
    } finally {
      await elsewhere.close();
    }
  });
});

describe('configuration', () => {
  it('without WEB_SEARCH_PROVIDER the service is off and says why', async () => {
    const service = serviceFor({});
    expect(service.isConfigured()).toBe(false);
    expect(service.providerName()).toBeUndefined();
    expect(service.configurationProblem()).toMatch(/WEB_SEARCH_PROVIDER is not set/);
    const error = await failure(service.search('q', opts()));
    expect(error).toMatchObject({ reason: 'not_configured', message: 'web search failed: web search is not configured' });
    expect(webSearchConfigProblems(configFor({}).webSearch)).toEqual([]);
  });

  it.each([
    ['tavily', { WEB_SEARCH_PROVIDER: 'tavily' }, 'WEB_SEARCH_PROVIDER=tavily needs WEB_SEARCH_API_KEY'],
    ['brave', { WEB_SEARCH_PROVIDER: 'brave' }, 'WEB_SEARCH_PROVIDER=brave needs WEB_SEARCH_API_KEY'],
    ['searxng', { WEB_SEARCH_PROVIDER: 'searxng', WEB_SEARCH_API_KEY: KEY }, 'WEB_SEARCH_PROVIDER=searxng needs WEB_SEARCH_BASE_URL'],
  ])('%s with missing settings is off, reported clearly, and sends nothing', async (_name, env, problem) => {
    // The base URL points at the fake (except for searxng, whose URL is what is missing): nothing may reach it.
    const config = configFor({ ...(env.WEB_SEARCH_PROVIDER === 'searxng' ? {} : { WEB_SEARCH_BASE_URL: fake.url }), ...env });
    const service = new WebSearchService(config);
    expect(service.isConfigured()).toBe(false);
    expect(service.configurationProblem()).toContain(problem);
    expect(webSearchConfigProblems(config.webSearch)).toEqual([expect.stringContaining(problem)]);
    service.onModuleInit();
    expect(warnings).toHaveBeenCalledWith(expect.stringContaining(problem));
    const error = await failure(service.search('q', opts()));
    expect(error.reason).toBe('not_configured');
    expect(error.detail).toContain(problem);
    expect(fake.requests).toHaveLength(0);
  });

  it('a key without a provider, or an unknown provider in a hand-made config, is reported', () => {
    expect(webSearchConfigProblems({ apiKey: KEY })).toEqual([expect.stringContaining('WEB_SEARCH_PROVIDER is not set')]);
    const service = new WebSearchService({ ...configFor({}), webSearch: { provider: 'bing', apiKey: KEY } });
    expect(service.isConfigured()).toBe(false);
    expect(service.configurationProblem()).toContain('WEB_SEARCH_PROVIDER must be one of searxng, tavily, brave');
  });

  it('complete configurations are on', () => {
    expect(tavily().isConfigured()).toBe(true);
    expect(brave().providerName()).toBe('brave');
    expect(searxng().configurationProblem()).toBeUndefined();
  });

  it.each([
    ['tavily', 'https://api.tavily.com/search'],
    ['brave', 'https://api.search.brave.com/res/v1/web/search?q=hello+world&count=3'],
  ])('%s defaults to its public API', async (provider, url) => {
    const fetchSpy = jest.spyOn(globalThis, 'fetch').mockResolvedValue(
      new Response(JSON.stringify(provider === 'brave' ? { web: { results: [] } } : { results: [] }), { status: 200 }),
    );
    await serviceFor({ WEB_SEARCH_PROVIDER: provider, WEB_SEARCH_API_KEY: KEY }).search('hello world', opts(3));
    expect(fetchSpy).toHaveBeenCalledTimes(1);
    expect(String(fetchSpy.mock.calls[0][0])).toBe(url);
  });

  it('WebSearchModule provides the service from the app configuration', async () => {
    @Module({ imports: [ConfigModule.forRoot(configFor({ WEB_SEARCH_PROVIDER: 'tavily', WEB_SEARCH_API_KEY: KEY, WEB_SEARCH_BASE_URL: fake.url })), WebSearchModule] })
    class TestModule {}
    const app = await NestFactory.createApplicationContext(TestModule, { logger: false });
    try {
      const service = app.get(WebSearchService);
      expect(service.providerName()).toBe('tavily');
      await expect(service.search('q', opts(1))).resolves.toHaveLength(1);
    } finally {
      await app.close();
    }
  });
});

describe('formatResultsForModel', () => {
  it('renders title, URL and snippet blocks, each with the number the answer cites it by', () => {
    const results: SearchResult[] = [
      { title: 'Node.js', url: 'https://nodejs.org/en', snippet: 'A JavaScript runtime.' },
      { title: 'No snippet', url: 'https://example.com/', snippet: '' },
    ];
    expect(formatResultsForModel(results)).toBe(
      ['[1] Node.js', '    https://nodejs.org/en', '    A JavaScript runtime.', '', '[2] No snippet', '    https://example.com/'].join('\n'),
    );
    // The request's numbers: results found by an earlier call keep theirs.
    expect(formatResultsForModel(results, [4, 2]).split('\n').filter((line) => line.startsWith('['))).toEqual(['[4] Node.js', '[2] No snippet']);
  });

  it('says so when there are no results', () => {
    expect(formatResultsForModel([])).toBe('No results found.');
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

async function closedPort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
