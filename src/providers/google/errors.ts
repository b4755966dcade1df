import { isPlainObject, parseJson } from './json';

// Cancellation, timeout and Google's errors in the shape `upstream-errors.ts` reads.

/** One upstream call: the caller's signal, an inactivity timer, and a way to end the connection. */
export class CallGuard {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private timer?: NodeJS.Timeout;
  private timedOut = false;

  constructor(
    private readonly callerSignal: AbortSignal,
    private readonly timeoutMs: number,
  ) {
    this.signal = AbortSignal.any([callerSignal, this.controller.signal]);
    this.arm();
  }

  arm(): void {
    this.disarm();
    if (!(this.timeoutMs > 0)) return;
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort();
    }, this.timeoutMs);
    this.timer.unref?.();
  }

  disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.disarm();
    this.controller.abort();
  }

  /** The error to throw: the caller's abort reason, our timeout, or Google's error in a readable shape. */
  explain(error: unknown): unknown {
    if (this.callerSignal.aborted) {
      // The reason says why: an AbortError when the client left, a TimeoutError from AbortSignal.timeout.
      const reason = this.callerSignal.reason as { name?: unknown } | undefined;
      return typeof reason?.name === 'string' ? reason : error;
    }
    if (this.timedOut) return new GoogleTimeoutError(this.timeoutMs);
    return toGoogleApiError(error) ?? error;
  }
}

/** The upstream stayed silent longer than the configured timeout (maps to `upstream_timeout`). */
export class GoogleTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`The Gemini API timed out: no answer within ${timeoutMs} ms.`);
    this.name = 'TimeoutError';
  }
}

/**
 * An error answer of the Gemini API (an HTTP error, or an error event inside a stream), in the
 * shape `upstream-errors.ts` reads: `status`, `error.message` (Google's own message, not the
 * SDK's JSON dump) and `headers['retry-after']` (from Google's RetryInfo on a 429).
 */
export class GoogleApiError extends Error {
  readonly status: number;
  readonly error: { code?: number; message?: string; status?: string; details?: unknown[] };
  readonly headers: Record<string, string>;

  constructor(status: number, error: GoogleApiError['error'], options: { cause: unknown }) {
    super(error.message ?? `HTTP ${status}`, options);
    this.name = 'GoogleApiError';
    this.status = status;
    this.error = error;
    this.headers = {};
    const retryDelay = retryDelaySeconds(error.details);
    if (retryDelay !== undefined) this.headers['retry-after'] = String(retryDelay);
  }
}

/** The SDK's ApiError carries `status` and Google's error body as a JSON string in `message`. */
function toGoogleApiError(error: unknown): GoogleApiError | undefined {
  const e = error as { name?: unknown; status?: unknown; message?: unknown };
  if (e?.name !== 'ApiError' || typeof e.status !== 'number') return undefined;
  const message = typeof e.message === 'string' ? e.message : '';
  const body = parseJson(message.slice(Math.max(0, message.indexOf('{')))) as { error?: GoogleApiError['error'] } | undefined;
  const details = isPlainObject(body?.error) ? body.error : { message };
  let status = e.status;
  // Google answers a wrong API key with 400 INVALID_ARGUMENT: it is our credentials, not the client's request.
  if (status === 400 && errorReasons(details.details).includes('API_KEY_INVALID')) status = 401;
  return new GoogleApiError(status, { ...details, message: details.message || message || `HTTP ${status}` }, { cause: error });
}

function errorReasons(details: unknown[] | undefined): string[] {
  return (details ?? []).map((detail) => (detail as { reason?: unknown })?.reason).filter((r): r is string => typeof r === 'string');
}

/** Google's RetryInfo detail (`"retryDelay": "37s"`), in whole seconds. */
function retryDelaySeconds(details: unknown[] | undefined): number | undefined {
  for (const detail of details ?? []) {
    const d = detail as { '@type'?: unknown; retryDelay?: unknown };
    if (typeof d?.['@type'] === 'string' && d['@type'].endsWith('google.rpc.RetryInfo') && typeof d.retryDelay === 'string') {
      const seconds = Number.parseFloat(d.retryDelay);
      if (Number.isFinite(seconds) && seconds > 0) return Math.ceil(seconds);
    }
  }
  return undefined;
}
