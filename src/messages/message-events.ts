import type { RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import { Observable } from 'rxjs';
import { ChatStreamEvent, isKeepAlive, XService } from '../chat/completion-types';
import type { ApiError } from '../common/errors/api-error';
import type { ChatCompletionChunk, CompletionUsage } from '../providers/provider-adapter';
import { anthropicErrorOf } from '../common/errors/anthropic-errors';
import { MessageXService, StopReason, stopReasonOf, usageOf, xServiceOf } from './message-object';
import type { AnthropicAnswer } from './native-answer';

/** One event of the Messages stream: its `type` names the SSE event. */
export type MessageEvent = { type: string } & Record<string, unknown>;

/** A ping after this long without an event, so that clients and proxies see a live stream (Anthropic sends them too). */
export const PING_AFTER_SILENCE_MS = 10_000;

export interface MessageEventsOptions {
  id: string;
  /** The model named in message_start when a keep-alive comes before the first chunk (which names the answering model). */
  model: string;
  /** The prompt's tokens as counted before the call: message_start's input_tokens (message_delta has the upstream's count). */
  promptTokens(): number;
  maxTokensLoweredTo(): number | undefined;
  /** An error after the stream started, as the API error its `error` event carries. */
  toApiError(error: unknown): ApiError;
  pingAfterMs?: number;
  /** Where an Anthropic deployment's own events arrive, when the request went to it as it came. */
  native?: AnthropicAnswer;
}

/**
 * Turns the chat core's stream (OpenAI chunks, keep-alives) into Anthropic's event order:
 * `message_start`, then for each block `content_block_start`, its deltas (`text_delta`,
 * `input_json_delta`) and `content_block_stop`, with indices from 0; then `message_delta`
 * (stop reason, usage, our `x_service`) and `message_stop`. `ping` while nothing else comes.
 * A failure before the first chunk stays the observable's error (an ordinary HTTP error);
 * after it, it is an `error` event and the stream ends.
 *
 * When an Anthropic deployment answered the request sent as it came (`options.native`), its
 * own events go to the client instead, in its order (thinking_delta, signature_delta,
 * citations_delta included), under our message id and the catalog's model id; the chat chunks
 * made of them are then read only for `x_service`, which joins Anthropic's `message_delta`.
 */
export function messageEvents(chat: Observable<ChatStreamEvent>, options: MessageEventsOptions): Observable<MessageEvent> {
  return new Observable<MessageEvent>((subscriber) => {
    let lastEvent = Date.now();
    const events = new MessageEventBuilder(options, (event) => {
      lastEvent = Date.now();
      subscriber.next(event);
    });
    const pingAfter = options.pingAfterMs ?? PING_AFTER_SILENCE_MS;
    const pinger = setInterval(() => {
      if (events.started && Date.now() - lastEvent >= pingAfter) events.ping();
    }, Math.max(1, Math.floor(pingAfter / 2)));
    const subscription = chat.subscribe({
      next: (event) => {
        if (isKeepAlive(event)) events.ping();
        else events.chunk(event);
      },
      error: (error: unknown) => {
        clearInterval(pinger);
        if (!events.started) return subscriber.error(error);
        events.failed(options.toApiError(error));
        subscriber.complete();
      },
      complete: () => {
        clearInterval(pinger);
        events.finish();
        subscriber.complete();
      },
    });
    return () => {
      clearInterval(pinger);
      subscription.unsubscribe();
    };
  });
}

type OpenBlock = { kind: 'text'; index: number } | { kind: 'tool_use'; index: number; chatIndex: number; json: string };

class MessageEventBuilder {
  started = false;
  private nextIndex = 0;
  private open?: OpenBlock;
  /** Chat tool-call indices whose block is closed: a late delta for one cannot be placed in Anthropic's order. */
  private readonly closedCalls = new Set<number>();
  private finishReason: string | null = null;
  private calledTools = false;
  private usage?: CompletionUsage;
  private xService?: XService;
  /** Set when Anthropic's own events are the client's (see messageEvents). */
  private native = false;
  private nativeDelta?: Extract<RawMessageStreamEvent, { type: 'message_delta' }>;

  constructor(
    private readonly options: MessageEventsOptions,
    private readonly emit: (event: MessageEvent) => void,
  ) {}

  chunk(chunk: ChatCompletionChunk & { x_service?: XService }): void {
    if (!this.started && this.options.native?.follow(chunk.id, (event) => this.nativeEvent(event, chunk.model))) this.native = true;
    this.start(chunk.model);
    if (chunk.usage) this.usage = chunk.usage;
    if (chunk.x_service) this.xService = chunk.x_service;
    if (this.native) return;
    const choice = chunk.choices.find((candidate) => candidate.index === 0);
    if (!choice) return;
    const text = choice.delta.content ?? choice.delta.refusal;
    if (text) this.text(text);
    if (choice.delta.refusal && !choice.delta.content) this.finishReason = 'content_filter';
    for (const part of choice.delta.tool_calls ?? []) this.toolCall(part);
    if (choice.finish_reason && this.finishReason !== 'content_filter') this.finishReason = choice.finish_reason;
  }

  ping(): void {
    this.start(this.options.model);
    this.emit({ type: 'ping' });
  }

  finish(): void {
    if (!this.started) return;
    if (this.native && this.nativeDelta) return this.finishNative(this.nativeDelta);
    this.closeBlock();
    const usage = usageOf(this.usage);
    const stopReason: StopReason = stopReasonOf(this.finishReason, this.calledTools);
    const xService: MessageXService | undefined = this.xService && xServiceOf(this.xService, this.options.maxTokensLoweredTo());
    this.emit({
      type: 'message_delta',
      delta: { stop_reason: stopReason, stop_sequence: null },
      usage: { ...usage, input_tokens: this.usage ? usage.input_tokens : this.options.promptTokens() },
      ...(xService ? { x_service: xService } : {}),
    });
    this.emit({ type: 'message_stop' });
  }

  /** One of Anthropic's events: message_start under our id and model; message_delta held for x_service; its pings and message_stop are ours to send. */
  private nativeEvent(event: RawMessageStreamEvent, model: string): void {
    switch (event.type) {
      case 'message_start':
        this.started = true;
        this.emit({ type: 'message_start', message: { ...event.message, id: this.options.id, model } });
        return;
      case 'message_delta':
        this.nativeDelta = event;
        return;
      case 'message_stop':
        return;
      default:
        if ((event as { type: string }).type !== 'ping') this.emit(event as unknown as MessageEvent);
    }
  }

  private finishNative(delta: Extract<RawMessageStreamEvent, { type: 'message_delta' }>): void {
    const xService = this.xService && xServiceOf(this.xService, this.options.maxTokensLoweredTo());
    this.emit({ ...delta, ...(xService ? { x_service: xService } : {}) });
    this.emit({ type: 'message_stop' });
  }

  failed(error: ApiError): void {
    this.emit(anthropicErrorOf(error) as unknown as MessageEvent);
  }

  private start(model: string): void {
    if (this.started) return;
    this.started = true;
    this.emit({
      type: 'message_start',
      message: {
        id: this.options.id,
        type: 'message',
        role: 'assistant',
        model,
        content: [],
        stop_reason: null,
        stop_sequence: null,
        usage: { input_tokens: this.options.promptTokens(), output_tokens: 0, cache_creation_input_tokens: null, cache_read_input_tokens: null },
      },
    });
  }

  private text(delta: string): void {
    if (this.open?.kind !== 'text') {
      this.closeBlock();
      this.open = { kind: 'text', index: this.nextIndex++ };
      this.emit({ type: 'content_block_start', index: this.open.index, content_block: { type: 'text', text: '' } });
    }
    this.emit({ type: 'content_block_delta', index: this.open.index, delta: { type: 'text_delta', text: delta } });
  }

  private toolCall(part: NonNullable<ChatCompletionChunk['choices'][number]['delta']['tool_calls']>[number]): void {
    // Providers stream parallel calls one after the other; a delta of a call already closed would break the order, and is dropped.
    if (this.closedCalls.has(part.index)) return;
    if (this.open?.kind !== 'tool_use' || this.open.chatIndex !== part.index) {
      this.closeBlock();
      this.calledTools = true;
      this.open = { kind: 'tool_use', index: this.nextIndex++, chatIndex: part.index, json: '' };
      this.emit({
        type: 'content_block_start',
        index: this.open.index,
        content_block: { type: 'tool_use', id: part.id ?? `toolu_${this.open.index}`, name: part.function?.name ?? '', input: {} },
      });
    }
    const json = part.function?.arguments;
    if (json) {
      this.open.json += json;
      this.emit({ type: 'content_block_delta', index: this.open.index, delta: { type: 'input_json_delta', partial_json: json } });
    }
  }

  private closeBlock(): void {
    const open = this.open;
    if (!open) return;
    this.open = undefined;
    if (open.kind === 'tool_use') {
      this.closedCalls.add(open.chatIndex);
      // A call without arguments: its input is `{}`, and the concatenated partial_json must say so.
      if (open.json.trim() === '') this.emit({ type: 'content_block_delta', index: open.index, delta: { type: 'input_json_delta', partial_json: '{}' } });
    }
    this.emit({ type: 'content_block_stop', index: open.index });
  }
}
