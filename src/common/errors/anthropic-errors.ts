import type { Response } from 'express';
import type { ApiRequest } from '../http/request-context';
import type { ApiError, ApiErrorBody } from './api-error';

/**
 * Errors in the Anthropic Messages API's shape: `{"type": "error", "error": {"type", "message"},
 * "request_id"}`, the type from the status as Anthropic maps it. Our own fields stay inside
 * `error` (`code`: `insufficient_balance`, `key_limit_exceeded`, `model_not_allowed`...; `param`),
 * so that a client can still tell our refusals apart; the status is ours, unchanged.
 */

export type AnthropicErrorType =
  | 'invalid_request_error'
  | 'authentication_error'
  | 'permission_error'
  | 'not_found_error'
  | 'request_too_large'
  | 'rate_limit_error'
  | 'api_error'
  | 'overloaded_error';

export interface AnthropicErrorBody {
  type: 'error';
  error: { type: AnthropicErrorType; message: string } & Partial<Omit<ApiErrorBody['error'], 'type' | 'message'>>;
  request_id?: string;
}

/** Anthropic's error type for a status: 402 (money) and 403 are permission errors; 503 (no capacity, stopping) is overloaded. */
export function anthropicErrorType(status: number): AnthropicErrorType {
  if (status === 401) return 'authentication_error';
  if (status === 402 || status === 403) return 'permission_error';
  if (status === 404) return 'not_found_error';
  if (status === 413) return 'request_too_large';
  if (status === 429) return 'rate_limit_error';
  if (status === 503 || status === 529) return 'overloaded_error';
  if (status >= 500) return 'api_error';
  return 'invalid_request_error';
}

/** The body of an error the API answers with `status`, given in our shape (ApiError.toBody). */
export function inAnthropicShape(status: number, body: ApiErrorBody, requestId?: string): AnthropicErrorBody {
  const { type: _ours, message, ...fields } = body.error;
  return { type: 'error', error: { type: anthropicErrorType(status), message, ...fields }, ...(requestId ? { request_id: requestId } : {}) };
}

/** An ApiError as Anthropic's error body (the `error` event of a stream that failed after it started). */
export function anthropicErrorOf(error: ApiError, requestId?: string): AnthropicErrorBody {
  return inAnthropicShape(error.status, error.toBody(), requestId);
}

/**
 * Makes the error body `res` answers next Anthropic's: whoever answers the error (the
 * exception filter) still decides its status, headers and logging; only its body changes.
 */
export function answerErrorInAnthropicShape(req: ApiRequest, res: Response): void {
  const json = res.json.bind(res);
  res.json = (body: ApiErrorBody) => json(inAnthropicShape(res.statusCode, body, req.id));
}

/** A request of Anthropic's SDKs or of Claude Code: they always send `anthropic-version`. */
export function wantsAnthropicShape(req: ApiRequest): boolean {
  return req.headers['anthropic-version'] !== undefined;
}
