import { randomUUID } from 'node:crypto';
import type { NextFunction, Response } from 'express';
import type { ApiRequest } from './request-context';

export const REQUEST_ID_HEADER = 'X-Request-Id';
const WELL_FORMED = /^[A-Za-z0-9._:-]{1,128}$/;

/**
 * Gives every request an id, echoed in `X-Request-Id`, logged with errors and stored in
 * usage records. A caller's own id is kept when it is well formed, so traces join up.
 */
export function requestIdMiddleware(req: ApiRequest, res: Response, next: NextFunction): void {
  const incoming = req.header(REQUEST_ID_HEADER);
  req.id = incoming && WELL_FORMED.test(incoming) ? incoming : newRequestId();
  res.setHeader(REQUEST_ID_HEADER, req.id);
  next();
}

/** `req_` and a random UUID's 32 hex digits (without a regular expression: this runs on every request). */
function newRequestId(): string {
  const uuid = randomUUID();
  return `req_${uuid.slice(0, 8)}${uuid.slice(9, 13)}${uuid.slice(14, 18)}${uuid.slice(19, 23)}${uuid.slice(24)}`;
}
