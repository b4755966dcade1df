import type {
  ContentBlockParam,
  ImageBlockParam,
  MessageCreateParamsNonStreaming,
  MessageParam,
  TextBlockParam,
  Tool,
  ToolChoice,
  ToolResultBlockParam,
} from '@anthropic-ai/sdk/resources/messages';
import { ApiError } from '../../common/errors/api-error';
import type { ChatMessage, FunctionTool, ProviderRequest } from '../provider-adapter';
import { anthropicThinking, checkReasoningEffort, reasoningEffortOf } from '../reasoning';

// OpenAI chat completion request -> Anthropic Messages request.

/**
 * Refuses, before any money is held, what Claude cannot honour: the parameters (see
 * `checkParameters`) and the content parts of the client's user messages.
 */
export function checkAnthropicRequest(extra: Record<string, unknown>, messages: ChatMessage[] = []): void {
  checkParameters(extra);
  // Content parts are checked message by message: the same translation the call makes.
  messages.forEach((message, index) => {
    if (message.role === 'user') userBlocks(message.content, `messages.${index}.content`);
  });
}

/** The Messages request for a chat request (without `stream`, which the caller sets). */
export function toAnthropicParams(request: ProviderRequest): MessageCreateParamsNonStreaming {
  return translateRequest(request).params;
}

/**
 * The parameters that would change the answer's shape and that Claude cannot honour are
 * refused; `seed` cannot be honoured either but changes nothing of the shape, and is dropped.
 */
export function checkParameters(extra: Record<string, unknown>): void {
  const refuse = (message: string, param: string) => {
    throw ApiError.badRequest(message, param, 'unsupported_parameter');
  };
  if (typeof extra.n === 'number' && extra.n > 1) refuse('Claude models return one choice per request: n must be 1.', 'n');
  if (extra.logprobs === true) refuse('Claude models do not return log probabilities: logprobs is not supported.', 'logprobs');
  if (typeof extra.top_logprobs === 'number' && extra.top_logprobs > 0) {
    refuse('Claude models do not return log probabilities: top_logprobs is not supported.', 'top_logprobs');
  }
  if (Array.isArray(extra.modalities) && extra.modalities.includes('audio')) refuse('Claude models answer in text only: audio output is not supported.', 'modalities');
  if (extra.audio !== undefined && extra.audio !== null) refuse('Claude models answer in text only: audio output is not supported.', 'audio');
  const formatType = (extra.response_format as { type?: unknown } | null | undefined)?.type;
  if (formatType !== undefined && !['text', 'json_object', 'json_schema'].includes(formatType as string)) {
    refuse(`response_format.type ${JSON.stringify(formatType)} is not supported; use text, json_object or json_schema.`, 'response_format.type');
  }
  checkReasoningEffort(extra);
}

/** The Messages request, and the tool that carries a structured answer when response_format asks for one. */
export function translateRequest(request: ProviderRequest): { params: MessageCreateParamsNonStreaming; answer?: AnswerFormat } {
  const extra = request.extra ?? {};
  checkParameters(extra);
  const { system, messages } = toAnthropicMessages(request.messages);
  const clientTools = toAnthropicTools(request.tools ?? [], extra.tool_choice);
  let tools = clientTools;
  let toolChoice = tools.length > 0 ? toAnthropicToolChoice(extra.tool_choice, extra.parallel_tool_calls) : undefined;
  const answer = answerFormat(extra.response_format, extra.tool_choice, clientTools);
  if (answer) {
    tools = [...clientTools, answer.tool];
    // With the client's tools on offer (tool_choice auto), Claude calls one of them or answers through the answer tool, never in prose.
    const choosesAmongTools = clientTools.length > 0 && extra.tool_choice !== 'none';
    const serial = extra.parallel_tool_calls === false ? { disable_parallel_tool_use: true } : {};
    toolChoice = choosesAmongTools ? { type: 'any', ...serial } : { type: 'tool', name: answer.name, disable_parallel_tool_use: true };
  }
  const stopSequences = toStopSequences(extra.stop);
  const userId = firstString(extra.user, extra.safety_identifier, (extra.metadata as { user_id?: unknown } | undefined)?.user_id);
  const thinking = thinkingOf(extra, request.maxTokens, toolChoice, messages);
  // Claude refuses a temperature other than 1, top_k, and top_p under 0.95 beside thinking: the thinking asked for wins.
  const temperature = thinking && request.temperature !== 1 ? undefined : (request.temperature ?? undefined);
  const topP = typeof extra.top_p === 'number' && (!thinking || extra.top_p >= 0.95) ? extra.top_p : undefined;
  const topK = typeof extra.top_k === 'number' && !thinking ? extra.top_k : undefined;

  const params: MessageCreateParamsNonStreaming = {
    model: request.model.upstreamModel,
    max_tokens: request.maxTokens,
    messages,
    ...(system ? { system } : {}),
    ...(tools.length > 0 ? { tools } : {}),
    ...(toolChoice ? { tool_choice: toolChoice } : {}),
    // OpenAI's range is 0..2, Anthropic's 0..1.
    ...(typeof temperature === 'number' ? { temperature: Math.min(1, Math.max(0, temperature)) } : {}),
    // Recent Claude models refuse temperature and top_p together; the temperature wins.
    ...(topP !== undefined && typeof temperature !== 'number' ? { top_p: topP } : {}),
    ...(topK !== undefined ? { top_k: topK } : {}),
    ...(stopSequences.length > 0 ? { stop_sequences: stopSequences } : {}),
    ...(userId ? { metadata: { user_id: userId } } : {}),
    ...(thinking ? { thinking } : {}),
  };
  return { params, answer: answer && { name: answer.name, wrapped: answer.wrapped } };
}

/**
 * Thinking for the request's reasoning_effort (src/providers/reasoning.ts), where Claude takes
 * it: not with a forced tool (a named tool, `any`, a response_format's tool), which Claude
 * refuses beside thinking, nor when continuing a tool call, whose assistant turn would need the
 * thinking blocks that chat messages cannot carry back.
 */
function thinkingOf(extra: Record<string, unknown>, maxTokens: number, toolChoice: ToolChoice | undefined, messages: MessageParam[]) {
  if (toolChoice?.type === 'any' || toolChoice?.type === 'tool') return undefined;
  const last = messages[messages.length - 1];
  if (last?.role === 'user' && Array.isArray(last.content) && last.content.some((block) => block.type === 'tool_result')) return undefined;
  return anthropicThinking(reasoningEffortOf(extra), maxTokens);
}

/** The tool whose input is the answer: its name, and whether the schema's value sits under `value` (non-object schemas). */
export interface AnswerFormat {
  name: string;
  wrapped: boolean;
}

const JSON_OBJECT_TOOL = 'json_answer';

/**
 * Claude has no response_format: a structured answer is asked for as a tool it must call,
 * whose input schema is the format's schema (any object for json_object); the input is then
 * the answer. A tool_choice that makes Claude call the client's tools (required, a named
 * tool) leaves the format for a later turn.
 */
function answerFormat(responseFormat: unknown, toolChoice: unknown, clientTools: Tool[]): (AnswerFormat & { tool: Tool }) | undefined {
  const format = responseFormat as { type?: unknown; json_schema?: { name?: unknown; description?: unknown; schema?: unknown; strict?: unknown } } | null | undefined;
  if (format?.type !== 'json_object' && format?.type !== 'json_schema') return undefined;
  const choice = toolChoice as { type?: unknown; allowed_tools?: { mode?: unknown } } | string | null | undefined;
  const forcesClientTool =
    clientTools.length > 0 &&
    (choice === 'required' ||
      (typeof choice === 'object' && choice !== null && (choice.type !== 'allowed_tools' || choice.allowed_tools?.mode === 'required')));
  if (forcesClientTool) return undefined;

  const spec = format.type === 'json_schema' ? (format.json_schema ?? {}) : {};
  const name = typeof spec.name === 'string' && /^[a-zA-Z0-9_-]{1,64}$/.test(spec.name) ? spec.name : JSON_OBJECT_TOOL;
  if (clientTools.some((tool) => tool.name === name)) {
    throw ApiError.badRequest(
      `response_format.json_schema.name ${JSON.stringify(name)} is also the name of one of your tools; Claude gets the format as a tool, so the names must differ.`,
      'response_format.json_schema.name',
    );
  }
  const schema = isObject(spec.schema) ? spec.schema : { type: 'object' };
  // Claude's tool input is always an object: any other schema is asked for as the object's `value`.
  const isObjectSchema = schema.type === 'object' || (schema.type === undefined && isObject(schema.properties));
  let inputSchema: Record<string, unknown> = { ...schema, type: 'object' };
  if (!isObjectSchema) {
    const { $defs, definitions, ...value } = schema;
    // Definitions stay at the root, where the schema's `#/$defs/...` references point.
    inputSchema = { type: 'object', properties: { value }, required: ['value'], ...($defs ? { $defs } : {}), ...(definitions ? { definitions } : {}) };
  }
  const description =
    typeof spec.description === 'string' && spec.description
      ? spec.description
      : 'Give your whole answer as the input of this tool, in the format its schema describes.';
  return {
    name,
    wrapped: !isObjectSchema,
    tool: { name, description, input_schema: inputSchema as Tool.InputSchema, ...(spec.strict === true ? { strict: true } : {}) },
  };
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

interface Turn {
  role: 'user' | 'assistant';
  content: ContentBlockParam[];
}

/**
 * System and developer messages become the system prompt (in order, wherever they stood);
 * tool messages become user turns of tool_result blocks; consecutive turns of one role merge.
 */
export function toAnthropicMessages(messages: ChatMessage[]): { system?: string; messages: MessageParam[] } {
  const system: string[] = [];
  const turns: Turn[] = [];
  const add = (role: Turn['role'], content: ContentBlockParam[]) => {
    if (content.length === 0) return;
    const last = turns[turns.length - 1];
    if (last?.role === role) last.content.push(...content);
    else turns.push({ role, content: [...content] });
  };

  messages.forEach((message, index) => {
    const at = `messages.${index}`;
    switch (message.role) {
      case 'system':
      case 'developer': {
        const text = textOf(message.content, `${at}.content`);
        if (text.trim()) system.push(text);
        break;
      }
      case 'user':
        add('user', userBlocks(message.content, `${at}.content`));
        break;
      case 'assistant':
        add('assistant', assistantBlocks(message, at));
        break;
      case 'tool':
        add('user', [toolResult(message.tool_call_id, message.content, `${at}.content`)]);
        break;
      default:
        throw ApiError.badRequest(`${at}.role ${(message as { role: string }).role} is not supported; use tool messages.`, `${at}.role`);
    }
  });

  for (const turn of turns) {
    // Anthropic wants a user turn's tool results before anything else in it.
    if (turn.role === 'user') turn.content.sort((a, b) => rank(a) - rank(b));
  }
  // A final assistant turn (a prefill) must not end with whitespace.
  const last = turns[turns.length - 1];
  if (last?.role === 'assistant') {
    const block = last.content[last.content.length - 1];
    if (block?.type === 'text') {
      block.text = block.text.trimEnd();
      if (!block.text) last.content.pop();
      if (last.content.length === 0) turns.pop();
    }
  }

  return {
    system: system.length > 0 ? system.join('\n\n') : undefined,
    messages: turns.map((turn) => ({
      role: turn.role,
      content: turn.content.length === 1 && turn.content[0].type === 'text' ? turn.content[0].text : turn.content,
    })),
  };
}

function rank(block: ContentBlockParam): number {
  return block.type === 'tool_result' ? 0 : 1;
}

type OpenAiPart = {
  type?: string;
  text?: string;
  refusal?: string;
  image_url?: { url?: string } | string;
  file?: { file_data?: string; file_id?: string };
};

function parts(content: unknown, at: string): OpenAiPart[] {
  if (content === null || content === undefined) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (Array.isArray(content)) return content as OpenAiPart[];
  throw ApiError.badRequest(`${at} must be a string or an array of content parts.`, at);
}

/** The text of system, developer and tool messages: text parts only. */
function textOf(content: unknown, at: string): string {
  return parts(content, at)
    .map((part, index) => {
      if (part.type === 'text') return part.text ?? '';
      throw ApiError.badRequest(`${at}.${index}: only text parts are accepted here.`, `${at}.${index}`);
    })
    .join('\n');
}

function textBlock(text: string | undefined): TextBlockParam[] {
  // Anthropic rejects empty text blocks.
  return text ? [{ type: 'text', text }] : [];
}

function userBlocks(content: unknown, at: string): ContentBlockParam[] {
  return parts(content, at).flatMap((part, index): ContentBlockParam[] => {
    switch (part.type) {
      case 'text':
        return textBlock(part.text);
      case 'image_url': {
        const url = typeof part.image_url === 'string' ? part.image_url : part.image_url?.url;
        return [imageBlock(url, `${at}.${index}.image_url.url`)];
      }
      case 'file': {
        if (part.file?.file_data === undefined && part.file?.file_id !== undefined) {
          throw ApiError.badRequest(
            `${at}.${index}.file.file_id: this service stores no files; send the PDF itself as file.file_data (a base64 data: URL).`,
            `${at}.${index}.file.file_id`,
            'unsupported_content',
          );
        }
        const pdf = /^data:application\/pdf;base64,(.*)$/s.exec(part.file?.file_data ?? '');
        if (pdf) return [{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: pdf[1] } }];
        throw ApiError.badRequest(
          `${at}.${index}.file.file_data: Claude models accept files only as base64 PDF data URLs (data:application/pdf;base64,...).`,
          `${at}.${index}.file.file_data`,
          'unsupported_content',
        );
      }
      case 'input_audio':
        throw ApiError.badRequest(`${at}.${index}: Claude models do not accept audio input.`, `${at}.${index}`, 'unsupported_content');
      default:
        throw ApiError.badRequest(
          `${at}.${index}: content parts of type ${part.type} are not supported by Claude models.`,
          `${at}.${index}.type`,
          'unsupported_content',
        );
    }
  });
}

function imageBlock(url: string | undefined, at: string): ImageBlockParam {
  if (url && /^https?:\/\//i.test(url)) return { type: 'image', source: { type: 'url', url } };
  const data = /^data:([^;,]+)((?:;[^;,]*)*),(.*)$/s.exec(url ?? '');
  if (data && data[2].split(';').includes('base64')) {
    const mediaType = data[1].toLowerCase() === 'image/jpg' ? 'image/jpeg' : data[1].toLowerCase();
    // The media type is checked by Anthropic, which names the ones it takes.
    return { type: 'image', source: { type: 'base64', media_type: mediaType as 'image/png', data: data[3] } };
  }
  throw ApiError.badRequest(`${at} must be an http(s) URL or a base64 data: URL.`, at);
}

function assistantBlocks(message: Extract<ChatMessage, { role: 'assistant' }>, at: string): ContentBlockParam[] {
  const blocks: ContentBlockParam[] = parts(message.content, `${at}.content`).flatMap((part, index) => {
    if (part.type === 'text') return textBlock(part.text);
    if (part.type === 'refusal') return textBlock(part.refusal);
    throw ApiError.badRequest(`${at}.content.${index}: assistant messages carry text parts only.`, `${at}.content.${index}`);
  });
  for (const call of message.tool_calls ?? []) {
    if (call.type !== 'function') continue;
    blocks.push({ type: 'tool_use', id: call.id, name: call.function.name, input: parseArguments(call.function.arguments) });
  }
  return blocks;
}

/** Tool call arguments as Anthropic's `input`, which must be an object; what does not parse to one is `{}`. */
function parseArguments(text: string | undefined): Record<string, unknown> {
  try {
    const value: unknown = JSON.parse(text ?? '');
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Record<string, unknown>) : {};
  } catch {
    return {};
  }
}

function toolResult(toolCallId: string, content: unknown, at: string): ToolResultBlockParam {
  const result = parts(content, at).flatMap((part, index) => {
    if (part.type === 'text') return textBlock(part.text);
    throw ApiError.badRequest(`${at}.${index}: tool messages carry text parts only.`, `${at}.${index}`);
  });
  if (result.length === 0) return { type: 'tool_result', tool_use_id: toolCallId };
  return { type: 'tool_result', tool_use_id: toolCallId, content: typeof content === 'string' ? content : result };
}

function toAnthropicTools(tools: FunctionTool[], toolChoice: unknown): Tool[] {
  // OpenAI's allowed_tools choice narrows the offered tools.
  const allowed = (toolChoice as { type?: string; allowed_tools?: { tools?: Array<{ function?: { name?: string } }> } })?.type === 'allowed_tools'
    ? new Set((toolChoice as { allowed_tools: { tools?: Array<{ function?: { name?: string } }> } }).allowed_tools.tools?.map((t) => t.function?.name))
    : undefined;
  return tools
    .filter((tool) => tool.type === 'function' && (!allowed || allowed.has(tool.function.name)))
    .map((tool) => {
      const parameters = (tool.function.parameters ?? {}) as Record<string, unknown>;
      return {
        name: tool.function.name,
        ...(tool.function.description ? { description: tool.function.description } : {}),
        input_schema: { ...parameters, type: 'object' } as Tool.InputSchema,
        ...(tool.function.strict ? { strict: true } : {}),
      };
    });
}

function toAnthropicToolChoice(choice: unknown, parallelToolCalls: unknown): ToolChoice | undefined {
  const serial = parallelToolCalls === false ? { disable_parallel_tool_use: true } : {};
  if (choice === 'none') return { type: 'none' };
  if (choice === 'required') return { type: 'any', ...serial };
  if (choice && typeof choice === 'object') {
    const c = choice as { type?: string; function?: { name?: string }; custom?: { name?: string }; allowed_tools?: { mode?: string } };
    const name = c.function?.name ?? c.custom?.name;
    if ((c.type === 'function' || c.type === 'custom') && name) return { type: 'tool', name, ...serial };
    if (c.type === 'allowed_tools') return { type: c.allowed_tools?.mode === 'required' ? 'any' : 'auto', ...serial };
  }
  if (choice === 'auto' || parallelToolCalls === false) return { type: 'auto', ...serial };
  return undefined;
}

function toStopSequences(stop: unknown): string[] {
  const list = typeof stop === 'string' ? [stop] : Array.isArray(stop) ? stop : [];
  return list.filter((s): s is string => typeof s === 'string' && s.length > 0);
}

function firstString(...values: unknown[]): string | undefined {
  return values.find((v): v is string => typeof v === 'string' && v.length > 0);
}
