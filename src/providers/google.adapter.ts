import { randomInt } from 'node:crypto';
import {
  FunctionCallingConfigMode,
  GoogleGenAI,
  type Content,
  type FunctionCallingConfig,
  type GenerateContentConfig,
  type GenerateContentParameters,
  type GenerateContentResponse,
  type GenerateContentResponseUsageMetadata,
  type LogprobsResult,
  type Part,
  type Tool,
} from '@google/genai';
import type OpenAI from 'openai';
import { ApiError } from '../common/errors/api-error';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatMessage,
  CompletionUsage,
  ProviderAdapter,
  ProviderRequest,
} from './provider-adapter';

export interface GoogleAdapterOptions {
  apiKey: string;
  /** Another endpoint speaking the Gemini API (a proxy, a test server); Google's when unset. */
  baseUrl?: string;
  /** How long the upstream may stay silent: until the answer (or a stream's first event), and between stream events. */
  timeoutMs: number;
}

type FinishReason = ChatCompletion['choices'][number]['finish_reason'];
type ChunkChoice = ChatCompletionChunk['choices'][number];
type ToolCallDelta = NonNullable<ChunkChoice['delta']['tool_calls']>[number];
type MessageToolCall = OpenAI.Chat.ChatCompletionMessageFunctionToolCall;

/**
 * Gemini models through the Gemini Developer API, with the official SDK: OpenAI requests are
 * translated to `generateContent` and the answers back to OpenAI completions and chunks.
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
    checkParameters(extra);
    // Content parts are checked message by message: the same translation the call makes.
    messages.forEach((message, index) => {
      if (message.role === 'user') userParts(message.content, `messages.${index}`);
    });
  }

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const params = toGeminiRequest(request);
    const guard = new CallGuard(request.signal, this.options.timeoutMs);
    try {
      const response = await this.client.models.generateContent(withSignal(params, guard.signal));
      return toChatCompletion(response, request);
    } catch (error) {
      throw guard.explain(error);
    } finally {
      guard.close();
    }
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const params = toGeminiRequest(request);
    const translator = new GeminiStreamTranslator(request);
    const guard = new CallGuard(request.signal, this.options.timeoutMs);
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

/** The upstream stayed silent longer than the configured timeout (maps to `upstream_timeout`). */
export class GoogleTimeoutError extends Error {
  constructor(timeoutMs: number) {
    super(`The Gemini API timed out: no answer within ${timeoutMs} ms.`);
    this.name = 'TimeoutError';
  }
}

/**
 * An error answer of the Gemini API (an HTTP error, or an error event inside a stream), in the
 * shape `upstream-errors.ts` reads: `status`, `error.message` (Google's own message, not the
 * SDK's JSON dump) and `headers['retry-after']` (from Google's RetryInfo on a 429).
 */
export class GoogleApiError extends Error {
  readonly status: number;
  readonly error: { code?: number; message?: string; status?: string; details?: unknown[] };
  readonly headers: Record<string, string>;

  constructor(status: number, error: GoogleApiError['error'], options: { cause: unknown }) {
    super(error.message ?? `HTTP ${status}`, options);
    this.name = 'GoogleApiError';
    this.status = status;
    this.error = error;
    this.headers = {};
    const retryDelay = retryDelaySeconds(error.details);
    if (retryDelay !== undefined) this.headers['retry-after'] = String(retryDelay);
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

// ---------------------------------------------------------------------------------------
// Request: OpenAI -> Gemini
// ---------------------------------------------------------------------------------------

/**
 * Thought signatures of Gemini 3 and later cannot ride along in OpenAI messages, and those
 * models refuse replayed function calls without one; Google documents this value for calls
 * whose signature is not available. Gemini 1.x and 2.x need no signature and get none.
 */
export const SKIP_THOUGHT_SIGNATURE = 'skip_thought_signature_validator';

/** What Gemini cannot honour and would change the answer's shape is refused. */
export function checkParameters(extra: Record<string, unknown>): void {
  const refuse = (message: string, param: string) => {
    throw ApiError.badRequest(message, param, 'unsupported_parameter');
  };
  if (Array.isArray(extra.modalities) && extra.modalities.includes('audio')) refuse('Gemini models answer in text here: audio output is not supported.', 'modalities');
  if (extra.audio !== undefined && extra.audio !== null) refuse('Gemini models answer in text here: audio output is not supported.', 'audio');
  const formatType = (extra.response_format as { type?: unknown } | null | undefined)?.type;
  if (formatType !== undefined && !['text', 'json_object', 'json_schema'].includes(formatType as string)) {
    refuse(`response_format.type ${JSON.stringify(formatType)} is not supported; use text, json_object or json_schema.`, 'response_format.type');
  }
}

export function toGeminiRequest(request: ProviderRequest): GenerateContentParameters {
  checkParameters(request.extra);
  const { systemInstruction, contents } = toContents(request.messages, needsThoughtSignatures(request.model.upstreamModel));
  const config: GenerateContentConfig = {
    maxOutputTokens: request.maxTokens,
    // One HTTP request per call: retries, continuation and tool execution are not the SDK's job here.
    automaticContinuation: false,
    automaticFunctionCalling: { disable: true },
  };
  if (systemInstruction) config.systemInstruction = systemInstruction;
  if (request.temperature !== undefined) config.temperature = request.temperature;

  const tools = toTools(request.tools);
  if (tools) {
    config.tools = tools;
    const functionCallingConfig = toFunctionCallingConfig(request.extra.tool_choice);
    if (functionCallingConfig) config.toolConfig = { functionCallingConfig };
  }
  Object.assign(config, toGenerationSettings(request.extra));
  return { model: request.model.upstreamModel, contents, config };
}

function withSignal(params: GenerateContentParameters, signal: AbortSignal): GenerateContentParameters {
  return { ...params, config: { ...params.config, abortSignal: signal } };
}

function needsThoughtSignatures(upstreamModel: string): boolean {
  return !/(^|\/)gemini-[12](\.|-)/i.test(upstreamModel);
}

function toContents(messages: ChatMessage[], signFunctionCalls: boolean): { systemInstruction?: Content; contents: Content[] } {
  const systemParts: Part[] = [];
  const contents: Content[] = [];
  const toolNames = new Map<string, string>();
  const add = (role: 'user' | 'model', parts: Part[]) => {
    if (parts.length === 0) return;
    const last = contents[contents.length - 1];
    if (last?.role === role) last.parts!.push(...parts);
    else contents.push({ role, parts });
  };

  messages.forEach((message, index) => {
    const at = `messages.${index}`;
    switch (message.role) {
      case 'system':
      case 'developer':
        systemParts.push(...textParts(textOf(message.content)));
        break;
      case 'user':
        add('user', userParts(message.content, at));
        break;
      case 'assistant': {
        const parts: Part[] = [];
        if (typeof message.content === 'string') parts.push(...textParts(message.content));
        else for (const part of message.content ?? []) parts.push(...textParts(part.type === 'text' ? part.text : part.refusal));
        let signed = !signFunctionCalls;
        const calls = (message.tool_calls ?? [])
          .filter((call): call is MessageToolCall => call.type === 'function')
          .map((call) => ({ id: call.id, ...call.function }));
        if (message.function_call) calls.push({ id: '', ...message.function_call });
        for (const call of calls) {
          if (call.id) toolNames.set(call.id, call.name);
          const part: Part = { functionCall: { name: call.name, args: parseArguments(call.arguments) } };
          // Only the first function call of a turn carries a signature.
          if (!signed) part.thoughtSignature = SKIP_THOUGHT_SIGNATURE;
          signed = true;
          parts.push(part);
        }
        add('model', parts);
        break;
      }
      case 'tool': {
        const name = toolNames.get(message.tool_call_id);
        if (!name) {
          throw ApiError.badRequest(
            `${at}.tool_call_id ${JSON.stringify(message.tool_call_id)} answers no tool call of an earlier assistant message.`,
            `${at}.tool_call_id`,
          );
        }
        add('user', [{ functionResponse: { name, response: toolResponse(textOf(message.content)) } }]);
        break;
      }
      case 'function':
        add('user', [{ functionResponse: { name: message.name, response: toolResponse(message.content ?? '') } }]);
        break;
    }
  });
  return { systemInstruction: systemParts.length > 0 ? { parts: systemParts } : undefined, contents };
}

function userParts(content: OpenAI.Chat.ChatCompletionUserMessageParam['content'], at: string): Part[] {
  if (typeof content === 'string') return textParts(content);
  return content.flatMap((part, index): Part[] => {
    switch (part.type) {
      case 'text':
        return textParts(part.text);
      case 'image_url':
        return [imagePart(part.image_url.url, `${at}.content.${index}.image_url.url`)];
      case 'input_audio':
        return [{ inlineData: { mimeType: `audio/${part.input_audio.format}`, data: part.input_audio.data } }];
      case 'file':
        return [filePart(part.file, `${at}.content.${index}.file`)];
      default:
        throw ApiError.badRequest(
          `${at}.content.${index} is a ${JSON.stringify((part as { type?: unknown }).type)} part, which Gemini models cannot be sent.`,
          `${at}.content.${index}.type`,
        );
    }
  });
}

/** `data:` URLs travel inline; other URLs by reference, with the type guessed from the extension. */
function imagePart(url: string, param: string): Part {
  if (/^data:/i.test(url)) {
    const match = /^data:([^,]*),(.*)$/is.exec(url);
    if (!match) throw ApiError.badRequest(`${param} is not a valid data URL.`, param);
    const meta = match[1].split(';').map((item) => item.trim());
    const base64 = meta.slice(1).some((item) => item.toLowerCase() === 'base64');
    let data: string;
    try {
      data = base64 ? match[2].replace(/\s+/g, '') : Buffer.from(decodeURIComponent(match[2]), 'utf8').toString('base64');
    } catch {
      throw ApiError.badRequest(`${param} is not a valid data URL.`, param);
    }
    return { inlineData: { mimeType: meta[0] || 'image/jpeg', data } };
  }
  return { fileData: { fileUri: url, mimeType: mimeTypeOf(url) } };
}

/** OpenAI's file part: its base64 data URL travels inline (a PDF, or any type Gemini reads); file ids mean nothing here. */
function filePart(file: { file_data?: string; file_id?: string }, at: string): Part {
  if (file?.file_data === undefined && file?.file_id !== undefined) {
    throw ApiError.badRequest(
      `${at}.file_id: this service stores no files; send the file itself as file_data (a base64 data: URL).`,
      `${at}.file_id`,
      'unsupported_content',
    );
  }
  const match = /^data:([^;,]+)((?:;[^;,]*)*),(.*)$/is.exec(file?.file_data ?? '');
  if (!match || !match[2].split(';').some((item) => item.trim().toLowerCase() === 'base64')) {
    throw ApiError.badRequest(`${at}.file_data must be a base64 data: URL (data:application/pdf;base64,...).`, `${at}.file_data`, 'unsupported_content');
  }
  return { inlineData: { mimeType: match[1].trim().toLowerCase(), data: match[3].replace(/\s+/g, '') } };
}

const MIME_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  webp: 'image/webp',
  heic: 'image/heic',
  heif: 'image/heif',
  bmp: 'image/bmp',
  svg: 'image/svg+xml',
  pdf: 'application/pdf',
};

export function mimeTypeOf(url: string): string {
  let path = url;
  try {
    path = new URL(url).pathname;
  } catch {
    path = url.split(/[?#]/)[0];
  }
  const extension = /\.([a-z0-9]+)$/i.exec(path)?.[1]?.toLowerCase() ?? '';
  return MIME_TYPES[extension] ?? 'image/jpeg';
}

function textParts(text: string | null | undefined): Part[] {
  return text ? [{ text }] : [];
}

function textOf(content: string | Array<{ type: string; text?: string }> | null | undefined): string {
  if (typeof content === 'string') return content;
  return (content ?? []).map((part) => (part.type === 'text' ? (part.text ?? '') : '')).join('');
}

/** Arguments as the model wrote them; what does not parse to an object becomes `{}`. */
function parseArguments(text: string): Record<string, unknown> {
  const parsed = parseJson(text);
  return isPlainObject(parsed) ? parsed : {};
}

function toolResponse(text: string): Record<string, unknown> {
  const parsed = parseJson(text);
  return isPlainObject(parsed) ? parsed : { content: text };
}

function toTools(tools: ProviderRequest['tools']): Tool[] | undefined {
  const declarations = (tools ?? [])
    .filter((tool) => tool.type === 'function')
    .map((tool) => ({
      name: tool.function.name,
      ...(tool.function.description !== undefined ? { description: tool.function.description } : {}),
      // JSON Schema as it came: Gemini reads it natively (no conversion to its OpenAPI subset).
      ...(tool.function.parameters !== undefined ? { parametersJsonSchema: tool.function.parameters } : {}),
    }));
  return declarations.length > 0 ? [{ functionDeclarations: declarations }] : undefined;
}

function toFunctionCallingConfig(toolChoice: unknown): FunctionCallingConfig | undefined {
  if (toolChoice === 'auto') return { mode: FunctionCallingConfigMode.AUTO };
  if (toolChoice === 'none') return { mode: FunctionCallingConfigMode.NONE };
  if (toolChoice === 'required') return { mode: FunctionCallingConfigMode.ANY };
  if (!isPlainObject(toolChoice)) return undefined;
  const choice = toolChoice as {
    type?: unknown;
    function?: { name?: unknown };
    allowed_tools?: { mode?: unknown; tools?: unknown };
  };
  if (choice.type === 'function' && typeof choice.function?.name === 'string') {
    return { mode: FunctionCallingConfigMode.ANY, allowedFunctionNames: [choice.function.name] };
  }
  if (choice.type === 'allowed_tools' && Array.isArray(choice.allowed_tools?.tools)) {
    const names = (choice.allowed_tools.tools as Array<{ function?: { name?: unknown } }>)
      .map((tool) => tool?.function?.name)
      .filter((name): name is string => typeof name === 'string');
    // VALIDATED: calls limited to the names, but the model may answer in text too.
    const mode = choice.allowed_tools.mode === 'required' ? FunctionCallingConfigMode.ANY : FunctionCallingConfigMode.VALIDATED;
    return { mode, allowedFunctionNames: names };
  }
  return undefined;
}

/** The OpenAI sampling and format parameters that Gemini has; other extras are OpenAI's only. */
function toGenerationSettings(extra: Record<string, unknown>): GenerateContentConfig {
  const config: GenerateContentConfig = {};
  const number = (value: unknown): value is number => typeof value === 'number' && Number.isFinite(value);
  if (number(extra.top_p)) config.topP = extra.top_p;
  if (typeof extra.stop === 'string') config.stopSequences = [extra.stop];
  else if (Array.isArray(extra.stop) && extra.stop.length > 0 && extra.stop.every((s) => typeof s === 'string')) {
    config.stopSequences = extra.stop as string[];
  }
  if (number(extra.seed)) config.seed = extra.seed;
  // 0 is OpenAI's default and means no penalty; several Gemini models refuse the field outright.
  if (number(extra.presence_penalty) && extra.presence_penalty !== 0) config.presencePenalty = extra.presence_penalty;
  if (number(extra.frequency_penalty) && extra.frequency_penalty !== 0) config.frequencyPenalty = extra.frequency_penalty;
  if (number(extra.n) && extra.n > 1) config.candidateCount = extra.n;
  if (extra.logprobs === true) {
    config.responseLogprobs = true;
    if (number(extra.top_logprobs) && extra.top_logprobs > 0) config.logprobs = extra.top_logprobs;
  }

  const format = extra.response_format as { type?: unknown; json_schema?: { schema?: unknown } } | undefined;
  if (format?.type === 'json_object') config.responseMimeType = 'application/json';
  if (format?.type === 'json_schema') {
    config.responseMimeType = 'application/json';
    if (format.json_schema?.schema !== undefined) config.responseJsonSchema = format.json_schema.schema;
  }
  return config;
}

// ---------------------------------------------------------------------------------------
// Response: Gemini -> OpenAI
// ---------------------------------------------------------------------------------------

export function toChatCompletion(response: GenerateContentResponse, request: ProviderRequest): ChatCompletion {
  const blocked = Boolean(response.promptFeedback?.blockReason);
  const candidates = response.candidates?.length ? response.candidates : [{ index: 0 }];
  const completion: ChatCompletion = {
    id: completionId(response.responseId),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: request.model.id,
    choices: candidates.map((candidate, position) => {
      const { text, calls } = readParts(candidate.content?.parts);
      const toolCalls: MessageToolCall[] = calls.map((call) => ({ id: toolCallId(), type: 'function', function: call }));
      return {
        index: candidate.index ?? position,
        message: {
          role: 'assistant',
          content: text.length > 0 || toolCalls.length === 0 ? text : null,
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: toFinishReason(candidate.finishReason, toolCalls.length > 0, blocked),
        logprobs: toLogprobs(candidate.logprobsResult, request.extra),
      };
    }),
  };
  if (response.usageMetadata) completion.usage = toUsage(response.usageMetadata);
  return completion;
}

/**
 * Turns the events of `streamGenerateContent` into OpenAI chunks: a role chunk when the first
 * event arrives, text and function calls as they come (a function call arrives whole, so its
 * chunk carries the complete arguments), one chunk with the finish reasons, then the usage.
 */
export class GeminiStreamTranslator {
  private id = '';
  private readonly created = Math.floor(Date.now() / 1000);
  private started = false;
  private blocked = false;
  private usage?: GenerateContentResponseUsageMetadata;
  private readonly choices = new Map<number, { toolCalls: number; finishReason?: string }>();

  constructor(private readonly request: ProviderRequest) {}

  *push(event: GenerateContentResponse): Generator<ChatCompletionChunk> {
    if (!this.started) {
      this.started = true;
      this.id = completionId(event.responseId);
      const count = Math.max(1, event.candidates?.length ?? 1, Number(this.request.extra.n) || 1);
      for (let index = 0; index < count; index++) this.choices.set(index, { toolCalls: 0 });
      yield this.chunk([...this.choices.keys()].map((index) => choice(index, { role: 'assistant', content: '' })));
    }
    if (event.usageMetadata) this.usage = event.usageMetadata;
    if (event.promptFeedback?.blockReason) this.blocked = true;

    const deltas: ChunkChoice[] = [];
    (event.candidates ?? []).forEach((candidate, position) => {
      const index = candidate.index ?? position;
      const state = this.choices.get(index) ?? { toolCalls: 0 };
      this.choices.set(index, state);
      if (candidate.finishReason) state.finishReason = candidate.finishReason;
      const { text, calls } = readParts(candidate.content?.parts);
      const toolCalls: ToolCallDelta[] = calls.map((call) => ({
        index: state.toolCalls++,
        id: toolCallId(),
        type: 'function',
        function: call,
      }));
      if (text.length > 0 || toolCalls.length > 0) {
        const delta = choice(index, { ...(text.length > 0 ? { content: text } : {}), ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) });
        delta.logprobs = toLogprobs(candidate.logprobsResult, this.request.extra);
        deltas.push(delta);
      }
    });
    if (deltas.length > 0) yield this.chunk(deltas);
  }

  *finish(): Generator<ChatCompletionChunk> {
    if (!this.started) throw new Error('The Gemini stream ended without any event.');
    const states = [...this.choices.entries()];
    if (!this.blocked && !states.some(([, state]) => state.finishReason)) {
      throw new Error('The Gemini stream ended before its finish reason: the answer is incomplete.');
    }
    yield this.chunk(
      states.map(([index, state]) => choice(index, {}, toFinishReason(state.finishReason, state.toolCalls > 0, this.blocked))),
    );
    if (this.usage) {
      yield { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.request.model.id, choices: [], usage: toUsage(this.usage) };
    }
  }

  private chunk(choices: ChunkChoice[]): ChatCompletionChunk {
    return { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.request.model.id, choices };
  }
}

function choice(index: number, delta: ChunkChoice['delta'], finishReason: ChunkChoice['finish_reason'] = null): ChunkChoice {
  return { index, delta, finish_reason: finishReason, logprobs: null };
}

type Logprobs = NonNullable<ChatCompletion['choices'][number]['logprobs']>;

/** Gemini's log probabilities in OpenAI's shape, when the client asked for them (and Gemini sent them). */
export function toLogprobs(result: LogprobsResult | undefined, extra: Record<string, unknown>): Logprobs | null {
  if (extra.logprobs !== true || !result?.chosenCandidates) return null;
  const entry = (candidate: { token?: string; logProbability?: number }) => ({
    token: candidate.token ?? '',
    logprob: candidate.logProbability ?? 0,
    bytes: [...Buffer.from(candidate.token ?? '', 'utf8')],
  });
  return {
    content: result.chosenCandidates.map((chosen, step) => ({
      ...entry(chosen),
      top_logprobs: (result.topCandidates?.[step]?.candidates ?? []).map(entry),
    })),
    refusal: null,
  };
}

/** Visible text (thoughts skipped) and function calls of a candidate's parts. */
function readParts(parts: Part[] | undefined): { text: string; calls: Array<{ name: string; arguments: string }> } {
  let text = '';
  const calls: Array<{ name: string; arguments: string }> = [];
  for (const part of parts ?? []) {
    if (part.thought) continue;
    if (typeof part.text === 'string') text += part.text;
    if (part.functionCall) calls.push({ name: part.functionCall.name ?? '', arguments: JSON.stringify(part.functionCall.args ?? {}) });
  }
  return { text, calls };
}

export function toFinishReason(reason: string | undefined, hasToolCalls: boolean, blocked = false): FinishReason {
  if (blocked) return 'content_filter';
  if (hasToolCalls) return 'tool_calls';
  switch (reason) {
    case undefined:
    case 'STOP':
    case 'FINISH_REASON_UNSPECIFIED':
      return 'stop';
    case 'MAX_TOKENS':
    case 'CONTINUATION':
      return 'length';
    default:
      // SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, MALFORMED_FUNCTION_CALL, ...
      return 'content_filter';
  }
}

/** Thinking tokens are billed as output, as OpenAI's reasoning tokens are. */
export function toUsage(metadata: GenerateContentResponseUsageMetadata): CompletionUsage {
  const prompt = (metadata.promptTokenCount ?? 0) + (metadata.toolUsePromptTokenCount ?? 0);
  const thoughts = metadata.thoughtsTokenCount ?? 0;
  const completion = (metadata.candidatesTokenCount ?? 0) + thoughts;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: metadata.cachedContentTokenCount ?? 0 },
    completion_tokens_details: { reasoning_tokens: thoughts },
  };
}

function completionId(responseId: string | undefined): string {
  return `chatcmpl-${responseId || randomId(29)}`;
}

function toolCallId(): string {
  return `call_${randomId(24)}`;
}

const ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function randomId(length: number): string {
  let id = '';
  for (let i = 0; i < length; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}

// ---------------------------------------------------------------------------------------
// Cancellation, timeout and errors
// ---------------------------------------------------------------------------------------

/** One upstream call: the caller's signal, an inactivity timer, and a way to end the connection. */
class CallGuard {
  readonly signal: AbortSignal;
  private readonly controller = new AbortController();
  private timer?: NodeJS.Timeout;
  private timedOut = false;

  constructor(
    private readonly callerSignal: AbortSignal,
    private readonly timeoutMs: number,
  ) {
    this.signal = AbortSignal.any([callerSignal, this.controller.signal]);
    this.arm();
  }

  arm(): void {
    this.disarm();
    if (!(this.timeoutMs > 0)) return;
    this.timer = setTimeout(() => {
      this.timedOut = true;
      this.controller.abort();
    }, this.timeoutMs);
    this.timer.unref?.();
  }

  disarm(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }

  close(): void {
    this.disarm();
    this.controller.abort();
  }

  /** The error to throw: the caller's abort reason, our timeout, or Google's error in a readable shape. */
  explain(error: unknown): unknown {
    if (this.callerSignal.aborted) {
      // The reason says why: an AbortError when the client left, a TimeoutError from AbortSignal.timeout.
      const reason = this.callerSignal.reason as { name?: unknown } | undefined;
      return typeof reason?.name === 'string' ? reason : error;
    }
    if (this.timedOut) return new GoogleTimeoutError(this.timeoutMs);
    return toGoogleApiError(error) ?? error;
  }
}

/** The SDK's ApiError carries `status` and Google's error body as a JSON string in `message`. */
function toGoogleApiError(error: unknown): GoogleApiError | undefined {
  const e = error as { name?: unknown; status?: unknown; message?: unknown };
  if (e?.name !== 'ApiError' || typeof e.status !== 'number') return undefined;
  const message = typeof e.message === 'string' ? e.message : '';
  const body = parseJson(message.slice(Math.max(0, message.indexOf('{')))) as { error?: GoogleApiError['error'] } | undefined;
  const details = isPlainObject(body?.error) ? body.error : { message };
  let status = e.status;
  // Google answers a wrong API key with 400 INVALID_ARGUMENT: it is our credentials, not the client's request.
  if (status === 400 && errorReasons(details.details).includes('API_KEY_INVALID')) status = 401;
  return new GoogleApiError(status, { ...details, message: details.message || message || `HTTP ${status}` }, { cause: error });
}

function errorReasons(details: unknown[] | undefined): string[] {
  return (details ?? []).map((detail) => (detail as { reason?: unknown })?.reason).filter((r): r is string => typeof r === 'string');
}

/** Google's RetryInfo detail (`"retryDelay": "37s"`), in whole seconds. */
function retryDelaySeconds(details: unknown[] | undefined): number | undefined {
  for (const detail of details ?? []) {
    const d = detail as { '@type'?: unknown; retryDelay?: unknown };
    if (typeof d?.['@type'] === 'string' && d['@type'].endsWith('google.rpc.RetryInfo') && typeof d.retryDelay === 'string') {
      const seconds = Number.parseFloat(d.retryDelay);
      if (Number.isFinite(seconds) && seconds > 0) return Math.ceil(seconds);
    }
  }
  return undefined;
}

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}
