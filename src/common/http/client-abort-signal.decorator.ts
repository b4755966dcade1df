import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { Response } from 'express';

/**
 * A signal aborted when the client goes away before its response is finished (the socket
 * closes first), so that the handler can stop the work nobody will read, e.g. an upstream call.
 */
export const ClientAbortSignal = createParamDecorator((_: unknown, context: ExecutionContext): AbortSignal => {
  const res = context.switchToHttp().getResponse<Response>();
  const clientGone = new AbortController();
  const abortUnlessFinished = () => {
    if (!res.writableFinished) clientGone.abort();
  };
  // The client may have left while a guard or an interceptor was still at work.
  if (res.closed) abortUnlessFinished();
  else res.once('close', abortUnlessFinished);
  return clientGone.signal;
});
