import { createServer, type IncomingHttpHeaders, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/**
 * A stand-in for the three web search backends on 127.0.0.1, answering in their wire formats:
 *
 * - SearXNG: `GET  {prefix}/search?q=&format=json`  -> `{query, number_of_results, results: [{title, url, content, engine, ...}], ...}`
 * - Tavily:  `POST {prefix}/search` (JSON body)     -> `{query, answer, images, results: [{title, url, content, score, raw_content}], response_time}`
 * - Brave:   `GET  {prefix}/res/v1/web/search?q=&count=` -> `{type: 'search', query: {original}, web: {type: 'search', results: [{title, url, description, ...}]}}`
 *
 * Any path prefix is accepted (a SearXNG instance under `/searxng`). It records every request
 * and answers each with the next scripted scenario, or the default one (three results).
 * With `apiKey` set it checks credentials as the real services do: Tavily's bearer token,
 * Brave's `X-Subscription-Token` (401 otherwise); SearXNG, which has no keys of its own,
 * checks the bearer token only with `searxngRequiresKey` (an authenticating proxy in front).
 *
 *   const fake = await startFakeSearch({ apiKey: 'tvly-test' });
 *   fake.script(resultsScenario([{ title: 'A', url: 'https://a.example', snippet: 'about a' }]));
 *   ... search with WEB_SEARCH_BASE_URL=fake.url ...
 *   expect(fake.requests[0].body).toEqual({ query: 'a', max_results: 5, search_depth: 'basic' });
 */

export interface FakeHit {
  title?: unknown;
  url?: unknown;
  /** Goes into `content` (SearXNG, Tavily) or `description` (Brave). */
  snippet?: unknown;
  /** Extra fields merged into the result object as sent. */
  extra?: Record<string, unknown>;
}

export type SearchScenario =
  | { kind: 'results'; hits: FakeHit[]; delayMs?: number }
  /** Any status and body, sent as is (malformed JSON, HTML pages, odd shapes). */
  | { kind: 'raw'; status?: number; body: string; contentType?: string; delayMs?: number }
  | { kind: 'http_error'; status: number; body?: unknown; headers?: Record<string, string> }
  | { kind: 'redirect'; status?: number; location: string }
  /** Accepts the request and never answers (for timeouts and aborts). */
  | { kind: 'hang' };

export type FakeSearchService = 'searxng' | 'tavily' | 'brave' | 'unknown';

export interface RecordedSearchRequest {
  service: FakeSearchService;
  method: string;
  /** The path without the query string. */
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined for GET or when it did not parse). */
  body: any;  
  rawBody: string;
  status?: number;
  /** Set when the client closed the connection before the answer was complete. */
  closedEarly: boolean;
}

export interface FakeSearch {
  /** Base URL for WEB_SEARCH_BASE_URL (no trailing slash). */
  url: string;
  requests: RecordedSearchRequest[];
  /** Queues answers for the next requests; when the queue is empty, the default answer is used. */
  script(...scenarios: SearchScenario[]): void;
  setDefault(scenario: SearchScenario): void;
  /** Forgets requests and the queue, restores the default answer. */
  reset(): void;
  close(): Promise<void>;
}

export const DEFAULT_HITS: FakeHit[] = [
  { title: 'Example Domain', url: 'https://example.com/', snippet: 'This domain is for use in illustrative examples.' },
  { title: 'Node.js', url: 'https://nodejs.org/en', snippet: 'Node.js is a JavaScript runtime.' },
  { title: 'MDN Web Docs', url: 'https://developer.mozilla.org/', snippet: 'Resources for developers, by developers.' },
];

export const resultsScenario = (hits: FakeHit[], delayMs?: number): SearchScenario => ({ kind: 'results', hits, delayMs });
export const httpError = (status: number, body?: unknown): SearchScenario => ({ kind: 'http_error', status, body });

export async function startFakeSearch(options: { apiKey?: string; searxngRequiresKey?: boolean } = {}): Promise<FakeSearch> {
  const queue: SearchScenario[] = [];
  const initialDefault: SearchScenario = resultsScenario(DEFAULT_HITS);
  let fallback = initialDefault;
  const requests: RecordedSearchRequest[] = [];
  const open = new Set<ServerResponse>();

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const url = new URL(req.url ?? '/', 'http://fake');
      const rawBody = Buffer.concat(chunks).toString('utf8');
      let body: unknown;
      try {
        body = rawBody ? JSON.parse(rawBody) : undefined;
      } catch {
        body = undefined;
      }
      const method = req.method ?? 'GET';
      const service: FakeSearchService = url.pathname.endsWith('/res/v1/web/search')
        ? method === 'GET' ? 'brave' : 'unknown'
        : url.pathname.endsWith('/search')
          ? method === 'GET' ? 'searxng' : method === 'POST' ? 'tavily' : 'unknown'
          : 'unknown';
      const recorded: RecordedSearchRequest = {
        service,
        method,
        path: url.pathname,
        query: Object.fromEntries(url.searchParams),
        headers: req.headers,
        body,
        rawBody,
        closedEarly: false,
      };
      requests.push(recorded);
      open.add(res);
      res.on('close', () => {
        open.delete(res);
        if (!res.writableFinished) recorded.closedEarly = true;
      });

      const send = (status: number, payload: string, headers: Record<string, string> = {}) => {
        recorded.status = status;
        res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
        res.end(payload);
      };
      if (service === 'unknown') return send(404, JSON.stringify({ error: 'Not Found' }));
      const denied = service === 'searxng' && !options.searxngRequiresKey ? undefined : checkCredentials(service, req.headers, options.apiKey);
      if (denied) return send(denied.status, JSON.stringify(denied.body));
      void answer(service, queue.shift() ?? fallback, recorded, res, send);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...scenarios) => queue.push(...scenarios),
    setDefault: (scenario) => {
      fallback = scenario;
    },
    reset: () => {
      requests.length = 0;
      queue.length = 0;
      fallback = initialDefault;
    },
    close: async () => {
      for (const res of open) res.destroy();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function checkCredentials(
  service: FakeSearchService,
  headers: IncomingHttpHeaders,
  apiKey: string | undefined,
): { status: number; body: unknown } | undefined {
  if (!apiKey) return undefined;
  if (service === 'brave') {
    return headers['x-subscription-token'] === apiKey
      ? undefined
      : { status: 401, body: { type: 'ErrorResponse', error: { code: 'SUBSCRIPTION_TOKEN_INVALID', status: 401, detail: 'The provided subscription token is invalid.' } } };
  }
  if (headers.authorization === `Bearer ${apiKey}`) return undefined;
  return service === 'tavily'
    ? { status: 401, body: { detail: { error: 'Unauthorized: missing or invalid API key.' } } }
    : { status: 401, body: { error: 'unauthorized' } };
}

async function answer(
  service: FakeSearchService,
  scenario: SearchScenario,
  recorded: RecordedSearchRequest,
  res: ServerResponse,
  send: (status: number, payload: string, headers?: Record<string, string>) => void,
): Promise<void> {
  if (scenario.kind === 'hang') return;
  if ('delayMs' in scenario && scenario.delayMs) {
    await new Promise((resolve) => setTimeout(resolve, scenario.delayMs));
    if (res.destroyed) return;
  }
  switch (scenario.kind) {
    case 'raw':
      return send(scenario.status ?? 200, scenario.body, { 'Content-Type': scenario.contentType ?? 'application/json' });
    case 'http_error':
      return send(scenario.status, JSON.stringify(scenario.body ?? { error: `fake search error ${scenario.status}` }), scenario.headers);
    case 'redirect':
      return send(scenario.status ?? 302, '', { Location: scenario.location });
    case 'results':
      return send(200, JSON.stringify(resultsBody(service, scenario.hits, recorded)));
  }
}

function resultsBody(service: FakeSearchService, hits: FakeHit[], recorded: RecordedSearchRequest): unknown {
  if (service === 'brave') {
    const count = Number(recorded.query.count ?? 20);
    return {
      type: 'search',
      query: { original: recorded.query.q, more_results_available: hits.length > count },
      mixed: { type: 'mixed', main: [] },
      web: {
        type: 'search',
        family_friendly: true,
        results: hits.slice(0, count).map((hit) => ({
          type: 'search_result',
          title: hit.title,
          url: hit.url,
          description: hit.snippet,
          is_source_local: false,
          language: 'en',
          ...hit.extra,
        })),
      },
    };
  }
  if (service === 'tavily') {
    const max = Number(recorded.body?.max_results ?? 5);
    return {
      query: recorded.body?.query,
      follow_up_questions: null,
      answer: null,
      images: [],
      results: hits.slice(0, max).map((hit, index) => ({
        title: hit.title,
        url: hit.url,
        content: hit.snippet,
        score: 0.9 - index * 0.05,
        raw_content: null,
        ...hit.extra,
      })),
      response_time: 0.42,
    };
  }
  // SearXNG has no count parameter: it returns its whole first page.
  return {
    query: recorded.query.q,
    number_of_results: hits.length,
    results: hits.map((hit, index) => ({
      title: hit.title,
      url: hit.url,
      content: hit.snippet,
      engine: 'duckduckgo',
      engines: ['duckduckgo'],
      positions: [index + 1],
      score: 1 / (index + 1),
      category: 'general',
      template: 'default.html',
      ...hit.extra,
    })),
    answers: [],
    corrections: [],
    infoboxes: [],
    suggestions: [],
    unresponsive_engines: [],
  };
}
