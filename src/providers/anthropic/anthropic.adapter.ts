import Anthropic from '@anthropic-ai/sdk';
import { Logger } from '@nestjs/common';
import type { MessageCreateParamsNonStreaming, MessageCreateParamsStreaming, MessageCountTokensParams } from '@anthropic-ai/sdk/resources/messages';
import type { ModelDefinition } from '../../models/model-catalog';
import { tracing } from '../../telemetry/tracing';
import type { ChatCompletion, ChatCompletionChunk, ChatMessage, NativeRequest, ProviderAdapter, ProviderRequest } from '../provider-adapter';
import { abortReason, normalizeError } from './errors';
import { nativeCall, nativeCountCall } from './native';
import { checkAnthropicRequest, translateRequest } from './request';
import { toChatCompletion } from './response';
import { StreamTranslator } from './stream';

export interface AnthropicAdapterOptions {
  apiKey: string;
  /** Anthropic's API when unset (or ANTHROPIC_BASE_URL, which the SDK reads itself). */
  baseUrl?: string;
  timeoutMs: number;
}

/**
 * Anthropic's Messages API behind the OpenAI wire format: requests are translated to
 * Messages requests (`request.ts`), answers and raw stream events back to chat completions
 * (`response.ts`) and chunks (`stream.ts`); `errors.ts` gives stream errors and aborts the
 * shape `upstream-errors.ts` maps. A request that came in Anthropic's format (`request.native`)
 * is sent as it came (`native.ts`) and its answer also told, as Anthropic sent it, to
 * `native.answer`; the chat completion made of it is what the core bills.
 */
export class AnthropicAdapter implements ProviderAdapter {
  private readonly client: Anthropic;

  constructor(options: AnthropicAdapterOptions) {
    const logger = new Logger('Anthropic');
    const log = (level: 'error' | 'warn' | 'log' | 'debug') => (message: string, ...rest: unknown[]) =>
      logger[level]([message, ...rest.map((part) => (typeof part === 'string' ? part : JSON.stringify(part)))].join(' '));
    this.client = new Anthropic({
      apiKey: options.apiKey,
      // Only the key configured for this service authenticates, never a stray ANTHROPIC_AUTH_TOKEN.
      authToken: null,
      baseURL: options.baseUrl,
      // Retries are ours (before the first byte only), so the SDK makes one attempt.
      maxRetries: 0,
      timeout: options.timeoutMs,
      logger: { error: log('error'), warn: log('warn'), info: log('log'), debug: log('debug') },
    });
  }

  checkRequest(extra: Record<string, unknown>, messages: ChatMessage[] = []): void {
    checkAnthropicRequest(extra, messages);
  }

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const native = nativeCall(request, false);
    const { params, answer } = native ? { params: native.params as unknown as MessageCreateParamsNonStreaming, answer: undefined } : translateRequest(request);
    try {
      // A native body goes as it came: without a `stream` the client did not send.
      const message = await this.client.messages.create(native ? params : { ...params, stream: false }, { signal: request.cancellation.signal, headers: tracing.withTraceHeaders(native?.headers) });
      if (native) request.native?.answer?.message(message);
      return toChatCompletion(message, request.model.id, answer);
    } catch (error) {
      throw normalizeError(error, request.cancellation.signal);
    }
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const native = nativeCall(request, true);
    const { params, answer } = native ? { params: native.params as unknown as MessageCreateParamsStreaming, answer: undefined } : translateRequest(request);
    const translator = new StreamTranslator(request.model.id, answer);
    const tell = native ? request.native?.answer : undefined;
    try {
      const events = await this.client.messages.create({ ...params, stream: true }, { signal: request.cancellation.signal, headers: tracing.withTraceHeaders(native?.headers) });
      for await (const event of events) {
        tell?.event(event);
        for (const chunk of translator.push(event)) yield chunk;
      }
    } catch (error) {
      throw normalizeError(error, request.cancellation.signal);
    }
    // The SDK ends a stream quietly when its signal aborts: an abort must still be an error.
    if (request.cancellation.aborted) throw abortReason(request.cancellation.signal);
    if (!translator.finished) {
      throw new Error('The Anthropic stream ended before message_stop: the upstream answer is incomplete.');
    }
  }

  /** Anthropic's own count of a native request (its count_tokens endpoint); undefined when it cannot go as it came. */
  async countTokens(request: { model: ModelDefinition; native: NativeRequest; signal: AbortSignal }): Promise<number | undefined> {
    const call = nativeCountCall(request);
    if (!call) return undefined;
    const counted = await this.client.messages.countTokens(call.params as unknown as MessageCountTokensParams, { signal: request.signal, headers: call.headers });
    return counted.input_tokens;
  }
}
