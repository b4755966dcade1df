import Anthropic from '@anthropic-ai/sdk';

/** HTTP statuses of Anthropic's error types, for errors that arrive as `event: error` in a stream. */
const STATUS_OF_ERROR_TYPE: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  billing_error: 402,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  timeout_error: 504,
  overloaded_error: 529,
};

/**
 * Aborts become the signal's reason (an AbortError, or the TimeoutError of a timeout
 * signal), which `upstream-errors.ts` recognizes by name; the SDK's own abort error has
 * no distinctive name. An `event: error` in a stream, which the SDK throws without a
 * status, gets the status its error type stands for, so it maps like the HTTP error would.
 */
export function normalizeError(error: unknown, signal: AbortSignal): unknown {
  if (signal.aborted) return abortReason(signal);
  if (error instanceof Anthropic.APIError && error.status === undefined && error.type && error.constructor === Anthropic.APIError) {
    const status = STATUS_OF_ERROR_TYPE[error.type] ?? 500;
    return Anthropic.APIError.generate(status, error.error as object, undefined, error.headers ?? new Headers());
  }
  return error;
}

export function abortReason(signal: AbortSignal): Error {
  const reason: unknown = signal.reason;
  return reason instanceof Error ? reason : new DOMException('The upstream request was aborted.', 'AbortError');
}
