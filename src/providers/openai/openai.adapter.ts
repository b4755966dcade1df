import OpenAI from 'openai';
import type { ChatCompletion, ChatCompletionChunk, ProviderAdapter, ProviderRequest } from '../provider-adapter';
import { nodeHttpFetch } from './node-http-fetch';
import { checkOpenAiParameters, toOpenAiParams } from './request';

export interface OpenAiAdapterOptions {
  apiKey: string;
  /** Any OpenAI-compatible server (OpenRouter, Groq, vLLM, Ollama, ...); OpenAI's when unset. */
  baseUrl?: string;
  timeoutMs: number;
}

/**
 * OpenAI and every OpenAI-compatible server: the request passes through in OpenAI's format,
 * standard parameters only (`request.ts`). Answers, chunks and SDK errors need no translation.
 */
export class OpenAiAdapter implements ProviderAdapter {
  private readonly client: OpenAI;

  constructor(private readonly options: OpenAiAdapterOptions) {
    // Retries are ours (before the first byte only), so the SDK makes one attempt.
    this.client = new OpenAI({
      apiKey: options.apiKey,
      baseURL: options.baseUrl,
      maxRetries: 0,
      timeout: options.timeoutMs,
      fetch: nodeHttpFetch,
    });
  }

  checkRequest(extra: Record<string, unknown>): void {
    checkOpenAiParameters(extra);
  }

  complete(request: ProviderRequest): Promise<ChatCompletion> {
    return this.client.chat.completions.create({ ...this.params(request), stream: false }, { signal: request.signal });
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const stream = await this.client.chat.completions.create(
      // Usage is always asked for upstream: the cost of a stream is computed from it.
      { ...this.params(request), stream: true, stream_options: { include_usage: true } },
      { signal: request.signal },
    );
    yield* stream;
  }

  private params(request: ProviderRequest): OpenAI.Chat.ChatCompletionCreateParamsNonStreaming {
    return toOpenAiParams(request, Boolean(this.options.baseUrl));
  }
}
