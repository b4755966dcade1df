import { applyDecorators, Type } from '@nestjs/common';
import { ApiBearerAuth, ApiProperty, ApiPropertyOptional, ApiResponse, getSchemaPath, ApiExtraModels } from '@nestjs/swagger';
import { ApiErrorType, STATUS_OF_TYPE } from '../errors/api-error';

class ErrorDetailDto {
  @ApiProperty({ enum: Object.keys(STATUS_OF_TYPE), example: 'bad_request' })
  type: ApiErrorType;

  @ApiProperty({ example: 'temperature must be at most 2' })
  message: string;

  @ApiProperty({ type: String, nullable: true, example: 'invalid_value' })
  code: string | null;

  @ApiProperty({ type: String, nullable: true, example: 'temperature' })
  param: string | null;

  @ApiPropertyOptional({ description: 'Only on 429: seconds until the window resets.', example: 42 })
  retry_after_seconds?: number;

  @ApiPropertyOptional({ description: 'Only on 402 `key_limit_exceeded` and 429 `key_limit_held`: whole millicents the API key may still spend in its period.', example: 1200 })
  remaining_millicents?: number;
}

export class ErrorBodyDto {
  @ApiProperty({ type: ErrorDetailDto })
  error: ErrorDetailDto;
}

const header = (description: string, example: string | number) => ({ description, schema: { type: 'string', example } });

/** Headers on every `/v1` response, errors and streams included. */
export const API_RESPONSE_HEADERS = {
  'X-Request-Id': header('Identifier of this request; a well-formed incoming one is echoed.', 'req_4f9a1c2e'),
  'X-RateLimit-Limit': header('Requests allowed per 60-second window; -1 means unlimited.', 60),
  'X-RateLimit-Remaining': header('Requests left in the current window; -1 means unlimited.', 59),
  'X-RateLimit-Reset': header('Unix time (seconds) at which the window resets.', 1795000000),
};

const ERROR_DESCRIPTIONS: Partial<Record<number, string>> = {
  400: 'bad_request: invalid parameters (`param` names the field)',
  401: 'authentication_error: missing, malformed, unknown or revoked API key',
  402: "insufficient_balance: the wallet cannot cover the request (code `insufficient_balance`), or the API key's spending limit cannot (code `key_limit_exceeded`, with `remaining_millicents`)",
  403: 'permission_denied: a tier or feature limit, or a limit of the API key (codes `model_not_allowed`, `assistant_not_allowed`, `ip_not_allowed`)',
  404: 'not_found',
  409: 'conflict',
  413: 'bad_request: the body is over the size limit',
  415: 'bad_request: the body is not JSON (code `unsupported_media_type`)',
  429: "rate_limit_exceeded: over the tier's or the key's requests per minute, or the key's spending limit is held by its requests in flight (code `key_limit_held`); see Retry-After",
  500: 'internal_error',
  502: 'upstream_error',
  503: 'service_unavailable: the database cannot be reached (code `database_unavailable`, see Retry-After), or a provider is unavailable',
  504: 'upstream_timeout',
};

function errorResponse(status: number) {
  const headers =
    status === 429 || status === 503
      ? { ...API_RESPONSE_HEADERS, 'Retry-After': header('Seconds to wait before retrying.', status === 429 ? 42 : 5) }
      : API_RESPONSE_HEADERS;
  return ApiResponse({
    status,
    description: ERROR_DESCRIPTIONS[status],
    headers,
    schema: { $ref: getSchemaPath(ErrorBodyDto) },
  });
}

/**
 * Bearer auth, the response headers and the error responses every `/v1` route shares,
 * plus the success body and the errors particular to a route.
 */
export function ApiStandardResponses(options: { ok?: Type<unknown>; errors?: number[] } = {}) {
  // Any route can meet a database that is down (503).
  const statuses = [...new Set([401, 429, 500, 503, ...(options.errors ?? [])])].sort((a, b) => a - b);
  return applyDecorators(
    ApiBearerAuth(),
    ApiExtraModels(ErrorBodyDto),
    ApiResponse({ status: 200, description: 'Success', type: options.ok, headers: API_RESPONSE_HEADERS }),
    ...statuses.map(errorResponse),
  );
}
