import { GoogleGenAI, type GenerateContentParameters } from '@google/genai';
import { toUnitLength, toVector } from '../embedding-vectors';
import type { ChatCompletion, ChatCompletionChunk, ChatMessage, EmbeddingRequest, EmbeddingResult, ProviderAdapter, ProviderRequest } from '../provider-adapter';
import { CallGuard } from './errors';
import { tracing } from '../../telemetry/tracing';
import { checkGeminiRequest, toGeminiRequest } from './request';
import { toChatCompletion } from './response';
import { GeminiStreamTranslator } from './stream';

/** The most inputs one `batchEmbedContents` call takes. */
const GEMINI_EMBED_BATCH = 100;

export interface GoogleAdapterOptions {
  apiKey: string;
  /** Another endpoint speaking the Gemini API (a proxy, a test server); Google's when unset. */
  baseUrl?: string;
  /** How long the upstream may stay silent: until the answer (or a stream's first event), and between stream events. */
  timeoutMs: number;
}

/**
 * Gemini models through the Gemini Developer API, with the official SDK: OpenAI requests are
 * translated to `generateContent` (`request.ts`) and the answers back to OpenAI completions
 * (`response.ts`) and chunks (`stream.ts`); `errors.ts` holds the call's timer and error shapes.
 *
 * The SDK makes exactly one HTTP request per call: no SDK retries (retries are ours, before
 * the first chunk only), no automatic continuation and no automatic function calling. Its
 * own `timeout` is not used, because it bounds a whole stream (a long answer would be cut)
 * and surfaces as an `AbortError` that looks like the client going away; this adapter keeps
 * its own inactivity timer instead and throws a `TimeoutError` when it fires.
 */
export class GoogleAdapter implements ProviderAdapter {
  private readonly client: GoogleGenAI;

  constructor(private readonly options: GoogleAdapterOptions) {
    this.client = new GoogleGenAI({
      apiKey: options.apiKey,
      vertexai: false,
      httpOptions: { ...(options.baseUrl ? { baseUrl: options.baseUrl } : {}), ...fetchOverride() },
    });
  }

  checkRequest(extra: Record<string, unknown>, messages: ChatMessage[] = []): void {
    checkGeminiRequest(extra, messages);
  }

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const params = toGeminiRequest(request);
    const guard = new CallGuard(request.cancellation.signal, this.options.timeoutMs);
    try {
      const response = await this.client.models.generateContent(withSignal(params, guard.signal));
      return toChatCompletion(response, request);
    } catch (error) {
      throw guard.explain(error);
    } finally {
      guard.close();
    }
  }

  /**
   * `models.embedContent`, which the SDK sends as `batchEmbedContents`: one request per input
   * (`outputDimensionality` for `dimensions`), in batches of at most 100 (Gemini's bound; OpenAI
   * takes 2048 inputs), sent together under one timer. A shortened Gemini vector is not of unit
   * length (Google asks the caller to normalise it): it is, as OpenAI's shortened ones are.
   * Gemini reports no token count: the caller bills its own. Texts only (token arrays are
   * OpenAI's tokenizer's: the embeddings service refuses them for other providers).
   */
  async embed(request: EmbeddingRequest): Promise<EmbeddingResult> {
    const texts = request.input.map((item) => (typeof item === 'string' ? item : ''));
    const batches = Array.from({ length: Math.ceil(texts.length / GEMINI_EMBED_BATCH) }, (_, i) => texts.slice(i * GEMINI_EMBED_BATCH, (i + 1) * GEMINI_EMBED_BATCH));
    const native = request.model.embedding?.dimensions;
    const shortened = request.dimensions !== undefined && request.dimensions !== native;
    const guard = new CallGuard(request.cancellation.signal, this.options.timeoutMs);
    try {
      const answers = await Promise.all(
        batches.map((batch) =>
          this.client.models.embedContent({
            model: request.model.upstreamModel,
            contents: batch.map((text) => ({ role: 'user', parts: [{ text }] })),
            config: { abortSignal: guard.signal, ...(request.dimensions !== undefined ? { outputDimensionality: request.dimensions } : {}) },
          }),
        ),
      );
      const vectors = answers.flatMap((response) => (response.embeddings ?? []).map((embedding) => toVector(embedding.values)));
      return { vectors: shortened ? vectors.map(toUnitLength) : vectors };
    } catch (error) {
      throw guard.explain(error);
    } finally {
      guard.close();
    }
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const params = toGeminiRequest(request);
    const translator = new GeminiStreamTranslator(request);
    const guard = new CallGuard(request.cancellation.signal, this.options.timeoutMs);
    try {
      const events = await this.client.models.generateContentStream(withSignal(params, guard.signal));
      const iterator = events[Symbol.asyncIterator]();
      for (;;) {
        guard.arm();
        const next = await iterator.next();
        // The clock only runs while waiting for the upstream, not while the consumer is slow.
        guard.disarm();
        if (next.done) break;
        yield* translator.push(next.value);
      }
      yield* translator.finish();
    } catch (error) {
      throw guard.explain(error);
    } finally {
      // Ends the HTTP response too when the consumer stopped early.
      guard.close();
    }
  }
}

/**
 * Under Node the SDK hands fetch a dispatcher that delegates to undici's global dispatcher,
 * which it looks up on `globalThis`. Inside a vm context (Jest's test environment) that
 * global belongs to the outer realm and every call would fail with "Undici globalDispatcher
 * is not available"; there only, the SDK gets the context's own fetch instead (with Node's
 * default header and body timeouts of 300 s). Plain Node keeps the SDK's own path.
 */
function fetchOverride(): { fetch?: typeof fetch } {
  if (typeof Headers !== 'undefined') new Headers(); // Node initializes undici lazily
  const dispatcher = (globalThis as Record<symbol, unknown>)[Symbol.for('undici.globalDispatcher.1')];
  if (typeof (dispatcher as { dispatch?: unknown } | undefined)?.dispatch === 'function') return {};
  return { fetch: (input, init) => fetch(input, init) };
}

/** The call's own signal (the caller's, our timer's) rides in the request's config. */
function withSignal(params: GenerateContentParameters, signal: AbortSignal): GenerateContentParameters {
  // With tracing on, the attempt's traceparent rides along too.
  const traced = tracing.withTraceHeaders<Record<string, string> | undefined>(undefined);
  const httpOptions = traced && { httpOptions: { ...params.config?.httpOptions, headers: { ...params.config?.httpOptions?.headers, ...traced } } };
  return { ...params, config: { ...params.config, abortSignal: signal, ...httpOptions } };
}
