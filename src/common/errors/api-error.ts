import { HttpStatus } from '@nestjs/common';

/** The error identifiers of the spec (docs/architecture.md, "Errors and headers (contract)"), carried in `error.type`. */
export type ApiErrorType =
  | 'bad_request'
  | 'authentication_error'
  | 'insufficient_balance'
  | 'permission_denied'
  | 'not_found'
  | 'conflict'
  | 'rate_limit_exceeded'
  | 'internal_error'
  | 'upstream_error'
  | 'service_unavailable'
  | 'upstream_timeout';

export const STATUS_OF_TYPE: Record<ApiErrorType, number> = {
  bad_request: HttpStatus.BAD_REQUEST,
  authentication_error: HttpStatus.UNAUTHORIZED,
  insufficient_balance: HttpStatus.PAYMENT_REQUIRED,
  permission_denied: HttpStatus.FORBIDDEN,
  not_found: HttpStatus.NOT_FOUND,
  conflict: HttpStatus.CONFLICT,
  rate_limit_exceeded: HttpStatus.TOO_MANY_REQUESTS,
  internal_error: HttpStatus.INTERNAL_SERVER_ERROR,
  upstream_error: HttpStatus.BAD_GATEWAY,
  service_unavailable: HttpStatus.SERVICE_UNAVAILABLE,
  upstream_timeout: HttpStatus.GATEWAY_TIMEOUT,
};

export interface ApiErrorBody {
  error: {
    type: ApiErrorType;
    message: string;
    code: string | null;
    param: string | null;
    retry_after_seconds?: number;
    /** key_limit_exceeded: what the key may still spend in its period, in whole millicents. */
    remaining_millicents?: number;
  };
}

export interface ApiErrorOptions {
  /** Machine-readable detail finer than `type`, e.g. `model_not_found`. Defaults to the type. */
  code?: string;
  /** The request field at fault, as a dotted path (`messages.0.role`). */
  param?: string;
  /** Overrides the status of the type (413 is a `bad_request` too). */
  status?: number;
  /** Headers the response must carry, e.g. `Retry-After`. */
  headers?: Record<string, string>;
  retryAfterSeconds?: number;
  /** key_limit_exceeded: what the key may still spend in its period. */
  remainingMillicents?: number;
}

/**
 * Every error the API answers with. Services throw these; the global filter turns them
 * into the wire body, so no module formats errors of its own.
 */
export class ApiError extends Error {
  readonly status: number;
  readonly code: string;
  readonly param: string | null;
  readonly headers: Record<string, string>;
  readonly retryAfterSeconds?: number;
  readonly remainingMillicents?: number;

  constructor(
    readonly type: ApiErrorType,
    message: string,
    options: ApiErrorOptions = {},
  ) {
    super(message);
    this.name = 'ApiError';
    this.status = options.status ?? STATUS_OF_TYPE[type];
    this.code = options.code ?? type;
    this.param = options.param ?? null;
    this.headers = options.headers ?? {};
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.remainingMillicents = options.remainingMillicents;
  }

  toBody(): ApiErrorBody {
    const body: ApiErrorBody = {
      error: { type: this.type, message: this.message, code: this.code, param: this.param },
    };
    if (this.retryAfterSeconds !== undefined) body.error.retry_after_seconds = this.retryAfterSeconds;
    if (this.remainingMillicents !== undefined) body.error.remaining_millicents = this.remainingMillicents;
    return body;
  }

  static badRequest(message: string, param?: string, code?: string): ApiError {
    return new ApiError('bad_request', message, { param, code });
  }

  static notFound(message: string, code?: string, param?: string): ApiError {
    return new ApiError('not_found', message, { code, param });
  }

  static unauthenticated(message: string, code = 'invalid_api_key'): ApiError {
    return new ApiError('authentication_error', message, { code });
  }

  static permissionDenied(message: string, code?: string): ApiError {
    return new ApiError('permission_denied', message, { code });
  }

  static conflict(message: string, code?: string): ApiError {
    return new ApiError('conflict', message, { code });
  }

  static rateLimited(message: string, retryAfterSeconds: number): ApiError {
    return new ApiError('rate_limit_exceeded', message, {
      retryAfterSeconds,
      headers: { 'Retry-After': String(retryAfterSeconds) },
    });
  }
}
