import { toVector } from '../embedding-vectors';
import type { ChatCompletion, ChatCompletionChunk, EmbeddingRequest, EmbeddingResult, ProviderAdapter, ProviderRequest } from '../provider-adapter';
import { OpenAiHttpClient } from './openai-http';
import { checkOpenAiParameters, toOpenAiParams } from './request';

export interface OpenAiAdapterOptions {
  apiKey: string;
  /** Any OpenAI-compatible server (OpenRouter, Groq, vLLM, Ollama, ...); OpenAI's when unset. */
  baseUrl?: string;
}

/**
 * OpenAI and every OpenAI-compatible server: the request passes through in OpenAI's format,
 * standard parameters only (`request.ts`). Answers and chunks need no translation; errors
 * carry the status, headers and error body that toUpstreamApiError reads. Timeouts and
 * retries (before the first byte only) are ProvidersService's.
 */
export class OpenAiAdapter implements ProviderAdapter {
  private readonly client: OpenAiHttpClient;

  constructor(private readonly options: OpenAiAdapterOptions) {
    this.client = new OpenAiHttpClient(options);
  }

  checkRequest(extra: Record<string, unknown>): void {
    checkOpenAiParameters(extra);
  }

  complete(request: ProviderRequest): Promise<ChatCompletion> {
    // `stream` first, then the spread: see usageRecord (billing/usage-record.ts).
    return this.client.complete({ stream: false, ...this.params(request) }, request.cancellation);
  }

  stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    // Usage is always asked for upstream: the cost of a stream is computed from it.
    return this.client.stream({ stream: true, stream_options: { include_usage: true }, ...this.params(request) }, request.cancellation);
  }

  /**
   * `POST {baseUrl}/embeddings` on the client of chat completions (the OpenAI SDK's fetch
   * plumbing cost more CPU than the rest of the call: bench/README.md, "Embeddings"). Asks for
   * base64 and decodes it exactly; a compatible server that answers floats anyway is read too.
   */
  async embed(request: EmbeddingRequest): Promise<EmbeddingResult> {
    const body = {
      model: request.model.upstreamModel,
      input: request.input,
      encoding_format: 'base64',
      ...(request.dimensions !== undefined ? { dimensions: request.dimensions } : {}),
    };
    const response = (await this.client.embed(body, request.cancellation)) as { data?: unknown; usage?: { prompt_tokens?: unknown } } | null;
    const data = Array.isArray(response?.data) ? [...(response.data as Array<{ index?: unknown; embedding?: unknown }>)] : [];
    // In input order, whatever order the server listed them in.
    data.sort((a, b) => Number(a.index) - Number(b.index));
    const promptTokens = response?.usage?.prompt_tokens;
    return { vectors: data.map((item) => toVector(item.embedding)), ...(typeof promptTokens === 'number' ? { promptTokens } : {}) };
  }

  private params(request: ProviderRequest) {
    return toOpenAiParams(request, Boolean(this.options.baseUrl));
  }
}
