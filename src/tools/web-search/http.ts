import { WebSearchError } from './web-search-error';

/** Largest answer read from a search backend; a search page is a few tens of kilobytes. */
export const MAX_RESPONSE_BYTES = 2 * 1024 * 1024;

export interface JsonRequest {
  method: 'GET' | 'POST';
  url: URL;
  headers: Record<string, string>;
  body?: unknown;
  signal: AbortSignal;
  /** Redacted from anything kept for the log. */
  secret?: string;
  /** Operator hint added to the log detail of a given HTTP status (e.g. SearXNG's 403). */
  hints?: Partial<Record<number, string>>;
}

/**
 * One request to a search backend, answered with parsed JSON. Redirects are not followed
 * (the request, with its credentials, goes to the configured base URL and nowhere else).
 * An abort is rethrown as is, so the caller can tell its timeout from a cancellation.
 */
export async function requestJson(request: JsonRequest): Promise<unknown> {
  const { signal } = request;
  let response: Response;
  try {
    response = await fetch(request.url, {
      method: request.method,
      headers: {
        Accept: 'application/json',
        ...(request.body !== undefined ? { 'Content-Type': 'application/json' } : {}),
        ...request.headers,
      },
      body: request.body !== undefined ? JSON.stringify(request.body) : undefined,
      redirect: 'manual',
      signal,
    });
  } catch (error) {
    if (signal.aborted) throw error;
    throw new WebSearchError('network', { cause: error, detail: describeNetworkError(error) });
  }

  if (response.type === 'opaqueredirect' || (response.status >= 300 && response.status < 400)) {
    await discard(response);
    throw new WebSearchError('redirect', {
      status: response.status || undefined,
      detail: `redirect to ${response.headers.get('location') ?? '(no location)'} not followed`,
    });
  }

  let text: string;
  try {
    text = await readCapped(response, MAX_RESPONSE_BYTES);
  } catch (error) {
    if (signal.aborted) throw error;
    if (error instanceof WebSearchError) throw error;
    throw new WebSearchError('network', { cause: error, detail: `the answer broke off: ${describeNetworkError(error)}` });
  }

  if (!response.ok) {
    const hint = request.hints?.[response.status];
    const excerpt = redact(text.replace(/\s+/g, ' ').trim().slice(0, 300), request.secret);
    throw new WebSearchError('http_error', {
      status: response.status,
      detail: [hint, excerpt && `answer: ${excerpt}`].filter(Boolean).join('; ') || undefined,
    });
  }
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new WebSearchError('malformed_response', {
      detail: `not JSON (${response.headers.get('content-type') ?? 'no content type'}): ${redact(text.slice(0, 120), request.secret)}`,
    });
  }
}

/** Joins a base URL (which may carry a path, e.g. https://host/searxng/) and an absolute path. */
export function endpoint(baseUrl: string, path: string): URL {
  const base = new URL(baseUrl);
  base.pathname = `${base.pathname.replace(/\/+$/, '')}${path}`;
  base.search = '';
  base.hash = '';
  return base;
}

export function redact(text: string, secret: string | undefined): string {
  return secret ? text.split(secret).join('[redacted]') : text;
}

async function readCapped(response: Response, limit: number): Promise<string> {
  const declared = Number(response.headers.get('content-length'));
  if (Number.isFinite(declared) && declared > limit) {
    await discard(response);
    throw new WebSearchError('malformed_response', { detail: `answer of ${declared} bytes is over the ${limit}-byte limit` });
  }
  if (!response.body) return '';
  const reader = response.body.getReader();
  const chunks: Uint8Array[] = [];
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > limit) {
      await reader.cancel().catch(() => undefined);
      throw new WebSearchError('malformed_response', { detail: `answer over the ${limit}-byte limit` });
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks).toString('utf8');
}

async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => undefined);
}

function describeNetworkError(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (error as Error)?.message ?? 'unknown error';
}
