import { createHash } from 'node:crypto';
import { decode } from 'gpt-tokenizer';
import type { ChatMessage, FunctionTool, ProviderRequest } from '../provider-adapter';
import { countTextTokens, encodeText } from '../tokens';
import { answerFromPassages, answerFromWebResults, DOCUMENT_SEARCH_TOOL, isSmallTalk, WEB_SEARCH_TOOL } from './document-answers';
import { isPlainObject, valueForSchema } from './schema-values';

// What the simulator answers a request, before it is shaped as a completion or a stream:
// the text or tool call of each choice, as the request's options ask.

/** One choice's answer. */
export type Reply =
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
export function simulate(request: ProviderRequest, options: SimulatorOptions): Reply[] {
  const last = request.messages[request.messages.length - 1];
  const lastText = textOf(last);
  const tool = chosenTool(request, options, last, lastText);
  if (tool) {
    const userText = lastUserText(request.messages);
    return Array.from({ length: options.n }, (_, index) => toolCallReply(tool, userText, request.maxTokens, index));
  }
  return Array<Reply>(options.n).fill(textReply(request, options, last, lastText));
}

/**
 * The tool to call, if any: `auto` calls the tool the last user message names, else the
 * assistant's file_search when it is offered and the message is not small talk (a newcomer
 * who asks about an uploaded document gets an answer from it, not an echo); `required` and a
 * named choice always call one (the named, else the best match, else the first offered);
 * `none` never does.
 */
function chosenTool(request: ProviderRequest, options: SimulatorOptions, last: ChatMessage | undefined, lastText: string): FunctionTool | undefined {
  const { mode, names } = options.toolChoice;
  const offered = (request.tools ?? []).filter((tool) => tool.type === 'function');
  const allowed = names ? offered.filter((tool) => names.includes(tool.function.name)) : offered;
  if (mode === 'none' || allowed.length === 0) return undefined;
  if (mode === 'required') return mentionedTool(allowed, lastUserText(request.messages)) ?? allowed[0];
  if (last?.role !== 'user') return undefined;
  return mentionedTool(allowed, lastText) ?? (isSmallTalk(lastText) ? undefined : allowed.find((tool) => tool.function.name === DOCUMENT_SEARCH_TOOL));
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
      ? toolResultAnswer(request.messages, last, lastText)
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
 * The answer after a tool ran: from the documents' sentences that match the question when
 * file_search found passages, else the tool's result as it came.
 */
function toolResultAnswer(messages: ChatMessage[], last: ChatMessage, result: string): string {
  const callId = (last as { tool_call_id?: string }).tool_call_id;
  const caller = messages.findLast((message) => message.role === 'assistant' && message.tool_calls?.some((call) => call.id === callId));
  const call = caller?.role === 'assistant' ? caller.tool_calls?.find((candidate) => candidate.id === callId) : undefined;
  if (call?.type === 'function' && call.function.name === DOCUMENT_SEARCH_TOOL) {
    const answer = answerFromPassages(lastUserText(messages), result);
    if (answer) return `[simulator] From your documents: ${answer}`;
  }
  if (call?.type === 'function' && call.function.name === WEB_SEARCH_TOOL) {
    const answer = answerFromWebResults(result);
    if (answer) return `[simulator] From the web: ${answer}`;
  }
  return `[simulator] The tool returned: ${excerpt(result, 400)}`;
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

export function hash(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
