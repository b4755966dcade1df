import type { Response } from 'express';
import type { Observable } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { isKeepAlive } from './completion-types';

/**
 * Writes an observable as Server-Sent Events in OpenAI's format: `data: <json>` frames,
 * then `data: [DONE]`. Headers (with the rate-limit headers the guards set) go out at
 * once; an error after that is sent in-band as a last `data: {"error": ...}` frame.
 * A client that disconnects unsubscribes, which ends the upstream call.
 */
export function writeEventStream(res: Response, events: Observable<unknown>, onError: (error: unknown) => ApiError): void {
  res.status(200);
  res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
  res.setHeader('Cache-Control', 'no-cache, no-transform');
  res.setHeader('Connection', 'keep-alive');
  res.setHeader('X-Accel-Buffering', 'no'); // nginx: do not buffer the stream
  res.flushHeaders();

  const send = (data: string) => {
    if (!res.writableEnded) res.write(`data: ${data}\n\n`);
  };
  const end = () => {
    send('[DONE]');
    if (!res.writableEnded) res.end();
  };
  const subscription = events.subscribe({
    // A keep-alive is an SSE comment: clients ignore it, proxies see traffic.
    next: (event) => (isKeepAlive(event) ? !res.writableEnded && res.write(': keep-alive\n\n') : send(JSON.stringify(event))),
    error: (error: unknown) => {
      send(JSON.stringify(onError(error).toBody()));
      end();
    },
    complete: end,
  });
  res.on('close', () => subscription.unsubscribe());
}
