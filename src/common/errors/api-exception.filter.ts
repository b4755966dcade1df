import { ArgumentsHost, Catch, ExceptionFilter, HttpException, Inject, Logger, Optional } from '@nestjs/common';
import type { Response } from 'express';
import type { ApiRequest } from '../http/request-context';
import { loggedPath } from '../http/logged-path';
import { ApiError, ApiErrorType } from './api-error';
import { errorKind, RepeatedLog } from '../logging/repeated-log';
import { databaseUnavailableError, isDatabaseUnavailable } from './database-unavailable';
import { ERROR_PAGE_RENDERER, ErrorPageRenderer } from './error-pages';

const logger = new Logger('Errors');

/**
 * Requests refused because the database cannot be reached, logged once per interval with a
 * count: during an outage every request fails the same way, and a line (and stack) for each
 * would flood the log. Shared by every instance of the filter (the chat routes make their own).
 */
const unavailableLog = new RepeatedLog((message) => logger.error(message));

/**
 * The one place errors become responses: every error, whoever threw it, leaves as
 * `{"error": {type, message, code, param}}` with the status of its type. A database that
 * cannot be reached is a 503 the client may retry; anything else unexpected is logged with
 * the request id and answered as a bare 500. Requests of the dashboard's pages get the same
 * decision rendered as a page.
 */
@Catch()
export class ApiExceptionFilter implements ExceptionFilter {
  constructor(@Optional() @Inject(ERROR_PAGE_RENDERER) private readonly pages?: ErrorPageRenderer) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    this.respond(exception, http.getRequest<ApiRequest>(), http.getResponse<Response>());
  }

  respond(exception: unknown, req: ApiRequest, res: Response): void {
    const error = this.toApiError(exception, req);
    if (error.code === 'database_unavailable' && !(exception instanceof ApiError)) {
      // A known cause, said in one line: the stack of a refused connection tells nothing more.
      unavailableLog.report(
        `database_unavailable:${errorKind(exception)}`,
        `${req.method} ${loggedPath(req)} refused, the database cannot be reached [request ${req.id}]: ${String(exception)}`,
      );
    } else if (error.status >= 500) {
      const detail = exception instanceof Error ? (exception.stack ?? exception.message) : String(exception);
      logger.error(`${req.method} ${loggedPath(req)} failed [request ${req.id}]: ${detail}`);
    }
    if (res.headersSent) {
      // A stream already under way reports its errors in-band; all that is left is to end it.
      if (!res.writableEnded) res.end();
      return;
    }
    for (const [name, value] of Object.entries(error.headers)) res.setHeader(name, value);
    if (this.pages?.handles(req)) {
      this.pages.render(exception, error, req, res).catch((renderError: unknown) => {
        logger.error(`Could not render the error page [request ${req.id}]: ${String(renderError)}`);
        if (!res.headersSent) res.status(error.status).type('text').send(`Error ${error.status}`);
      });
      return;
    }
    res.status(error.status).json(error.toBody());
  }

  private toApiError(exception: unknown, req: ApiRequest): ApiError {
    if (exception instanceof ApiError) return exception;
    if (exception instanceof HttpException) return fromHttpException(exception, req);
    const bodyParserError = fromBodyParserError(exception);
    if (bodyParserError) return bodyParserError;
    if (isDatabaseUnavailable(exception)) return databaseUnavailableError();
    return new ApiError('internal_error', `The server had an error while processing your request (request ${req.id}).`);
  }
}

/** Nest's own HTTP exceptions (from pipes, the router, libraries) mapped onto our types. */
const TYPE_OF_HTTP_STATUS: Record<number, ApiErrorType> = {
  400: 'bad_request',
  401: 'authentication_error',
  402: 'insufficient_balance',
  403: 'permission_denied',
  405: 'bad_request',
  409: 'conflict',
  413: 'bad_request',
  415: 'bad_request',
  422: 'bad_request',
  429: 'rate_limit_exceeded',
  503: 'service_unavailable',
};

function fromHttpException(exception: HttpException, req: ApiRequest): ApiError {
  const status = exception.getStatus();
  if (status === 404) {
    return new ApiError('not_found', `Unknown request URL: ${req.method} ${req.path}.`, { code: 'unknown_url' });
  }
  const type: ApiErrorType = TYPE_OF_HTTP_STATUS[status] ?? 'internal_error';
  const message = type === 'internal_error' ? `The server had an error (request ${req.id}).` : exception.message;
  return new ApiError(type, message, { status: type === 'internal_error' ? 500 : status });
}

/** Errors of Express's body parser (malformed JSON, body too large) carry a `type` and a status. */
function fromBodyParserError(exception: unknown): ApiError | null {
  if (typeof exception !== 'object' || exception === null) return null;
  const { type, status, limit } = exception as { type?: string; status?: number; limit?: number };
  if (type === 'entity.too.large') {
    return new ApiError('bad_request', `The request body exceeds the limit of ${limit} bytes.`, {
      status: 413,
      code: 'request_too_large',
    });
  }
  if (type === 'entity.parse.failed') {
    return new ApiError(
      'bad_request',
      'We could not parse the JSON body of your request. The body must be valid JSON.',
      { code: 'invalid_json' },
    );
  }
  if (typeof type === 'string' && typeof status === 'number' && status >= 400 && status < 500) {
    return new ApiError('bad_request', `The request body could not be read (${type}).`, { status });
  }
  return null;
}
