import { createParamDecorator, ExecutionContext } from '@nestjs/common';
import type { Response } from 'express';
import { Cancellation } from '../cancellation';

/**
 * A cancellation aborted when the client goes away before its response is finished (the
 * socket closes first), so that the handler can stop the work nobody will read, e.g. an
 * upstream call.
 */
export const ClientGone = createParamDecorator((_: unknown, context: ExecutionContext): Cancellation =>
  clientGone(context.switchToHttp().getResponse<Response>()),
);

/** The decorator's cancellation, for a handler called without Nest (the direct route of chat completions). */
export function clientGone(res: Response): Cancellation {
  const gone = new Cancellation();
  const abortUnlessFinished = () => {
    if (!res.writableFinished) gone.abort();
  };
  // The client may have left while a guard or an interceptor was still at work.
  if (res.closed) abortUnlessFinished();
  else res.once('close', abortUnlessFinished);
  return gone;
}
