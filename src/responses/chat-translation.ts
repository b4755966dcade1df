import { randomBytes } from 'node:crypto';
import { parseFileSearchOptions } from '../assistants/documents/document-filters';
import { ApiError } from '../common/errors/api-error';
import { assistantOfModel } from '../models/assistant-models';
import type { ContentPart } from '../providers/provider-adapter';
import type { ToolSettings } from '../tools/server-tool';
import type { ContentPartDto, CreateResponseRequestDto, InputItemDto, ToolDto } from './dto/create-response.dto';
import { itemTypeOf } from './dto/create-response.dto';

/**
 * Translation of a validated Responses request (create-response.dto.ts) into the
 * chat-completions body that `ChatService` runs: the chat core is the one money path (hold,
 * exact charge, usage record, tool loop), this file only maps fields.
 */

/** An input item as stored and listed (`GET /v1/responses/{id}/input_items`): the client's item, with an id. */
export type InputItem = Record<string, unknown> & { type: string; id: string };

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
  /** The chat-completions body, without `messages` (built once item references are resolved) and `conversation_id`. */
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
  /** The hosted tools' own options (file_search's max_num_results, ranking_options, filters), over the assistant's settings. */
  toolOptions: ToolSettings[];
  /** `include`: which output item details to add (`file_search_call.results`, `web_search_call.action.sources`). */
  include: ReadonlySet<string>;
  /** For each chat tool, its index in the request's `tools` (hosted tools are not chat tools). */
  toolIndexes: number[];
  echo: EchoedFields;
}

/** A new id with OpenAI's prefixes (`resp_`, `msg_`, `fc_`). */
export function newId(prefix: 'resp' | 'msg' | 'fc' | 'fs' | 'ws'): string {
  return `${prefix}_${randomBytes(24).toString('hex')}`;
}

/**
 * The chat body and the rest of what the service needs, from a validated request. Its
 * refusals are those that depend on the registered server tools or on two fields: a hosted
 * tool must name a server tool and needs an assistant. `hostedTools`: each hosted tool type
 * (a tool's name and its aliases, `web_search_preview` -> `web_search`) to the server tool
 * that serves it (ToolsService.hostedToolTypes, from the registered tools).
 */
export function toResponsesRequest(request: CreateResponseRequestDto, hostedTools: ReadonlyMap<string, string>): ResponsesRequest {
  const store = request.store ?? true;
  const stream = request.stream ?? false;
  const conversation = request.conversation;
  const conversationId = typeof conversation === 'string' ? conversation : conversation?.id;
  const assistantRef = request.assistant_id ?? assistantOfModel(request.model);
  const { tools, serverTools, toolIndexes, toolOptions } = toolsOf(request.tools ?? [], assistantRef !== undefined, hostedTools);
  const format = formatOf(request.text?.format);
  const user = request.user;

  const chat: Record<string, unknown> = {
    model: request.model,
    assistant_id: request.assistant_id,
    tools: tools.length > 0 ? tools : undefined,
    tool_choice: toolChoiceOf(request.tool_choice),
    max_completion_tokens: request.max_output_tokens,
    temperature: request.temperature,
    top_p: request.top_p,
    response_format: format.chat,
    stream: stream || undefined,
    // The Responses stream ends with the usage, so the chat stream must carry it.
    stream_options: stream ? { include_usage: true } : undefined,
    user_id: request.user_id ?? user,
    subscription_id: request.subscription_id,
    // OpenAI refuses parallel_tool_calls without tools.
    parallel_tool_calls: tools.length > 0 ? request.parallel_tool_calls : undefined,
    reasoning_effort: request.reasoning?.effort ?? undefined,
  };
  return {
    chat: Object.fromEntries(Object.entries(chat).filter(([, value]) => value !== undefined)),
    input: inputItemsOf(request.input),
    stream,
    store,
    previousResponseId: request.previous_response_id,
    conversationId,
    assistantRef,
    serverTools,
    toolIndexes,
    toolOptions,
    include: new Set(request.include ?? []),
    echo: {
      instructions: request.instructions ?? null,
      max_output_tokens: typeof request.max_output_tokens === 'number' ? request.max_output_tokens : null,
      metadata: request.metadata ?? {},
      parallel_tool_calls: request.parallel_tool_calls !== false,
      previous_response_id: request.previous_response_id ?? null,
      store,
      temperature: typeof request.temperature === 'number' ? request.temperature : null,
      text: { format: format.echo },
      tool_choice: request.tool_choice ?? 'auto',
      tools: request.tools ?? [],
      top_p: typeof request.top_p === 'number' ? request.top_p : null,
      truncation: request.truncation === 'auto' ? 'auto' : 'disabled',
      user: user ?? null,
    },
  };
}

/**
 * The chat messages of a request: its instructions as a system message, then the input
 * items (with item references already replaced by the items they name: a stored response's
 * output items, which are messages and function calls).
 */
export function toChatMessages(instructions: string | null, items: readonly InputItem[]): Record<string, unknown>[] {
  const messages: Record<string, unknown>[] = instructions ? [{ role: 'system', content: instructions }] : [];
  items.forEach((entry, index) => {
    const item = entry as InputItemDto;
    switch (item.type) {
      case 'message':
        messages.push(messageOf(item, `input.${index}`));
        break;
      case 'function_call': {
        const call = { id: item.call_id, type: 'function', function: { name: item.name, arguments: item.arguments } };
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
        messages.push({ role: 'tool', tool_call_id: item.call_id, content: outputTextOf(item.output!) });
        break;
      case 'file_search_call':
      case 'web_search_call':
        // A hosted tool's call of an earlier response, sent back with its output: the answer that used it follows it.
        break;
      default:
        throw ApiError.badRequest(`input.${index}.type "${item.type}" is not supported.`, `input.${index}.type`, 'unsupported_input_item');
    }
  });
  return messages;
}

function inputItemsOf(input: CreateResponseRequestDto['input']): InputItem[] {
  if (input === undefined) return [];
  if (typeof input === 'string') {
    return [{ type: 'message', id: newId('msg'), role: 'user', content: [{ type: 'input_text', text: input }] }];
  }
  return input.map((item) => {
    const type = itemTypeOf(item) as string;
    const id = typeof item.id === 'string' && item.id.length > 0 ? item.id : newId(type === 'function_call' ? 'fc' : 'msg');
    return { ...item, type, id };
  });
}

function messageOf(item: InputItemDto, at: string): Record<string, unknown> {
  const { role, content } = item;
  if (typeof content === 'string') return { role, content };
  const parts = (content ?? []).map(partOf);
  // Only user messages carry images and files in chat completions; the others are text.
  if (role !== 'user') {
    const nonText = parts.findIndex((part) => part.type !== 'text');
    if (nonText >= 0) throw ApiError.badRequest(`${at}.content.${nonText}: a ${role} message can only hold text.`, `${at}.content.${nonText}`);
    return { role, content: parts.map((part) => (part as { text: string }).text).join('') };
  }
  return { role, content: parts };
}

function partOf(part: ContentPartDto): ContentPart {
  switch (part.type) {
    case 'refusal':
      return { type: 'text', text: part.refusal! };
    case 'input_image':
      return { type: 'image_url', image_url: { url: part.image_url!, ...(part.detail ? { detail: part.detail } : {}) } };
    case 'input_file':
      return { type: 'file', file: { file_data: part.file_data!, ...(typeof part.filename === 'string' ? { filename: part.filename } : {}) } };
    case 'input_audio':
      return { type: 'input_audio', input_audio: { data: part.input_audio!.data, format: part.input_audio!.format } };
    default:
      // input_text, and output_text in a stored response's message.
      return { type: 'text', text: part.text! };
  }
}

/** A function call's output: a string, or text parts (joined); images and files in an output are not carried by chat tools. */
function outputTextOf(output: NonNullable<InputItemDto['output']>): string {
  return typeof output === 'string' ? output : output.map((part) => part.text).join('');
}

/** Function tools become chat tools; hosted tools name the assistant's server tools, by type or alias. */
function toolsOf(
  requested: ToolDto[],
  assistantMode: boolean,
  hostedTools: ReadonlyMap<string, string>,
): Pick<ResponsesRequest, 'serverTools' | 'toolIndexes' | 'toolOptions'> & { tools: unknown[] } {
  const tools: unknown[] = [];
  const serverTools: ResponsesRequest['serverTools'] = [];
  const toolIndexes: number[] = [];
  const toolOptions: ToolSettings[] = [];
  requested.forEach((tool, index) => {
    const at = `tools.${index}`;
    if (tool.type === 'function') {
      toolIndexes.push(index);
      const fields = { name: tool.name, description: tool.description, parameters: tool.parameters, strict: tool.strict };
      tools.push({ type: 'function', function: Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined && value !== null)) });
      return;
    }
    const serverTool = hostedTools.get(tool.type);
    if (serverTool === undefined) {
      const names = [...new Set(hostedTools.values())];
      const offered = names.length > 1 ? `${names.slice(0, -1).join(', ')} and ${names.at(-1)}` : names.join('');
      throw ApiError.badRequest(
        `${at}: the hosted tool "${tool.type}" is not available here. Function tools are, and an assistant's ${offered}.`,
        `${at}.type`,
        'unsupported_tool',
      );
    }
    if (!assistantMode) {
      throw ApiError.badRequest(
        `The ${tool.type} tool runs on the server and needs an assistant that has ${serverTool}: send assistant_id (or model "assistant/<slug>").`,
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
    if (serverTool === 'file_search') toolOptions.push({ type: serverTool, ...parseFileSearchOptions(tool as unknown as Record<string, unknown>, at) });
  });
  return { tools, serverTools, toolIndexes, toolOptions };
}

function toolChoiceOf(choice: CreateResponseRequestDto['tool_choice']): unknown {
  return typeof choice === 'object' ? { type: 'function', function: { name: choice.name } } : choice;
}

/** `text.format` as chat's `response_format`, and as the response repeats it. */
function formatOf(format: NonNullable<CreateResponseRequestDto['text']>['format']): { chat?: unknown; echo: Record<string, unknown> } {
  if (format === undefined || format === null || format.type === 'text') return { echo: { type: 'text' } };
  const echo = format as unknown as Record<string, unknown>;
  if (format.type === 'json_object') return { chat: { type: 'json_object' }, echo };
  const fields = { name: format.name, schema: format.schema, strict: format.strict, description: format.description };
  return { chat: { type: 'json_schema', json_schema: Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined && value !== null)) }, echo };
}
