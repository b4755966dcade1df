import type { Message, RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import type OpenAI from 'openai';
import type { Cancellation } from '../common/cancellation';
import type { ModelDefinition } from '../models/model-catalog';

/**
 * The lingua franca between the chat module and providers is OpenAI's wire format: the
 * OpenAI adapter passes it through, the others translate to and from it.
 */
export type ChatMessage = OpenAI.Chat.ChatCompletionMessageParam;
export type ChatCompletion = OpenAI.Chat.ChatCompletion;
export type ChatCompletionChunk = OpenAI.Chat.ChatCompletionChunk;
export type FunctionTool = OpenAI.Chat.ChatCompletionFunctionTool;
export type CompletionUsage = OpenAI.CompletionUsage;

/** A part of a message's content as clients send it (and conversations store it). */
export type ContentPart =
  | { type: 'text'; text: string }
  | { type: 'image_url'; image_url: { url: string; detail?: 'auto' | 'low' | 'high' } }
  | { type: 'file'; file: { file_data?: string; file_id?: string; filename?: string } }
  | { type: 'input_audio'; input_audio: { data: string; format: 'wav' | 'mp3' } };

/**
 * A request that came in a provider's own wire format, beside its chat translation: a
 * deployment of that provider sends it as it came (nothing lost in translation); any other
 * provider gets the translation. Anthropic's Messages API is the one such format so far.
 */
export interface NativeRequest {
  anthropic: {
    /** The Messages body as the client sent it (validated; fields Anthropic would refuse or bill apart left out). */
    body: Record<string, unknown>;
    /** The client's `anthropic-beta` flags; the adapter forwards those it knows. */
    beta: string[];
  };
  /** Told what an Anthropic deployment answered, in Anthropic's format, when the native body was sent. */
  answer?: NativeAnswer;
}

export interface NativeAnswer {
  /** A plain call's message, as Anthropic sent it. */
  message(message: Message): void;
  /** Each event of a streamed call, as Anthropic sent it, before the chunks made of it are yielded. */
  event(event: RawMessageStreamEvent): void;
}

export interface ProviderRequest {
  model: ModelDefinition;
  messages: ChatMessage[];
  tools?: FunctionTool[];
  temperature?: number;
  /** Always set: the wallet hold covers exactly this many output tokens. */
  maxTokens: number;
  /** Which name the client gave the cap, if any; OpenAI-compatible servers differ in what they accept. */
  maxTokensField?: 'max_tokens' | 'max_completion_tokens';
  /** Other OpenAI parameters (`top_p`, `stop`, `seed`, `tool_choice`, ...), forwarded where the provider has them. */
  extra: Record<string, unknown>;
  /**
   * Aborted when the client goes away, at the stop's drain deadline, or when the attempt times
   * out: the upstream call must stop. An adapter over an SDK hands it `cancellation.signal`.
   */
  cancellation: Cancellation;
  /** The request in a provider's own format, for a deployment of that provider (see NativeRequest). */
  native?: NativeRequest;
}

/**
 * A request as ProvidersService takes it: the cancellation is each upstream attempt's own (see
 * ProvidersService.withTimeout), and the deployment (its `model`) is the router's choice.
 */
export type ModelCall = Omit<ProviderRequest, 'cancellation'> & {
  /** Tried, in order, when none of `model`'s deployments can answer (the catalog's fallbacks, or the request's `models`). */
  fallbacks?: ModelDefinition[];
  /** Tokens the call may use (prompt and output cap): taken from a deployment's tpm budget. */
  budgetTokens?: number;
  /** Told of every attempt and of the one that answered: the billing prices the call at its deployment. */
  route?: RouteObserver;
};

/** Who an attempt goes to: the catalog model, and that model as the deployment serves it (provider, upstream name, prices). */
export interface AttemptTarget {
  model: ModelDefinition;
  served: ModelDefinition;
  label: string;
}

export interface RouteObserver {
  /** An attempt is about to be sent; if the client leaves during it, its prompt is charged at `served`'s prices. */
  attempting(target: AttemptTarget): void;
  /** The attempt answered (a completion, or a stream's first chunk): the call is billed at its prices. */
  answered(target: AttemptTarget): void;
}

/** An embeddings call as an adapter gets it: the inputs are texts or token arrays, never both. */
export interface EmbeddingRequest {
  /** The deployment's model: its provider and upstream name. */
  model: ModelDefinition;
  input: string[] | number[][];
  /** Asked for fewer dimensions than the model's native size (only where the model allows it). */
  dimensions?: number;
  cancellation: Cancellation;
}

/** The vectors, one per input in order, exactly as the provider sent them (float32), and the tokens it billed, if it said. */
export interface EmbeddingResult {
  vectors: Float32Array[];
  promptTokens?: number;
}

/** An embeddings call as ProvidersService takes it (see ModelCall). */
export type EmbeddingCall = Omit<EmbeddingRequest, 'cancellation'> & Pick<ModelCall, 'fallbacks' | 'budgetTokens' | 'route'>;

/**
 * One upstream provider. `stream` yields OpenAI chunks and, when the provider reports it,
 * a last chunk with `usage` (cost is computed from it). Errors are thrown as they come
 * (SDK errors, aborts); `upstream-errors.ts` maps them to our API errors.
 */
export interface ProviderAdapter {
  complete(request: ProviderRequest): Promise<ChatCompletion>;
  stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk>;
  /**
   * Refuses, before any money is held, what the provider cannot honour and would otherwise
   * change the answer's shape: a parameter (code `unsupported_parameter`) or a content part
   * of the client's messages (code `unsupported_content`), as `ApiError.badRequest`.
   */
  checkRequest?(extra: Record<string, unknown>, messages?: ChatMessage[]): void;
  /** The input tokens of a native request as the provider counts them (its own endpoint); undefined when it has none. */
  countTokens?(request: { model: ModelDefinition; native: NativeRequest; signal: AbortSignal }): Promise<number | undefined>;
  /** Embeddings (`POST /v1/embeddings`), for providers that make them. */
  embed?(request: EmbeddingRequest): Promise<EmbeddingResult>;
}
