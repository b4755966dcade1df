import { Observable, Subscriber } from 'rxjs';
import { Cancellation } from '../common/cancellation';
import { serverShuttingDown } from '../common/http/server-drain';
import type { ChatMessage } from '../providers/provider-adapter';
import type { OpenedStream } from '../providers/providers.service';
import type { BillingSession } from '../billing/billing-session';
import { citationsIn, SourceList } from '../tools/citations';
import { annotatedReply } from './annotated-answer';
import type { ChatStreamEvent } from './completion-types';
import { StreamedIteration, StreamRelay } from './stream-relay';
import { cutShortNote, LoopEnd, ModelTurn, runToolLoop, ToolLoop } from './tool-loop';

/** How often a keep-alive goes out while server tools run. */
const KEEP_ALIVE_MS = 5_000;

/** A streamed request once prepared (its money held): what its tool loop needs. */
export interface StreamedCall extends Omit<ToolLoop<StreamedTurn>, 'callModel' | 'toolsRunning' | 'billing'> {
  billing: Pick<BillingSession, 'settleStream'> & ToolLoop<StreamedTurn>['billing'];
  /** The model id the client sees in every chunk: the model that answered (read at each chunk). */
  modelId: () => string;
  /** `stream_options.include_usage`: a last chunk carries the usage. */
  includeUsage: boolean;
  isServerTool(name: string | undefined): boolean;
  /** The sources the request's tools numbered: the answer's citations of them go out before its finish. */
  sources?: SourceList;
  /** Opens one model call's stream (retried until its first chunk; see ProvidersService.openStream). */
  openStream(messages: ChatMessage[], last: boolean, outputCap?: number): Promise<OpenedStream>;
}

type StreamedTurn = ModelTurn & Pick<StreamedIteration, 'clientCalls'>;

/**
 * A streamed completion as a cold Observable. Subscribing starts it: `start` prepares the
 * request (validation, the hold) with a cancellation that unsubscribing aborts, so a client that
 * leaves stops the upstream call and the tools under way, and what was used is settled all
 * the same. The chunks of all iterations are emitted as one completion, keep-alives while
 * server tools run, and `x_service` on the last chunk once the request is settled. A failure
 * is the observable's error: before the first chunk it is still an ordinary HTTP error.
 *
 * `stop` (ServerDrain.streamsCut) ends a stream the server no longer waits for: the model
 * call under way is closed, no further one starts, and the stream fails with
 * `server_shutting_down`, charged for what it generated (BillingSession.settleStream). A
 * call not yet answered is stopped by its own signal (linked to `stop` by the chat service)
 * and fails the same way; before the first chunk, that is the stream's HTTP answer (503).
 */
export function streamedCompletion(start: (ended: Cancellation) => Promise<StreamedCall>, stop?: Cancellation): Observable<ChatStreamEvent> {
  return new Observable<ChatStreamEvent>((subscriber) => {
    const teardown = new Cancellation();
    start(teardown)
      .then((call) => relayToolLoop(subscriber, call, stop))
      .catch((error: unknown) => subscriber.error(error));
    // Runs on unsubscription, and after completion or error, when there is nothing left to stop.
    return () => teardown.abort();
  });
}

async function relayToolLoop(subscriber: Subscriber<ChatStreamEvent>, call: StreamedCall, stop: Cancellation | undefined): Promise<void> {
  const relay = new StreamRelay(subscriber, call.modelId, (name) => call.isServerTool(name));
  let end: LoopEnd<StreamedTurn> | undefined;
  let failure: unknown;
  try {
    // Its own properties before the spread: see usageRecord (billing/usage-record.ts).
    end = await runToolLoop<StreamedTurn>({
      callModel: async (messages, last, outputCap) => {
        if (stop?.aborted) throw serverShuttingDown();
        // A call still waiting for its first chunk at the deadline was stopped with it (ServerDrain.untilDeadline).
        const opened = await call.openStream(messages, last, outputCap).catch((error: unknown) => {
          throw stop?.aborted ? serverShuttingDown() : error;
        });
        const iteration: StreamedIteration = { generated: '', content: '', serverCalls: [], clientCalls: [] };
        let broken: unknown;
        try {
          await relay.relay(prepend(opened.first, stoppable(opened.rest, stop)), iteration);
        } catch (error) {
          broken = error;
        }
        return { calledClientTools: iteration.clientCalls.length > 0, broken, ...iteration, content: iteration.content || null };
      },
      toolsRunning: () => {
        relay.continueLoop();
        const keepAlive = setInterval(() => relay.keepAlive(), KEEP_ALIVE_MS);
        return () => clearInterval(keepAlive);
      },
      ...call,
    });
  } catch (error) {
    failure = error;
  }

  let finishReason: 'length' | 'stop' | undefined;
  if (end?.cutShort) {
    relay.say(`${end.turn.content ? '\n\n' : ''}${cutShortNote(end)}`);
    finishReason = 'length';
  } else if (end && end.turn.serverCalls.length > 0 && !end.turn.calledClientTools) {
    // Stopped at the iteration limit with server calls only: the client sees an answer, not tool calls.
    finishReason = 'stop';
  }
  // Throws the error to end the stream with; after a disconnect it settles and returns.
  const sources = call.sources ?? new SourceList();
  await call.billing.settleStream(failure, end ? annotatedReply(replyOf(end.turn), sources) : undefined, relay.delivered);
  if (subscriber.closed) return;
  // The citations of the whole text the client got (every iteration's), as OpenAI sends them: a delta before the finish.
  relay.annotate(citationsIn(relay.text, sources));
  const { spend } = call.billing;
  relay.finish(spend.xService(), call.includeUsage ? spend.usage() : undefined, finishReason);
  subscriber.complete();
}

/** The answer a stream gave the client, to store in its conversation. */
function replyOf(turn: StreamedTurn): ChatMessage {
  const toolCalls = turn.clientCalls.map((call) => ({ id: call.id, type: 'function' as const, function: { name: call.name, arguments: call.arguments } }));
  return { role: 'assistant', content: turn.content, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
}

/**
 * The rest of a stream until `stop`: then the upstream call is closed (its `return`) and the
 * stream breaks with `server_shutting_down`, as it breaks when the upstream stalls.
 */
function stoppable<T>(rest: AsyncIterator<T>, stop: Cancellation | undefined): AsyncIterator<T> {
  if (!stop) return rest;
  const close = () => void rest.return?.()?.catch(() => undefined);
  return {
    next: async () => {
      if (stop.aborted) {
        close();
        throw serverShuttingDown();
      }
      let forget: (() => void) | undefined;
      const stopped = new Promise<never>((_, reject) => {
        forget = stop.onAbort(() => {
          close();
          reject(serverShuttingDown());
        });
      });
      try {
        return await Promise.race([rest.next(), stopped]);
      } finally {
        forget!();
      }
    },
    return: async () => (await rest.return?.()) ?? { done: true, value: undefined },
  };
}

async function* prepend<T>(first: T, rest: AsyncIterator<T>): AsyncIterable<T> {
  yield first;
  for (let next = await rest.next(); !next.done; next = await rest.next()) yield next.value;
}
