import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { Response } from 'express';

/**
 * A signal aborted when the client goes away before its response is finished (the socket
 * closes first), so that the handler can stop the work nobody will read, e.g. an upstream call.
 */
export const ClientAbortSignal = createParamDecorator((_: unknown, context: ExecutionContext): AbortSignal =>
  clientAbortSignal(context.switchToHttp().getResponse<Response>()),
);

/** The decorator's signal, for a handler called without Nest (the direct route of chat completions). */
export function clientAbortSignal(res: Response): AbortSignal {
  const clientGone = new AbortController();
  const abortUnlessFinished = () => {
    if (!res.writableFinished) clientGone.abort();
  };
  // The client may have left while a guard or an interceptor was still at work.
  if (res.closed) abortUnlessFinished();
  else res.once('close', abortUnlessFinished);
  return clientGone.signal;
}
