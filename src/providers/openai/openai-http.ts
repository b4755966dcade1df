import * as http from 'node:http';
import * as https from 'node:https';
import type { Socket } from 'node:net';
import { urlToHttpOptions } from 'node:url';
import type { Cancellation } from '../../common/cancellation';
import type { ChatCompletion, ChatCompletionChunk } from '../provider-adapter';
import { upstreamMessage } from '../upstream-errors';
import { tracing } from '../../telemetry/tracing';

/** OpenAI's own address, when no OPENAI_BASE_URL is set. */
const OPENAI_BASE_URL = 'https://api.openai.com/v1';

/** Some providers' firewalls refuse requests without one. */
const USER_AGENT = 'assistant-chat-service';

/** Kept-alive connections to the upstream, shared by every request of the process. */
const agents = { 'http:': new http.Agent({ keepAlive: true }), 'https:': new https.Agent({ keepAlive: true }) };

/**
 * The upstream answered with an error status. `status`, `headers` and `error` (the body's
 * `error` object) are what the provider SDKs' errors carry, so toUpstreamApiError and
 * isRetryable read both alike.
 */
export class UpstreamHttpError extends Error {
  override readonly name = 'UpstreamHttpError';

  constructor(
    readonly status: number,
    readonly headers: Record<string, string>,
    readonly error: { message: string },
  ) {
    super(`HTTP ${status}: ${error.message}`);
  }
}

/** A stream that reported a failure in-band (`data: {"error": ...}`) after it had started. */
export class UpstreamStreamError extends Error {
  override readonly name = 'UpstreamStreamError';

  constructor(readonly error: unknown) {
    super(upstreamMessage({ error }));
  }
}

/**
 * `POST {baseUrl}/chat/completions` and `POST {baseUrl}/embeddings` on `node:http` with
 * kept-alive agents: the request body goes out as given, a plain answer comes back parsed, a
 * stream as its parsed `data:` events until `[DONE]`. Timeouts and retries are the caller's (ProvidersService); aborting
 * `cancellation` destroys the request, and a stream under way with it. In place of the OpenAI SDK,
 * whose request building, headers, logging and web-stream plumbing cost about as much CPU
 * per call as the rest of the call (bench/README.md, "chat.ts").
 */
export class OpenAiHttpClient {
  private readonly transport: typeof http | typeof https;
  /** What every request's options share, by endpoint, worked out once: the address as node:http takes it, and the agent. */
  private readonly targets: Record<'chat' | 'embeddings', http.RequestOptions>;
  /** The headers of a request, by the answer it accepts. */
  private readonly headers: Record<string, http.OutgoingHttpHeaders>;

  constructor(options: { apiKey: string; baseUrl?: string }) {
    const base = (options.baseUrl ?? OPENAI_BASE_URL).replace(/\/+$/, '');
    const target = (path: string): http.RequestOptions => {
      const url = new URL(`${base}${path}`);
      return { ...urlToHttpOptions(url), method: 'POST', agent: agents[url.protocol as keyof typeof agents] };
    };
    this.targets = { chat: target('/chat/completions'), embeddings: target('/embeddings') };
    this.transport = new URL(base).protocol === 'https:' ? https : http;
    const headers = { Authorization: `Bearer ${options.apiKey}`, 'Content-Type': 'application/json', 'User-Agent': USER_AGENT };
    this.headers = Object.fromEntries(['application/json', 'text/event-stream'].map((accept) => [accept, { ...headers, Accept: accept }]));
  }

  async complete(body: object, cancellation: Cancellation): Promise<ChatCompletion> {
    const response = await this.post('chat', body, 'application/json', cancellation);
    return JSON.parse(await readText(response, cancellation)) as ChatCompletion;
  }

  /** `POST /embeddings`: the answer parsed, in whatever shape the server gave it (the adapter reads it). */
  async embed(body: object, cancellation: Cancellation): Promise<unknown> {
    const response = await this.post('embeddings', body, 'application/json', cancellation);
    return JSON.parse(await readText(response, cancellation)) as unknown;
  }

  async *stream(body: object, cancellation: Cancellation): AsyncIterable<ChatCompletionChunk> {
    const response = await this.post('chat', body, 'text/event-stream', cancellation);
    response.setEncoding('utf8');
    let pending = '';
    let done = false;
    try {
      // Not destroyed on leaving the loop: after [DONE] the rest of the body is read, so that the connection is kept.
      for await (const text of response.iterator({ destroyOnReturn: false }) as AsyncIterable<string>) {
        pending += text;
        for (let end = eventEnd(pending); end !== null; end = eventEnd(pending)) {
          const event = parseEvent(pending.slice(0, end.at));
          pending = pending.slice(end.at + end.length);
          if (event === null) continue;
          if (event === DONE) {
            done = true;
            return;
          }
          yield event;
        }
      }
      // Ended without [DONE]: taken as the end, as the OpenAI SDK takes it (some servers omit it).
    } catch (error) {
      throw cancellation.aborted ? abortError() : error;
    } finally {
      if (done) finishQuietly(response);
      // Left early (the consumer stopped, or a failure): the connection is not reused.
      else if (!response.complete) response.destroy();
    }
  }

  /** Sends the request; resolves with a 2xx response, rejects with UpstreamHttpError otherwise. */
  private post(endpoint: 'chat' | 'embeddings', body: object, accept: 'application/json' | 'text/event-stream', cancellation: Cancellation): Promise<http.IncomingMessage> {
    return new Promise((resolve, reject) => {
      // The request's own options first, then the spread: see usageRecord (billing/usage-record.ts).
      const request = this.transport.request({ headers: tracing.withTraceHeaders(this.headers[accept]), ...this.targets[endpoint] }, (response) => {
        const status = response.statusCode ?? 502;
        if (status >= 200 && status < 300) return resolve(response);
        readText(response, cancellation).then((text) => reject(new UpstreamHttpError(status, flatHeaders(response.headers), errorOf(text))), reject);
      });
      request.on('error', (error) => reject(cancellation.aborted ? abortError() : error));
      request.on('socket', guardSocket);
      // What node:http's `signal` option does, without an AbortSignal: destroyed when aborted
      // (at once if it is already), the link gone once the request and its response are over.
      request.once('close', cancellation.onAbort(() => request.destroy(abortError())));
      request.end(JSON.stringify(body));
    });
  }
}

const GUARDED = Symbol('guarded');

/**
 * Aborting a request whose response has arrived whole but is not read yet (a stream closed
 * by its reader right after a chunk, the rest of the answer already in) destroys its socket
 * with an error after node's HTTP client has stopped listening to it: an 'error' without a
 * listener, an uncaught exception that would stop the process. Every socket of the pool gets
 * one listener that lets such late errors go (what was being read has failed already).
 */
function guardSocket(socket: Socket & { [GUARDED]?: true }): void {
  if (socket[GUARDED]) return;
  socket[GUARDED] = true;
  socket.on('error', () => undefined);
}

/** Where the first event of `text` ends (a blank line, `\n\n` or `\r\n\r\n`), or null. */
function eventEnd(text: string): { at: number; length: number } | null {
  const lf = text.indexOf('\n\n');
  const crlf = text.indexOf('\r\n\r\n');
  if (crlf !== -1 && (lf === -1 || crlf < lf)) return { at: crlf, length: 4 };
  return lf === -1 ? null : { at: lf, length: 2 };
}

const DONE = Symbol('[DONE]');

/**
 * One event: its chunk, DONE for `data: [DONE]`, null for an event without data (a comment,
 * a keep-alive). A failure reported in-band (`data: {"error": ...}`, or an `event: error`
 * frame) is thrown as UpstreamStreamError.
 */
function parseEvent(text: string): ChatCompletionChunk | typeof DONE | null {
  const data: string[] = [];
  let name = 'message';
  for (const line of text.split(/\r?\n/)) {
    if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    else if (line.startsWith('event:')) name = line.slice(6).trim();
  }
  if (data.length === 0) return null;
  const joined = data.join('\n');
  if (joined === '[DONE]') return DONE;
  const event = JSON.parse(joined) as ChatCompletionChunk & { error?: unknown };
  if (name === 'error') throw new UpstreamStreamError(event.error ?? event);
  if (event.error) throw new UpstreamStreamError(event.error);
  return event;
}

/** After [DONE]: the rest of the body (its last bytes) is read so that the connection goes back to the pool; destroyed if it does not end soon. */
function finishQuietly(response: http.IncomingMessage): void {
  if (response.readableEnded) return;
  const giveUp = setTimeout(() => response.destroy(), 1_000);
  giveUp.unref();
  response.once('end', () => clearTimeout(giveUp));
  response.once('close', () => clearTimeout(giveUp));
  response.resume();
}

/** The whole body; an AbortError when `cancellation` stopped it. */
function readText(response: http.IncomingMessage, cancellation: Cancellation): Promise<string> {
  return new Promise((resolve, reject) => {
    const fail = (error: unknown) => reject(cancellation.aborted ? abortError() : error);
    const chunks: Buffer[] = [];
    response.on('data', (chunk: Buffer) => chunks.push(chunk));
    response.on('end', () => resolve(Buffer.concat(chunks).toString('utf8')));
    response.on('error', fail);
    response.on('close', () => {
      if (!response.complete) fail(new Error('The upstream connection closed before the answer was complete'));
    });
  });
}

/** The body's `error` object (OpenAI's shape); a bare error text, or any other body, as its message. */
function errorOf(text: string): { message: string } {
  try {
    const parsed = JSON.parse(text) as { error?: unknown };
    const error = parsed?.error ?? parsed;
    if (typeof error === 'object' && error !== null && typeof (error as { message?: unknown }).message === 'string') return error as { message: string };
    return { message: (typeof error === 'string' ? error : JSON.stringify(error)).slice(0, 500) };
  } catch {
    return { message: text.slice(0, 500) };
  }
}

function flatHeaders(headers: http.IncomingHttpHeaders): Record<string, string> {
  const flat: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) if (value !== undefined) flat[name] = Array.isArray(value) ? value.join(', ') : value;
  return flat;
}

function abortError(): Error {
  return new DOMException('The upstream call was aborted', 'AbortError');
}
