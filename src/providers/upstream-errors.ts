import { ApiError } from '../common/errors/api-error';
import { redactSecrets } from '../common/secrets';

/**
 * Provider SDK errors (OpenAI, Anthropic and Google SDKs alike) carry an HTTP `status`
 * when the upstream answered, and a class name saying timeout or connection failure
 * when it did not. This maps all of them onto the API's error types.
 */
export function toUpstreamApiError(error: unknown, provider: string): ApiError {
  if (error instanceof ApiError) return error;
  const e = (error ?? {}) as { status?: unknown; name?: string; message?: string; headers?: unknown; code?: string };
  const status = typeof e.status === 'number' ? e.status : undefined;
  // Relayed to the client: an upstream may echo what it was sent, the deployment's key included.
  const detail = redactSecrets(upstreamMessage(error));

  if (isTimeout(error)) {
    return new ApiError('upstream_timeout', `The ${provider} provider did not answer in time.`);
  }
  if (status === 404) {
    // The provider does not know the model: the catalog's upstream_model is wrong, not the request.
    return new ApiError('upstream_error', `The ${provider} provider does not serve this model (check the catalog's upstream_model).`, {
      code: 'upstream_model_not_found',
    });
  }
  if (status === 400 || status === 413 || status === 422) {
    return ApiError.badRequest(`The ${provider} provider rejected the request: ${detail}`, undefined, 'upstream_bad_request');
  }
  if (status === 429) {
    const retryAfter = retryAfterSeconds(e.headers) ?? 10;
    return new ApiError('service_unavailable', `The ${provider} provider is rate limiting this service; retry shortly.`, {
      code: 'upstream_rate_limited',
      headers: { 'Retry-After': String(retryAfter) },
    });
  }
  if (status === 401 || status === 403) {
    return new ApiError('upstream_error', `The service could not authenticate with the ${provider} provider.`, {
      code: 'upstream_auth_failed',
    });
  }
  if (status !== undefined) {
    return new ApiError('upstream_error', `The ${provider} provider failed (HTTP ${status}).`, { code: 'upstream_failed' });
  }
  if ((error as { error?: unknown })?.error) {
    // An error event inside a stream: the provider reported a failure mid-answer.
    return new ApiError('upstream_error', `The ${provider} provider failed mid-answer: ${detail}`, { code: 'upstream_failed' });
  }
  return new ApiError('upstream_error', `The ${provider} provider could not be reached or answered malformed data.`, {
    code: 'upstream_unreachable',
  });
}

/** Worth another try before anything was sent to the client: overload, 5xx, network trouble. */
export function isRetryable(error: unknown): boolean {
  if (error instanceof ApiError) return false;
  if (isAbort(error) || isTimeout(error)) return false;
  const status = (error as { status?: unknown })?.status;
  if (typeof status === 'number') return status === 408 || status === 409 || status === 429 || status >= 500;
  return true;
}

/**
 * Worth trying on another deployment of the model: everything that is not the request's own
 * fault (a 400 or 422 it would get anywhere) nor an abort. A timeout and a 401/403/404 are
 * the deployment's trouble (slow, a bad key, a wrong upstream name), not the request's.
 */
export function failsOver(error: unknown): boolean {
  if (isAbort(error)) return false;
  if (error instanceof ApiError) return error.type === 'upstream_timeout';
  const status = (error as { status?: unknown })?.status;
  if (typeof status === 'number') return !(status === 400 || status === 413 || status === 422);
  return true;
}

/** An upstream 429's Retry-After, in ms; undefined without one. */
export function retryAfterMs(error: unknown): number | undefined {
  const seconds = retryAfterSeconds((error as { headers?: unknown })?.headers);
  return seconds === undefined ? undefined : seconds * 1000;
}

export function isAbort(error: unknown): boolean {
  const name = (error as { name?: string })?.name ?? '';
  return name === 'AbortError' || name === 'APIUserAbortError' || name.endsWith('UserAbortError');
}

function isTimeout(error: unknown): boolean {
  const name = (error as { name?: string })?.name ?? '';
  const message = (error as { message?: string })?.message ?? '';
  return /Timeout/i.test(name) || /timed out/i.test(message);
}

/** The provider's own words for a failure: the error body's message (SDK errors and ours carry it as `error`), else the error's. */
export function upstreamMessage(error: unknown): string {
  const e = error as { error?: { message?: string; error?: { message?: string } }; message?: string };
  return e?.error?.message ?? e?.error?.error?.message ?? e?.message ?? 'no details';
}

function retryAfterSeconds(headers: unknown): number | undefined {
  const value =
    headers && typeof (headers as Headers).get === 'function'
      ? (headers as Headers).get('retry-after')
      : (headers as Record<string, string> | undefined)?.['retry-after'];
  const seconds = Number(value);
  return Number.isFinite(seconds) && seconds > 0 ? Math.ceil(seconds) : undefined;
}
