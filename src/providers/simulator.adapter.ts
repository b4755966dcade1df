import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { decode } from 'gpt-tokenizer';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatMessage,
  FunctionTool,
  ProviderAdapter,
  ProviderRequest,
} from './provider-adapter';
import { countPromptTokensAsync, countTextTokens, encodeText } from './tokens';

type ChunkDelta = ChatCompletionChunk['choices'][number]['delta'];
type FinishReason = ChatCompletionChunk['choices'][number]['finish_reason'];
type TokenLogprob = NonNullable<NonNullable<ChatCompletion['choices'][number]['logprobs']>['content']>[number];

type Reply =
  | { kind: 'text'; text: string; finishReason: 'stop' | 'length' }
  | { kind: 'tool_call'; id: string; name: string; arguments: string; finishReason: 'tool_calls' | 'length' };

/** What the client asked of the answer's shape, read from the forwarded OpenAI fields. */
export interface SimulatorOptions {
  toolChoice: { mode: 'auto' | 'none' | 'required'; names?: string[] };
  responseFormat: { type: 'text' } | { type: 'json_object' } | { type: 'json_schema'; schema: unknown };
  stop: string[];
  n: number;
  /** Alternatives per token when log-probabilities were asked for; undefined when not. */
  topLogprobs?: number;
}

/** OpenAI's bounds: `n` up to 128, four stop sequences, 20 alternatives per token. */
const MAX_CHOICES = 128;
const MAX_STOP_SEQUENCES = 4;
const MAX_TOP_LOGPROBS = 20;

/**
 * A built-in model for development without provider keys. Deterministic: it says that it
 * is a simulator and echoes the last message; when the request offers a function tool
 * whose name the last user message mentions, it calls that tool. It honours what changes
 * the answer's shape (`tool_choice`, `response_format`, `stop`, `n`, `logprobs`), so that
 * clients relying on them work before any key is set. Tokens are counted with the real
 * tokenizer, so billing works exactly as with a real provider.
 */
export class SimulatorAdapter implements ProviderAdapter {
  constructor(private readonly options: { wordDelayMs: number }) {}

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const options = simulatorOptions(request.extra);
    const replies = simulate(request, options);
    // The choices are alike: each distinct text is scored once, however many choices there are.
    const logprobsOf = remembered((text: string) => tokenLogprobs(text, options.topLogprobs ?? 0));
    return {
      id: completionId(request),
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: request.model.id,
      choices: replies.map((reply, index) =>
        reply.kind === 'text'
          ? {
              index,
              message: { role: 'assistant', content: reply.text, refusal: null },
              finish_reason: reply.finishReason,
              logprobs: options.topLogprobs === undefined ? null : { content: logprobsOf(reply.text), refusal: null },
            }
          : {
              index,
              message: {
                role: 'assistant',
                content: null,
                refusal: null,
                tool_calls: [{ id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }],
              },
              finish_reason: reply.finishReason,
              logprobs: null,
            },
      ),
      usage: await usageOf(request, replies),
    };
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const options = simulatorOptions(request.extra);
    const replies = simulate(request, options);
    const id = completionId(request);
    const created = Math.floor(Date.now() / 1000);
    const chunk = (index: number, delta: ChunkDelta, finishReason: FinishReason = null, logprobs: TokenLogprob[] | null = null) =>
      ({
        id,
        object: 'chat.completion.chunk',
        created,
        model: request.model.id,
        choices: [{ index, delta, finish_reason: finishReason, logprobs: logprobs && { content: logprobs, refusal: null } }],
      }) satisfies ChatCompletionChunk;

    // The choices advance together, one piece each per round, as OpenAI interleaves them.
    const piecesOf = remembered((reply: Reply) => streamPieces(reply, options.topLogprobs));
    const pieces = replies.map(piecesOf);
    for (let index = 0; index < replies.length; index++) yield chunk(index, { role: 'assistant', content: '' });
    for (let round = 0; round <= Math.max(...pieces.map((list) => list.length)); round++) {
      if (this.options.wordDelayMs > 0) await sleep(this.options.wordDelayMs, undefined, { signal: request.cancellation.signal });
      if (request.cancellation.aborted) throw request.cancellation.reason;
      for (let index = 0; index < replies.length; index++) {
        const piece = pieces[index][round];
        if (piece) yield chunk(index, piece.delta, null, piece.logprobs ?? null);
        else if (round === pieces[index].length) yield chunk(index, {}, replies[index].finishReason);
      }
    }
    yield { id, object: 'chat.completion.chunk', created, model: request.model.id, choices: [], usage: await usageOf(request, replies) };
  }
}

/**
 * The options of a request, from its forwarded fields. Validation is the chat service's:
 * anything malformed that reaches the simulator is read as absent, never thrown on.
 */
export function simulatorOptions(extra: Record<string, unknown>): SimulatorOptions {
  const stop = typeof extra.stop === 'string' ? [extra.stop] : Array.isArray(extra.stop) ? extra.stop : [];
  const n = extra.n;
  const top = extra.top_logprobs;
  return {
    toolChoice: toolChoiceOf(extra.tool_choice),
    responseFormat: responseFormatOf(extra.response_format),
    stop: stop.filter((sequence): sequence is string => typeof sequence === 'string' && sequence.length > 0).slice(0, MAX_STOP_SEQUENCES),
    n: Number.isInteger(n) && (n as number) >= 1 ? Math.min(n as number, MAX_CHOICES) : 1,
    topLogprobs:
      extra.logprobs === true ? (Number.isInteger(top) && (top as number) >= 0 ? Math.min(top as number, MAX_TOP_LOGPROBS) : 0) : undefined,
  };
}

function toolChoiceOf(choice: unknown): SimulatorOptions['toolChoice'] {
  if (choice === 'none' || choice === 'required') return { mode: choice };
  const named = choice as { type?: unknown; function?: { name?: unknown }; allowed_tools?: { mode?: unknown; tools?: unknown } } | null;
  if (named?.type === 'function' && typeof named.function?.name === 'string') return { mode: 'required', names: [named.function.name] };
  if (named?.type === 'allowed_tools' && Array.isArray(named.allowed_tools?.tools)) {
    const names = named.allowed_tools.tools
      .map((tool: { function?: { name?: unknown } } | null) => tool?.function?.name)
      .filter((name): name is string => typeof name === 'string');
    return { mode: named.allowed_tools.mode === 'required' ? 'required' : 'auto', names };
  }
  return { mode: 'auto' };
}

function responseFormatOf(format: unknown): SimulatorOptions['responseFormat'] {
  const asked = format as { type?: unknown; json_schema?: { schema?: unknown } } | null;
  if (asked?.type === 'json_object') return { type: 'json_object' };
  if (asked?.type === 'json_schema') return { type: 'json_schema', schema: asked.json_schema?.schema ?? {} };
  return { type: 'text' };
}

/** The replies of the `n` choices: alike, but for the ids of tool calls. */
function simulate(request: ProviderRequest, options: SimulatorOptions): Reply[] {
  const last = request.messages[request.messages.length - 1];
  const lastText = textOf(last);
  const tool = chosenTool(request, options, last, lastText);
  if (tool) {
    const userText = lastUserText(request.messages);
    return Array.from({ length: options.n }, (_, index) => toolCallReply(tool, userText, request.maxTokens, index));
  }
  return Array<Reply>(options.n).fill(textReply(request, options, last, lastText));
}

/** `compute`, remembered by its argument. */
function remembered<K, V>(compute: (key: K) => V): (key: K) => V {
  const known = new Map<K, V>();
  return (key) => {
    if (!known.has(key)) known.set(key, compute(key));
    return known.get(key)!;
  };
}

/**
 * The tool to call, if any: `auto` calls the tool the last user message names (as before),
 * `required` and a named choice always call one (the named, else the best match, else the
 * first offered), `none` never does.
 */
function chosenTool(request: ProviderRequest, options: SimulatorOptions, last: ChatMessage | undefined, lastText: string): FunctionTool | undefined {
  const { mode, names } = options.toolChoice;
  const offered = (request.tools ?? []).filter((tool) => tool.type === 'function');
  const allowed = names ? offered.filter((tool) => names.includes(tool.function.name)) : offered;
  if (mode === 'none' || allowed.length === 0) return undefined;
  if (mode === 'required') return mentionedTool(allowed, lastUserText(request.messages)) ?? allowed[0];
  return last?.role === 'user' ? mentionedTool(allowed, lastText) : undefined;
}

/** Strings in the arguments get the user's last words, as a search query would. */
function toolCallReply(tool: FunctionTool, userText: string, maxTokens: number, choice: number): Reply {
  const name = tool.function.name;
  const value = valueForSchema(tool.function.parameters ?? { type: 'object' }, { text: () => excerpt(userText, 200) });
  // Arguments are always an object, even for a tool whose schema does not say so.
  const args = JSON.stringify(isPlainObject(value) ? value : {});
  // The first choice keeps the id it always had; the others differ, as OpenAI's do.
  const id = `call_sim_${hash(choice === 0 ? `${name}:${args}` : `${choice}:${name}:${args}`).slice(0, 24)}`;
  const cut = withinTokens(args, Math.max(0, maxTokens - countTextTokens(name)));
  return { kind: 'tool_call', id, name, arguments: cut.text, finishReason: cut.cut ? 'length' : 'tool_calls' };
}

function textReply(request: ProviderRequest, options: SimulatorOptions, last: ChatMessage | undefined, lastText: string): Reply {
  const said =
    last?.role === 'tool'
      ? `[simulator] The tool returned: ${excerpt(lastText, 400)}`
      : `[simulator] This answer comes from the built-in simulator, not a real model: no API key is configured ` +
        `for the provider of ${request.model.id} (${request.model.provider}). You said: "${excerpt(lastText, 400)}"`;
  const format = options.responseFormat;
  const text =
    format.type === 'json_schema'
      ? JSON.stringify(valueForSchema(format.schema, { text: (key) => `simulated ${key ?? 'text'}` }))
      : format.type === 'json_object'
        ? JSON.stringify(jsonObjectAnswer(request.messages, said))
        : said;
  const cut = withinTokens(cutAtStop(text, options.stop), request.maxTokens);
  return { kind: 'text', text: cut.text, finishReason: cut.cut ? 'length' : 'stop' };
}

/**
 * JSON mode carries no schema: clients are told to describe the object in the prompt. When a
 * message holds a JSON Schema of an object, the answer follows it; otherwise it is
 * `{"answer": ...}` with the simulator's usual text.
 */
function jsonObjectAnswer(messages: ChatMessage[], said: string): unknown {
  const text = (key: string | undefined) => `simulated ${key ?? 'text'}`;
  for (const message of messages.slice(-SCHEMA_SEARCH_MESSAGES).reverse()) {
    if (message.role === 'assistant' || message.role === 'tool') continue;
    const schema = schemaInText(textOf(message));
    if (schema) return valueForSchema(schema, { text });
  }
  return { answer: said };
}

/** Where a schema is looked for in a prompt: its last messages, their beginnings, a few candidate objects each. */
const SCHEMA_SEARCH_MESSAGES = 4;
const SCHEMA_SEARCH_CHARS = 32_768;
const SCHEMA_SEARCH_CANDIDATES = 32;

/** The first JSON object in the text that looks like the schema of an object (`type: "object"` or `properties`). */
export function schemaInText(fullText: string): Record<string, unknown> | undefined {
  const text = fullText.slice(0, SCHEMA_SEARCH_CHARS);
  let from = 0;
  for (let tried = 0; tried < SCHEMA_SEARCH_CANDIDATES; tried++) {
    const start = text.indexOf('{', from);
    if (start < 0) return undefined;
    const end = balancedEnd(text, start);
    if (end < 0) return undefined;
    try {
      const parsed: unknown = JSON.parse(text.slice(start, end + 1));
      if (isPlainObject(parsed) && (parsed.type === 'object' || isPlainObject(parsed.properties))) return parsed;
    } catch {
      // Not JSON (prose in braces, a template): the next brace may start one.
    }
    from = start + 1;
  }
  return undefined;
}

/** Where the object opening at `start` closes, skipping braces inside strings; -1 if it never does. */
function balancedEnd(text: string, start: number): number {
  let depth = 0;
  let inString = false;
  for (let at = start; at < text.length; at++) {
    const char = text[at];
    if (inString) {
      if (char === '\\') at++;
      else if (char === '"') inString = false;
    } else if (char === '"') inString = true;
    else if (char === '{') depth++;
    else if (char === '}' && --depth === 0) return at;
  }
  return -1;
}

/** The text up to (not including) the first occurrence of any stop sequence. */
export function cutAtStop(text: string, stop: string[]): string {
  let end = text.length;
  for (const sequence of stop) {
    const at = text.indexOf(sequence);
    if (at >= 0 && at < end) end = at;
  }
  return text.slice(0, end);
}

/** The longest o200k token: text beyond this many characters a token can never fit in `maxTokens`. */
const LONGEST_TOKEN_CHARS = 128;
function withinTokens(fullText: string, maxTokens: number): { text: string; cut: boolean } {
  const text = fullText.slice(0, maxTokens * LONGEST_TOKEN_CHARS + 1);
  const tokens = encodeText(text);
  return tokens.length <= maxTokens && text === fullText ? { text, cut: false } : { text: decode(tokens.slice(0, maxTokens)), cut: true };
}

/** Usage of all choices: the prompt once, every choice's output. */
async function usageOf(request: ProviderRequest, replies: Reply[]) {
  // The prompt may be megabytes: it is counted as the chat service counts it, without holding the event loop.
  const prompt = await countPromptTokensAsync(request.messages, request.tools);
  let completion = 0;
  for (const reply of replies) completion += countTextTokens(reply.kind === 'text' ? reply.text : `${reply.name}${reply.arguments}`);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

interface StreamPiece {
  delta: ChunkDelta;
  logprobs?: TokenLogprob[];
}

/** A reply as stream deltas: words of text (tokens, with their log-probabilities, when asked), or the whole tool call. */
function streamPieces(reply: Reply, topLogprobs: number | undefined): StreamPiece[] {
  if (reply.kind === 'tool_call') {
    return [{ delta: { tool_calls: [{ index: 0, id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }] } }];
  }
  if (topLogprobs === undefined) return reply.text.split(/(?<= )/).map((word) => ({ delta: { content: word } }));
  return tokenPieces(reply.text, topLogprobs);
}

/**
 * The text as pieces of whole characters, each with the log-probabilities of its tokens: a
 * character split across tokens (an emoji, a rare script) goes out with its last token.
 */
function tokenPieces(text: string, topLogprobs: number): StreamPiece[] {
  const entries = tokenLogprobs(text, topLogprobs);
  const tokens = encodeText(text);
  const pieces: StreamPiece[] = [];
  let sent = 0;
  let pending: number[] = [];
  tokens.forEach((token, position) => {
    pending.push(position);
    const piece = decode(pending.map((at) => tokens[at]));
    if (piece && text.startsWith(piece, sent)) {
      pieces.push({ delta: { content: piece }, logprobs: pending.map((at) => entries[at]) });
      sent += piece.length;
      pending = [];
    }
  });
  if (sent < text.length || pending.length > 0) {
    pieces.push({ delta: { content: text.slice(sent) }, logprobs: pending.map((at) => entries[at]) });
  }
  return pieces;
}

/** Frequent tokens, offered as the alternatives a real model would have weighed. */
const ALTERNATIVES = [
  ' the', ' a', ',', '.', ' and', ' to', ' of', ' in', ' is', ' that', ' it', ' for',
  ' you', ' on', ' with', ' as', ' this', ' be', ' are', ' was', ' I', ' not', ' or', ' at',
];

/**
 * Plausible log-probabilities, one entry per token of the text, shaped as OpenAI's. The
 * chosen token is always the likeliest (probability above one half); the alternatives share
 * what is left, halving each time, so that the probabilities never add up to more than one.
 */
export function tokenLogprobs(text: string, topLogprobs: number): TokenLogprob[] {
  return encodeText(text).map((id, position) => {
    const token = decode([id]);
    const seed = smallHash(`${position}:${token}`);
    const probability = 1 - (1e-4 + (seed % 10_000) / 25_000);
    const alternatives = ALTERNATIVES.filter((candidate) => candidate !== token);
    const offset = seed % alternatives.length;
    const top = [{ token, logprob: Math.log(probability), bytes: bytesOf(token) }];
    for (let rank = 1; rank < topLogprobs; rank++) {
      const alternative = alternatives[(offset + rank) % alternatives.length];
      top.push({ token: alternative, logprob: Math.log((1 - probability) / 2 ** rank), bytes: bytesOf(alternative) });
    }
    return { token, logprob: Math.log(probability), bytes: bytesOf(token), top_logprobs: topLogprobs === 0 ? [] : top };
  });
}

function bytesOf(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}

/** FNV-1a: a cheap, stable number per token, for log-probabilities that vary but never change. */
function smallHash(text: string): number {
  let value = 0x811c9dc5;
  for (let at = 0; at < text.length; at++) value = Math.imul(value ^ text.charCodeAt(at), 0x01000193) >>> 0;
  return value;
}

interface ValueOptions {
  /** The text of a string value, given its property name. */
  text: (key: string | undefined) => string;
}

/** Nesting beyond which optional properties are left out, and beyond which nothing more is generated. */
const OPTIONAL_DEPTH = 4;
const MAX_DEPTH = 24;
/**
 * Values and characters generated per schema at most: a hostile schema (`minItems` or
 * `minLength` of millions, nested) cannot blow up. An answer that long is cut at the
 * output cap anyway.
 */
const MAX_VALUES = 5_000;
const MAX_CHARS = 200_000;

/**
 * A value valid against a JSON Schema, as structured output and tool arguments need it:
 * types (the first that is not null), required and listed properties (never extra ones),
 * enums and consts, nested objects and arrays (with their item bounds), `anyOf`/`oneOf`
 * (the first non-null option), `allOf`, local `$ref`s, string lengths and formats, number
 * bounds. Deterministic; bounded in depth and size whatever the schema.
 */
export function valueForSchema(schema: unknown, options: ValueOptions): unknown {
  const state = { root: schema, left: MAX_VALUES, charsLeft: MAX_CHARS, options };
  return generate(schema, state, 0, undefined, 0);
}

type Schema = Record<string, unknown>;
interface GenerationState {
  root: unknown;
  left: number;
  charsLeft: number;
  options: ValueOptions;
}

function generate(input: unknown, state: GenerationState, depth: number, key: string | undefined, ordinal: number): unknown {
  state.left -= 1;
  if (depth > MAX_DEPTH || state.left < 0 || input === false) return null;
  if (typeof input !== 'object' || input === null || Array.isArray(input)) return stringFor({}, state, state.options.text(key), ordinal);
  const schema = input as Schema;
  if (typeof schema.$ref === 'string') return generate(resolveRef(state.root, schema.$ref), state, depth + 1, key, ordinal);
  if ('const' in schema) return schema.const;
  if (Array.isArray(schema.enum) && schema.enum.length > 0) return schema.enum[ordinal % schema.enum.length];
  for (const keyword of ['anyOf', 'oneOf'] as const) {
    const options = schema[keyword];
    if (Array.isArray(options) && options.length > 0) {
      const chosen = options.find((option) => !isNullSchema(option)) ?? options[0];
      return generate(chosen, state, depth + 1, key, ordinal);
    }
  }
  if (Array.isArray(schema.allOf) && schema.allOf.length > 0) {
    const parts = schema.allOf.map((part) => generate(part, state, depth + 1, key, ordinal));
    return parts.every(isPlainObject) ? Object.assign({}, ...parts) : parts[0];
  }
  switch (typeOf(schema)) {
    case 'null':
      return null;
    case 'boolean':
      return true;
    case 'integer':
      return numberFor(schema, true, ordinal);
    case 'number':
      return numberFor(schema, false, ordinal);
    case 'array':
      return arrayFor(schema, state, depth, key);
    case 'object':
      return objectFor(schema, state, depth);
    default:
      return stringFor(schema, state, state.options.text(key), ordinal);
  }
}

function typeOf(schema: Schema): string | undefined {
  const type = Array.isArray(schema.type) ? (schema.type.find((entry) => entry !== 'null') ?? schema.type[0]) : schema.type;
  if (typeof type === 'string') return type;
  if (isPlainObject(schema.properties) || Array.isArray(schema.required)) return 'object';
  if (schema.items !== undefined || schema.prefixItems !== undefined) return 'array';
  return undefined;
}

function isNullSchema(schema: unknown): boolean {
  const type = (schema as Schema | null)?.type;
  return type === 'null' || (Array.isArray(type) && type.length === 1 && type[0] === 'null');
}

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** A local reference (`#/definitions/X`, `#/$defs/X`, `#`); anything else reads as an empty schema. */
function resolveRef(root: unknown, ref: string): unknown {
  if (!ref.startsWith('#')) return {};
  let at: unknown = root;
  for (const raw of ref.slice(1).split('/').slice(1)) {
    const part = decodeURIComponent(raw).replace(/~1/g, '/').replace(/~0/g, '~');
    if (!isPlainObject(at) && !Array.isArray(at)) return {};
    if (!Object.prototype.hasOwnProperty.call(at, part)) return {};
    at = (at as Record<string, unknown>)[part];
  }
  return at;
}

function objectFor(schema: Schema, state: GenerationState, depth: number): Record<string, unknown> {
  const properties = isPlainObject(schema.properties) ? schema.properties : {};
  const required = new Set((Array.isArray(schema.required) ? schema.required : []).filter((name): name is string => typeof name === 'string'));
  const names = depth < OPTIONAL_DEPTH ? [...new Set([...Object.keys(properties), ...required])] : [...required];
  // fromEntries, not assignment: a property named "__proto__" must stay a property.
  return Object.fromEntries(names.map((name) => [name, generate(properties[name] ?? {}, state, depth + 1, name, 0)]));
}

function arrayFor(schema: Schema, state: GenerationState, depth: number, key: string | undefined): unknown[] {
  const min = typeof schema.minItems === 'number' && schema.minItems > 0 ? Math.ceil(schema.minItems) : 1;
  const max = typeof schema.maxItems === 'number' && schema.maxItems >= 0 ? Math.floor(schema.maxItems) : Number.POSITIVE_INFINITY;
  // Tuples: `prefixItems` (2020-12) or an array of `items` (draft-07, as zod-to-json-schema writes them).
  const prefix = Array.isArray(schema.prefixItems) ? schema.prefixItems : Array.isArray(schema.items) ? schema.items : [];
  const rest = Array.isArray(schema.items) ? (schema.additionalItems ?? {}) : (schema.items ?? {});
  const count = Math.max(Math.min(Math.max(min, prefix.length), max), 0);
  const items: unknown[] = [];
  // Items differ by their ordinal, so that `uniqueItems` holds.
  for (let index = 0; index < count && state.left > 0; index++) {
    items.push(generate(index < prefix.length ? prefix[index] : rest, state, depth + 1, key, index));
  }
  return items;
}

function numberFor(schema: Schema, integer: boolean, ordinal: number): number {
  const bound = (value: unknown) => (typeof value === 'number' && Number.isFinite(value) ? value : undefined);
  const [minimum, maximum] = [bound(schema.minimum), bound(schema.maximum)];
  const [above, below] = [bound(schema.exclusiveMinimum), bound(schema.exclusiveMaximum)];
  const multiple = bound(schema.multipleOf);
  const step = multiple !== undefined && multiple > 0 ? multiple : integer ? 1 : undefined;
  const fits = (value: number) =>
    (minimum === undefined || value >= minimum) &&
    (maximum === undefined || value <= maximum) &&
    (above === undefined || value > above) &&
    (below === undefined || value < below);
  const lower = minimum ?? above;
  const upper = maximum ?? below;
  // The usual value first, then values at and between the bounds, each put on the step.
  const candidates = [1 + ordinal, minimum, maximum, lower !== undefined && upper !== undefined ? (lower + upper) / 2 : undefined]
    .concat(above !== undefined ? [above + 1] : [], below !== undefined ? [below - 1] : [], [0])
    .filter((value): value is number => value !== undefined);
  for (const candidate of candidates) {
    for (const value of step === undefined ? [candidate] : [Math.ceil(candidate / step) * step, Math.floor(candidate / step) * step]) {
      if (fits(value)) return value;
    }
  }
  return lower ?? upper ?? 1;
}

const FORMATS: Record<string, string> = {
  'date-time': '2025-01-01T00:00:00Z',
  date: '2025-01-01',
  time: '00:00:00Z',
  duration: 'P1D',
  email: 'simulator@example.com',
  hostname: 'example.com',
  ipv4: '192.0.2.1',
  ipv6: '2001:db8::1',
  uri: 'https://example.com/simulator',
  url: 'https://example.com/simulator',
  uuid: '00000000-0000-4000-8000-000000000000',
};

function stringFor(schema: Schema, state: GenerationState, text: string, ordinal: number): string {
  const formatted = typeof schema.format === 'string' ? FORMATS[schema.format] : undefined;
  let value = formatted ?? (ordinal > 0 ? `${text} ${ordinal + 1}` : text);
  const [min, max] = [schema.minLength, schema.maxLength].map((bound) => (typeof bound === 'number' && bound >= 0 ? Math.floor(bound) : undefined));
  if (max !== undefined && [...value].length > max) value = [...value].slice(0, max).join('');
  if (min !== undefined && [...value].length < min) value = value.padEnd(value.length + Math.min(min - [...value].length, state.charsLeft), '.');
  value = value.slice(0, Math.max(state.charsLeft, 0));
  state.charsLeft -= value.length;
  return value;
}

function mentionedTool(tools: FunctionTool[], text: string): FunctionTool | undefined {
  return tools.find((tool) => text.includes(tool.function.name));
}

function lastUserText(messages: ChatMessage[]): string {
  for (let at = messages.length - 1; at >= 0; at--) if (messages[at].role === 'user') return textOf(messages[at]);
  return '';
}

function textOf(message: ChatMessage | undefined): string {
  const content = (message as { content?: unknown } | undefined)?.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part: { type?: string; text?: string }) => (part.type === 'text' ? (part.text ?? '') : '[image]'))
      .join(' ');
  }
  return '';
}

function excerpt(text: string, max: number): string {
  // Only the beginning of a long text can be shown: it alone is flattened.
  const flat = text.slice(0, max * 8).replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/** Deterministic: the same messages give the same id. Long texts weigh in by their length and ends, not all their bytes. */
function completionId(request: ProviderRequest): string {
  const fingerprint = JSON.stringify(request.messages, (_key, value: unknown) =>
    typeof value === 'string' && value.length > 1_024 ? `${value.length}:${value.slice(0, 512)}${value.slice(-512)}` : value,
  );
  return `chatcmpl-sim${hash(fingerprint).slice(0, 24)}`;
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
