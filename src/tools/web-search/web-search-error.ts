export type WebSearchFailure =
  | 'not_configured'
  | 'invalid_query'
  | 'timeout'
  | 'aborted'
  | 'network'
  | 'http_error'
  | 'redirect'
  | 'malformed_response';

const SUMMARY: Record<WebSearchFailure, string> = {
  not_configured: 'web search is not configured',
  invalid_query: 'empty query',
  timeout: 'timeout',
  aborted: 'aborted',
  network: 'the search service could not be reached',
  http_error: 'the search service answered with an error',
  redirect: 'the search service answered with a redirect',
  malformed_response: 'malformed response from the search service',
};

/**
 * A web search that did not produce results. `message` is short and safe to show the
 * model as the tool result ("web search failed: timeout"); it never carries upstream text
 * or credentials. `detail` is for the operator's log (upstream excerpts, with the API key
 * redacted).
 */
export class WebSearchError extends Error {
  readonly reason: WebSearchFailure;
  /** The upstream HTTP status, for `http_error` and `redirect`. */
  readonly status?: number;
  readonly detail?: string;

  constructor(reason: WebSearchFailure, options: { status?: number; detail?: string; message?: string; cause?: unknown } = {}) {
    super(`web search failed: ${options.message ?? describe(reason, options.status)}`, { cause: options.cause });
    this.name = 'WebSearchError';
    this.reason = reason;
    this.status = options.status;
    this.detail = options.detail;
  }
}

function describe(reason: WebSearchFailure, status?: number): string {
  if (reason === 'http_error' && status !== undefined) {
    if (status === 401 || status === 403) return `the search service refused the request (HTTP ${status})`;
    if (status === 429) return 'the search service is rate limiting us (HTTP 429)';
    return `the search service answered HTTP ${status}`;
  }
  if (reason === 'redirect' && status !== undefined) return `the search service answered with a redirect (HTTP ${status})`;
  return SUMMARY[reason];
}
