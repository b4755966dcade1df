import { randomBytes } from 'node:crypto';
import { ApiError } from '../common/errors/api-error';
import { MAX_USER_ID_LENGTH } from '../conversations/dto/conversation-requests.dto';
import { assistantOfModel } from '../models/assistant-models';
import type { ContentPart } from '../providers/provider-adapter';

/**
 * Translation of a Responses API request (`POST /v1/responses`) into the chat-completions
 * body that `ChatService` runs: the chat core is the one money path (hold, exact charge,
 * usage record, tool loop), this file only maps fields. What cannot be mapped faithfully is
 * refused with a 400 naming the field, never dropped silently.
 */

/** An input item as stored and listed (`GET /v1/responses/{id}/input_items`): the client's item, with an id. */
export type InputItem = Record<string, unknown> & { type: string; id: string };

/** `include` values accepted: each asks for an output item this service never produces, so there is nothing to leave out. */
const VACUOUS_INCLUDES = new Set([
  'reasoning.encrypted_content',
  'web_search_call.action.sources',
  'web_search_call.results',
  'file_search_call.results',
]);

/** Every top-level field of a Responses request this service reads; any other is refused (as OpenAI refuses unknown ones). */
const KNOWN_FIELDS = new Set([
  'model',
  'assistant_id',
  'input',
  'instructions',
  'tools',
  'tool_choice',
  'max_output_tokens',
  'temperature',
  'top_p',
  'text',
  'stream',
  'stream_options',
  'store',
  'previous_response_id',
  'conversation',
  'metadata',
  'user',
  'user_id',
  'subscription_id',
  'parallel_tool_calls',
  'include',
  'background',
  'truncation',
  'reasoning',
  'service_tier',
  'prompt_cache_key',
  'safety_identifier',
  'top_logprobs',
  'max_tool_calls',
  'prompt',
]);

/** OpenAI's metadata bounds: 16 pairs, keys up to 64 characters, values up to 512. */
const MAX_METADATA_PAIRS = 16;
const MAX_METADATA_KEY = 64;
const MAX_METADATA_VALUE = 512;

/** The request fields a Responses object repeats back to the client. */
export interface EchoedFields {
  instructions: string | null;
  max_output_tokens: number | null;
  metadata: Record<string, string>;
  parallel_tool_calls: boolean;
  previous_response_id: string | null;
  store: boolean;
  temperature: number | null;
  text: { format: Record<string, unknown> };
  tool_choice: unknown;
  tools: unknown[];
  top_p: number | null;
  truncation: 'auto' | 'disabled';
  user: string | null;
}

export interface ResponsesRequest {
  /** The chat-completions body, without `conversation_id` (the service adds it for stored responses). */
  chat: Record<string, unknown>;
  /** The input, as items with ids; `item_reference`s are still unresolved here. */
  input: InputItem[];
  stream: boolean;
  store: boolean;
  previousResponseId?: string;
  /** Our conversation id, from `conversation` (a string or `{id}`). */
  conversationId?: string;
  /** The assistant named by `assistant_id` or `model: "assistant/<slug>"`, if any. */
  assistantRef?: string;
  /** The server tools the request's hosted tools ask for: the assistant must offer them. */
  serverTools: Array<{ name: string; param: string }>;
  /** For each chat tool, its index in the request's `tools` (hosted tools are not chat tools). */
  toolIndexes: number[];
  echo: EchoedFields;
}

/** A new id with OpenAI's prefixes (`resp_`, `msg_`, `fc_`). */
export function newId(prefix: 'resp' | 'msg' | 'fc'): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

/**
 * Validates a Responses request and builds its chat body. `item_reference` input items must
 * have been replaced by the items they name before the chat body is built (`toChatMessages`).
 * `hostedTools`: the hosted tool types that map to an assistant's server tool, to its name
 * (`web_search_preview` -> `web_search`; ToolsService.hostedToolTypes, from the registered tools).
 */
export function parseResponsesRequest(raw: unknown, hostedTools: ReadonlyMap<string, string>): ResponsesRequest {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw ApiError.badRequest('The request body must be a JSON object.', undefined, 'invalid_body');
  }
  // An explicit null is an absent field, as OpenAI takes it (openai-python sends `None`s as null).
  const body = Object.fromEntries(Object.entries(raw).filter(([, value]) => value !== null)) as Record<string, unknown>;
  for (const key of Object.keys(body)) {
    if (!KNOWN_FIELDS.has(key)) throw ApiError.badRequest(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
  refuseUnsupported(body);

  const model = optionalString(body, 'model');
  const assistantId = optionalString(body, 'assistant_id');
  const stream = optionalBoolean(body, 'stream') ?? false;
  const store = optionalBoolean(body, 'store') ?? true;
  const instructions = optionalString(body, 'instructions');
  const previousResponseId = optionalString(body, 'previous_response_id');
  const conversationId = conversationOf(body.conversation);
  if (previousResponseId !== undefined && conversationId !== undefined) {
    throw ApiError.badRequest('Send previous_response_id or conversation, not both.', 'conversation');
  }
  if (!store && (previousResponseId !== undefined || conversationId !== undefined)) {
    throw ApiError.badRequest(
      'store: false cannot continue a stored response or conversation here: the turn is always added to the conversation. ' +
        'Send the history in input instead.',
      'store',
      'unsupported_parameter',
    );
  }
  if (body.input === undefined && previousResponseId === undefined && conversationId === undefined) {
    throw ApiError.badRequest('input is required.', 'input');
  }
  const input = inputItemsOf(body.input);
  const assistantRef = assistantId ?? assistantOfModel(model);
  const { tools, serverTools, toolIndexes } = toolsOf(body.tools, assistantRef !== undefined, hostedTools);
  const metadata = metadataOf(body.metadata);
  const maxOutputTokens = body.max_output_tokens;
  const format = formatOf(body.text);
  // Checked here, not only by the chat core: a stored response's conversation is created with it first.
  const user = endUserOf(body, 'user');
  const userId = endUserOf(body, 'user_id') ?? user;

  const chat: Record<string, unknown> = {
    model,
    assistant_id: assistantId,
    // Built by the service once item references are resolved.
    messages: undefined,
    tools: tools.length > 0 ? tools : undefined,
    tool_choice: toolChoiceOf(body.tool_choice),
    max_completion_tokens: maxOutputTokens,
    temperature: body.temperature,
    top_p: body.top_p,
    response_format: format.chat,
    stream: stream || undefined,
    // The Responses stream ends with the usage, so the chat stream must carry it.
    stream_options: stream ? { include_usage: true } : undefined,
    user_id: userId,
    subscription_id: body.subscription_id,
    // OpenAI refuses parallel_tool_calls without tools.
    parallel_tool_calls: tools.length > 0 ? body.parallel_tool_calls : undefined,
    reasoning_effort: (body.reasoning as { effort?: unknown } | undefined)?.effort ?? undefined,
  };
  return {
    chat: Object.fromEntries(Object.entries(chat).filter(([, value]) => value !== undefined)),
    input,
    stream,
    store,
    previousResponseId,
    conversationId,
    assistantRef,
    serverTools,
    toolIndexes,
    echo: {
      instructions: instructions ?? null,
      max_output_tokens: typeof maxOutputTokens === 'number' ? maxOutputTokens : null,
      metadata,
      parallel_tool_calls: body.parallel_tool_calls !== false,
      previous_response_id: previousResponseId ?? null,
      store,
      temperature: typeof body.temperature === 'number' ? body.temperature : null,
      text: { format: format.echo },
      tool_choice: body.tool_choice ?? 'auto',
      tools: Array.isArray(body.tools) ? body.tools : [],
      top_p: typeof body.top_p === 'number' ? body.top_p : null,
      truncation: body.truncation === 'auto' ? 'auto' : 'disabled',
      user: user ?? null,
    },
  };
}

/**
 * The chat messages of a request: its instructions as a system message, then the input
 * items (with item references already replaced by the items they name).
 */
export function toChatMessages(instructions: string | null, items: readonly InputItem[]): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = instructions ? [{ role: 'system', content: instructions }] : [];
  items.forEach((item, index) => {
    const at = `input.${index}`;
    switch (item.type) {
      case 'message':
        messages.push(messageOf(item, at));
        break;
      case 'function_call': {
        const call = { id: requiredString(item, 'call_id', at), type: 'function', function: { name: requiredString(item, 'name', at), arguments: requiredString(item, 'arguments', at) } };
        // Calls made side by side are one assistant message with several tool calls.
        const last = messages[messages.length - 1];
        if (last?.role === 'assistant' && (last.tool_calls === undefined || Array.isArray(last.tool_calls))) {
          last.tool_calls = [...((last.tool_calls as unknown[] | undefined) ?? []), call];
        } else {
          messages.push({ role: 'assistant', content: null, tool_calls: [call] });
        }
        break;
      }
      case 'function_call_output':
        messages.push({ role: 'tool', tool_call_id: requiredString(item, 'call_id', at), content: outputTextOf(item.output, `${at}.output`) });
        break;
      default:
        throw ApiError.badRequest(`${at}.type "${item.type}" is not supported.`, `${at}.type`, 'unsupported_input_item');
    }
  });
  return messages;
}

/** Fields this service cannot honour: a 400 naming each, rather than an answer that ignores it. */
function refuseUnsupported(body: Record<string, unknown>): void {
  const refuse = (param: string, why: string) => {
    throw ApiError.badRequest(`${param} is not supported: ${why}`, param, 'unsupported_parameter');
  };
  if (body.background === true) refuse('background', 'responses run while the request is open; send background: false or leave it out.');
  if (body.prompt !== undefined) refuse('prompt', 'reusable prompts are not stored here; use an assistant (assistant_id) for a stored prompt with tools.');
  if (body.max_tool_calls !== undefined) refuse('max_tool_calls', "an assistant's max_tool_iterations bounds its server tool calls.");
  if (body.top_logprobs !== undefined && body.top_logprobs !== 0) refuse('top_logprobs', 'log probabilities are not returned by the Responses API here.');
  if (body.service_tier !== undefined && body.service_tier !== 'auto' && body.service_tier !== 'default') {
    refuse('service_tier', 'only "auto" and "default" are served.');
  }
  if (body.truncation !== undefined && body.truncation !== 'auto' && body.truncation !== 'disabled') {
    throw ApiError.badRequest('truncation must be "auto" or "disabled".', 'truncation');
  }
  const reasoning = body.reasoning as { summary?: unknown; effort?: unknown } | undefined;
  if (reasoning !== undefined) {
    if (typeof reasoning !== 'object' || Array.isArray(reasoning)) throw ApiError.badRequest('reasoning must be an object.', 'reasoning');
    if (reasoning.summary !== undefined && reasoning.summary !== null) refuse('reasoning.summary', 'reasoning summaries are not produced here.');
    if (reasoning.effort !== undefined && reasoning.effort !== null && typeof reasoning.effort !== 'string') {
      throw ApiError.badRequest('reasoning.effort must be a string such as "low", "medium" or "high".', 'reasoning.effort');
    }
  }
  if (body.parallel_tool_calls !== undefined && typeof body.parallel_tool_calls !== 'boolean') {
    throw ApiError.badRequest('parallel_tool_calls must be a boolean.', 'parallel_tool_calls');
  }
  // Forwarded to the provider as is (as chat completions forward it): checked here so that a wrong value is our 400, not the provider's.
  if (body.top_p !== undefined && (typeof body.top_p !== 'number' || !(body.top_p >= 0 && body.top_p <= 1))) {
    throw ApiError.badRequest('top_p must be a number from 0 to 1.', 'top_p');
  }
  if (body.include !== undefined) {
    if (!Array.isArray(body.include)) throw ApiError.badRequest('include must be an array of strings.', 'include');
    body.include.forEach((value: unknown, index) => {
      if (typeof value !== 'string' || !VACUOUS_INCLUDES.has(value)) refuse(`include.${index}`, `"${String(value)}" cannot be included here.`);
    });
  }
  const verbosity = (body.text as { verbosity?: unknown } | undefined)?.verbosity;
  if (verbosity !== undefined && verbosity !== null) refuse('text.verbosity', 'the answer length is set with max_output_tokens.');
}

function inputItemsOf(input: unknown): InputItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') {
    return [{ type: 'message', id: newId('msg'), role: 'user', content: [{ type: 'input_text', text: input }] }];
  }
  if (!Array.isArray(input)) throw ApiError.badRequest('input must be a string or an array of input items.', 'input');
  return input.map((item: unknown, index) => {
    if (typeof item !== 'object' || item === null || Array.isArray(item)) {
      throw ApiError.badRequest(`input.${index} must be an object.`, `input.${index}`);
    }
    const fields = item as Record<string, unknown>;
    // `{role, content}` without a type is a message (EasyInputMessage).
    const type = fields.type ?? (fields.role !== undefined ? 'message' : undefined);
    if (typeof type !== 'string') throw ApiError.badRequest(`input.${index}.type is required.`, `input.${index}.type`);
    const prefix = type === 'function_call' ? 'fc' : 'msg';
    return { ...fields, type, id: typeof fields.id === 'string' && fields.id.length > 0 ? fields.id : newId(prefix) };
  });
}

const MESSAGE_ROLES = ['user', 'system', 'developer', 'assistant'];

function messageOf(item: InputItem, at: string): Record<string, unknown> {
  const role = item.role;
  if (typeof role !== 'string' || !MESSAGE_ROLES.includes(role)) {
    throw ApiError.badRequest(`${at}.role must be one of ${MESSAGE_ROLES.join(', ')}.`, `${at}.role`);
  }
  const { content } = item;
  if (typeof content === 'string') return { role, content };
  if (!Array.isArray(content)) throw ApiError.badRequest(`${at}.content must be a string or an array of parts.`, `${at}.content`);
  const parts = content.map((part: unknown, index) => partOf(part, `${at}.content.${index}`));
  // Only user messages carry images and files in chat completions; the others are text.
  if (role !== 'user') {
    const nonText = parts.findIndex((part) => part.type !== 'text');
    if (nonText >= 0) throw ApiError.badRequest(`${at}.content.${nonText}: a ${role} message can only hold text.`, `${at}.content.${nonText}`);
    return { role, content: parts.map((part) => (part as { text: string }).text).join('') };
  }
  return { role, content: parts };
}

function partOf(raw: unknown, at: string): ContentPart {
  const part = (raw ?? {}) as Record<string, unknown>;
  switch (part.type) {
    case 'input_text':
    case 'output_text':
      return { type: 'text', text: requiredString(part, 'text', at) };
    case 'refusal':
      return { type: 'text', text: requiredString(part, 'refusal', at) };
    case 'input_image': {
      if (part.file_id !== undefined && part.file_id !== null) {
        throw ApiError.badRequest(`${at}.file_id: uploaded files are not stored here; send image_url (a URL or a data URL).`, `${at}.file_id`, 'unsupported_content');
      }
      const detail = part.detail as 'auto' | 'low' | 'high' | undefined;
      return { type: 'image_url', image_url: { url: requiredString(part, 'image_url', at), ...(detail ? { detail } : {}) } };
    }
    case 'input_file': {
      for (const field of ['file_id', 'file_url']) {
        if (part[field] !== undefined && part[field] !== null) {
          throw ApiError.badRequest(`${at}.${field}: only inline files are read here; send file_data (a base64 data URL) and filename.`, `${at}.${field}`, 'unsupported_content');
        }
      }
      const filename = typeof part.filename === 'string' ? part.filename : undefined;
      return { type: 'file', file: { file_data: requiredString(part, 'file_data', at), ...(filename ? { filename } : {}) } };
    }
    case 'input_audio': {
      const audio = (part.input_audio ?? {}) as { data?: unknown; format?: unknown };
      if (typeof audio.data !== 'string' || (audio.format !== 'wav' && audio.format !== 'mp3')) {
        throw ApiError.badRequest(`${at}.input_audio must be {data, format: "wav" | "mp3"}.`, `${at}.input_audio`);
      }
      return { type: 'input_audio', input_audio: { data: audio.data, format: audio.format } };
    }
    default:
      throw ApiError.badRequest(`${at}.type must be input_text, input_image, input_file or input_audio.`, `${at}.type`, 'unsupported_content');
  }
}

/** A function call's output: a string, or text parts (joined); images and files in an output are not carried by chat tools. */
function outputTextOf(output: unknown, at: string): string {
  if (typeof output === 'string') return output;
  if (Array.isArray(output)) {
    return output
      .map((part: unknown, index) => {
        const text = (part as { type?: unknown; text?: unknown } | null)?.type === 'input_text' ? (part as { text: unknown }).text : undefined;
        if (typeof text !== 'string') throw ApiError.badRequest(`${at}.${index}: only input_text parts can be a function's output here.`, `${at}.${index}`);
        return text;
      })
      .join('');
  }
  throw ApiError.badRequest(`${at} must be a string.`, at);
}

function toolsOf(
  raw: unknown,
  assistantMode: boolean,
  hostedTools: ReadonlyMap<string, string>,
): Pick<ResponsesRequest, 'serverTools' | 'toolIndexes'> & { tools: unknown[] } {
  if (raw === undefined) return { tools: [], serverTools: [], toolIndexes: [] };
  if (!Array.isArray(raw)) throw ApiError.badRequest('tools must be an array.', 'tools');
  const tools: unknown[] = [];
  const serverTools: ResponsesRequest['serverTools'] = [];
  const toolIndexes: number[] = [];
  raw.forEach((entry: unknown, index) => {
    const at = `tools.${index}`;
    const tool = (entry ?? {}) as Record<string, unknown>;
    const type = typeof tool.type === 'string' ? tool.type : '';
    if (type === 'function') {
      toolIndexes.push(index);
      tools.push({
        type: 'function',
        function: Object.fromEntries(
          Object.entries({ name: tool.name, description: tool.description, parameters: tool.parameters, strict: tool.strict }).filter(
            ([, value]) => value !== undefined && value !== null,
          ),
        ),
      });
      return;
    }
    const serverTool = hostedTools.get(type);
    if (serverTool === undefined) {
      const names = [...new Set(hostedTools.values())];
      const offered = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : names.join('');
      throw ApiError.badRequest(
        `${at}: the hosted tool "${type}" is not available here. Function tools are, and an assistant's ${offered}.`,
        `${at}.type`,
        'unsupported_tool',
      );
    }
    if (!assistantMode) {
      throw ApiError.badRequest(
        `The ${type} tool runs on the server and needs an assistant that has ${serverTool}: send assistant_id (or model "assistant/<slug>").`,
        at,
        'tool_requires_assistant',
      );
    }
    const stores = tool.vector_store_ids;
    if (Array.isArray(stores) && stores.length > 0) {
      throw ApiError.badRequest(
        `${at}.vector_store_ids: file_search searches the assistant's own documents here; send [] or leave it out.`,
        `${at}.vector_store_ids`,
        'unsupported_parameter',
      );
    }
    serverTools.push({ name: serverTool, param: at });
  });
  return { tools, serverTools, toolIndexes };
}

function toolChoiceOf(raw: unknown): unknown {
  if (raw === undefined || raw === 'auto' || raw === 'none' || raw === 'required') return raw;
  const choice = (raw ?? {}) as { type?: unknown; name?: unknown };
  if (choice.type === 'function' && typeof choice.name === 'string') return { type: 'function', function: { name: choice.name } };
  throw ApiError.badRequest(
    'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}; hosted tool choices are not supported.',
    'tool_choice',
    'unsupported_parameter',
  );
}

/** `text.format` as chat's `response_format`, and as the response repeats it. */
function formatOf(raw: unknown): { chat?: unknown; echo: Record<string, unknown> } {
  const format = (raw as { format?: unknown } | undefined)?.format as Record<string, unknown> | undefined | null;
  if (format === undefined || format === null || format.type === 'text') return { echo: { type: 'text' } };
  if (format.type === 'json_object') return { chat: { type: 'json_object' }, echo: format };
  if (format.type === 'json_schema') {
    if (typeof format.name !== 'string' || typeof format.schema !== 'object' || format.schema === null) {
      throw ApiError.badRequest('text.format of type json_schema needs a name and a schema.', 'text.format');
    }
    const jsonSchema = Object.fromEntries(
      Object.entries({ name: format.name, schema: format.schema, strict: format.strict, description: format.description }).filter(
        ([, value]) => value !== undefined && value !== null,
      ),
    );
    return { chat: { type: 'json_schema', json_schema: jsonSchema }, echo: format };
  }
  throw ApiError.badRequest('text.format.type must be text, json_object or json_schema.', 'text.format.type');
}

function metadataOf(raw: unknown): Record<string, string> {
  if (raw === undefined) return {};
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) throw ApiError.badRequest('metadata must be an object of strings.', 'metadata');
  const entries = Object.entries(raw);
  if (entries.length > MAX_METADATA_PAIRS) throw ApiError.badRequest(`metadata can have at most ${MAX_METADATA_PAIRS} keys.`, 'metadata');
  for (const [key, value] of entries) {
    if (key.length > MAX_METADATA_KEY) throw ApiError.badRequest(`metadata keys can be at most ${MAX_METADATA_KEY} characters long.`, 'metadata');
    if (typeof value !== 'string' || value.length > MAX_METADATA_VALUE) {
      throw ApiError.badRequest(`metadata.${key} must be a string of at most ${MAX_METADATA_VALUE} characters.`, `metadata.${key}`);
    }
  }
  return raw as Record<string, string>;
}

function conversationOf(raw: unknown): string | undefined {
  if (raw === undefined) return undefined;
  if (typeof raw === 'string') return raw;
  const id = (raw as { id?: unknown } | null)?.id;
  if (typeof id === 'string') return id;
  throw ApiError.badRequest('conversation must be a conversation id or {"id": ...}.', 'conversation');
}

function optionalString(body: Record<string, unknown>, field: string): string | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'string') throw ApiError.badRequest(`${field} must be a string.`, field);
  return value;
}

/** An end user's id (`user`, or our `user_id`): a string of at most MAX_USER_ID_LENGTH characters, as chat completions take it. */
function endUserOf(body: Record<string, unknown>, field: 'user' | 'user_id'): string | undefined {
  const value = optionalString(body, field);
  if (value !== undefined && value.length > MAX_USER_ID_LENGTH) {
    throw ApiError.badRequest(`${field} must be at most ${MAX_USER_ID_LENGTH} characters.`, field);
  }
  return value;
}

function optionalBoolean(body: Record<string, unknown>, field: string): boolean | undefined {
  const value = body[field];
  if (value === undefined) return undefined;
  if (typeof value !== 'boolean') throw ApiError.badRequest(`${field} must be a boolean.`, field);
  return value;
}

function requiredString(fields: Record<string, unknown>, field: string, at: string): string {
  const value = fields[field];
  if (typeof value !== 'string') throw ApiError.badRequest(`${at}.${field} must be a string.`, `${at}.${field}`);
  return value;
}
