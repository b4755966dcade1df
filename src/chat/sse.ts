import type { LoggerService } from '@nestjs/common';
import type { Response } from 'express';
import { catchError, concatMap, endWith, map, Observable, of } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { databaseUnavailableError, isDatabaseUnavailable } from '../common/errors/database-unavailable';
import { isKeepAlive } from './completion-types';

const DONE = 'data: [DONE]\n\n';

/** How events become SSE frames: OpenAI's by default; the Anthropic Messages API names each event (`event: <type>`). */
export interface EventStreamFormat {
  /** The frame of an event (a keep-alive included). */
  frame(event: unknown): string;
  /** The frames after the last event. */
  end: string[];
  /** The last frames of a stream that failed after it started. */
  failed(error: ApiError): string[];
}

const OPENAI_EVENT_STREAM: EventStreamFormat = {
  frame: (event) => (isKeepAlive(event) ? ': keep-alive\n\n' : `data: ${JSON.stringify(event)}\n\n`),
  end: [DONE],
  failed: (error) => [`data: ${JSON.stringify(error.toBody())}\n\n`, DONE],
};

/**
 * Writes an observable as Server-Sent Events in OpenAI's format: `data: <json>` frames,
 * then `data: [DONE]`; a keep-alive is an SSE comment (clients ignore it, proxies see
 * traffic). The headers (with the rate-limit headers the guards set) go out with the first
 * event; an error after that is sent in-band as a last `data: {"error": ...}` frame, then
 * `[DONE]`. An error before the first event rejects the returned promise with nothing
 * written, so that it is answered as any HTTP error. Frames are written one at a time: when
 * the socket's buffer is full the next waits for `drain`. A client that disconnects
 * unsubscribes, which stops the request's upstream call.
 */
export function writeEventStream(
  res: Response,
  events: Observable<unknown>,
  onError: (error: unknown) => ApiError,
  format: EventStreamFormat = OPENAI_EVENT_STREAM,
): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    let started = false;
    const frames = events.pipe(
      map((event) => {
        started = true;
        return format.frame(event);
      }),
      endWith(...format.end),
      catchError((error: unknown) => {
        if (!started) throw error;
        return of(...format.failed(onError(error)));
      }),
      concatMap((frame) => write(res, frame)),
    );
    const subscription = frames.subscribe({
      error: reject,
      complete: () => {
        if (!res.writableEnded) {
          // Node 24 drops what was written while corked when the response ends still corked.
          while (res.writableCorked > 0) res.uncork();
          res.end();
        }
        resolve();
      },
    });
    res.on('close', () => {
      subscription.unsubscribe();
      resolve();
    });
  });
}

/**
 * The error a stream that has started ends with, in-band: an ApiError as it is, a lost
 * database as its 503, anything else as an internal error that names only the request id
 * (the details go to the log, never to the client).
 */
export function inStreamError(error: unknown, requestId: string, logger: LoggerService): ApiError {
  if (error instanceof ApiError) return error;
  if (isDatabaseUnavailable(error)) return databaseUnavailableError();
  logger.error(`Stream failed [request ${requestId}]: ${error instanceof Error ? error.stack : String(error)}`);
  return new ApiError('internal_error', `The server had an error while streaming (request ${requestId}).`);
}

/** Whether a request body asks for a stream (`"stream": true`; anything else is a plain answer). */
export function isStreamRequest(body: unknown): boolean {
  return (body as { stream?: unknown } | null)?.stream === true;
}

/** Writes one frame; resolves once the socket can take the next (at once, or on `drain`). */
function write(res: Response, frame: string): Promise<void> {
  if (res.writableEnded || res.destroyed) return Promise.resolve();
  coalesceThisTurn(res);
  if (!res.headersSent) openEventStream(res);
  if (res.write(frame)) return Promise.resolve();
  return new Promise((resolve) => {
    const go = () => {
      res.off('drain', go);
      res.off('close', go);
      resolve();
    };
    res.on('drain', go);
    res.on('close', go);
  });
}

/**
 * Frames written in the same turn of the event loop (the headers and the chunks of one
 * upstream read, say) leave the socket in one write rather than one each: a system call
 * per frame was a good part of a stream's CPU. The socket is corked until the turn ends.
 */
function coalesceThisTurn(res: Response): void {
  if (res.writableCorked > 0) return;
  res.cork();
  setImmediate(() => res.uncork());
}

function openEventStream(res: Response): void {
  res.status(200);
  res.setHeader('Content-Type', 'text/event-stream; charset=utf-8');
  res.setHeader('Cache-Control', 'no-cache, no-transform');
  // A stopping server has already asked for this connection to close (ServerDrain).
  if (!res.hasHeader('Connection')) res.setHeader('Connection', 'keep-alive');
  res.setHeader('X-Accel-Buffering', 'no'); // nginx: do not buffer the stream
  res.flushHeaders();
}
