import type { NextFunction, Response } from 'express';
import { ApiError } from '../errors/api-error';
import type { ApiRequest } from './request-context';

const METHODS_WITH_BODY = new Set(['POST', 'PUT', 'PATCH']);

/**
 * The API reads JSON only. Any other body (text/plain, a form) would not be parsed, and the
 * request would run as if it had no body at all: a POST /v1/conversations with a text/plain
 * body created an empty conversation. Such bodies are refused with 415 instead.
 */
export function jsonBodyOnlyMiddleware(req: ApiRequest, _res: Response, next: NextFunction): void {
  const isApi = req.path === '/v1' || req.path.startsWith('/v1/');
  // An empty POST (no body, or `Content-Length: 0`) stays acceptable: every field may be optional.
  const hasBody = req.headers['transfer-encoding'] !== undefined || Number(req.headers['content-length'] ?? 0) > 0;
  if (!isApi || !METHODS_WITH_BODY.has(req.method) || !hasBody || req.is('application/json')) return next();
  next(
    new ApiError('bad_request', `The request body must be JSON, sent with "Content-Type: application/json" (got "${req.headers['content-type'] ?? 'no content type'}").`, {
      status: 415,
      code: 'unsupported_media_type',
    }),
  );
}
