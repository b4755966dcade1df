import type { XService } from '../billing/spend';
import type { ChatCompletion, ChatCompletionChunk } from '../providers/provider-adapter';

/**
 * What `POST /v1/chat/completions` answers: OpenAI's completion and chunk, plus our
 * `x_service` extension. In a file of their own so that the service, the relay and the
 * SSE writer share them without importing one another.
 */

/** The extension object of every completion (spec: "x_service"); built by the request's Spend. */
export type { XService } from '../billing/spend';

export type ChatCompletionResponse = ChatCompletion & { x_service: XService };
export type ChatCompletionChunkResponse = ChatCompletionChunk & { x_service?: XService };

/**
 * An upstream completion or chunk with our fields after its own, in its order. Not
 * `{ ...answer, ...ours }`: on Node 20 an object made by a leading spread gets a new hidden
 * class for each property added to it (see usageRecord, billing/usage-record.ts); this one
 * starts with `id`, a property of its own.
 */
export function withOurFields<T extends { id: string }, F extends object>(answer: T, ours: F): Omit<T, keyof F> & F {
  const { id, ...rest } = answer;
  return { id, ...rest, ...ours } as Omit<T, keyof F> & F;
}

/** Sent as an SSE comment while server tools run, so proxies do not close an idle stream. */
export interface KeepAlive {
  keepAlive: true;
}
export const KEEP_ALIVE: KeepAlive = { keepAlive: true };

export function isKeepAlive(event: unknown): event is KeepAlive {
  return (event as KeepAlive)?.keepAlive === true;
}

/** What a streamed completion emits: chunks, and keep-alives while server tools run. */
export type ChatStreamEvent = ChatCompletionChunkResponse | KeepAlive;
