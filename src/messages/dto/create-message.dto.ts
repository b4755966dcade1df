import { ApiExtraModels, ApiProperty, ApiPropertyOptional, getSchemaPath } from '@nestjs/swagger';
import { ApiError } from '../../common/errors/api-error';

/**
 * The Anthropic Messages request (`POST /v1/messages`, `POST /v1/messages/count_tokens`): the
 * classes describe it in the OpenAPI document; `validateMessagesRequest` checks a body by
 * hand (blocks are a union of types, which class-validator words poorly) and refuses with a
 * 400 naming the field. Fields this service does not know are accepted and dropped: Claude
 * Code sends new ones (`context_management`, `output_config`...) with each release.
 */

export type ImageSource = { type: 'base64'; media_type: string; data: string } | { type: 'url'; url: string };

/** A content block of a request message, once validated (cache_control and citations are not kept). */
export type RequestBlock =
  | { type: 'text'; text: string }
  | { type: 'image'; source: ImageSource }
  | { type: 'document'; source: DocumentSource; title?: string }
  | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> }
  | { type: 'tool_result'; tool_use_id: string; content: ToolResultBlock[]; is_error: boolean }
  | { type: 'thinking' | 'redacted_thinking' };

/** What a tool result holds: text, images, documents, and `tool_reference`s (a tool search's answer: the deferred tools it loads). */
export type ToolResultBlock = Extract<RequestBlock, { type: 'text' | 'image' | 'document' }> | { type: 'tool_reference'; tool_name: string };

export type DocumentSource =
  | { type: 'text'; data: string }
  | { type: 'base64'; media_type: 'application/pdf'; data: string }
  | { type: 'content'; blocks: Array<Extract<RequestBlock, { type: 'text' | 'image' }>> };

export interface RequestMessage {
  role: 'user' | 'assistant' | 'system';
  content: string | RequestBlock[];
}

export interface RequestTool {
  name: string;
  description?: string;
  input_schema: Record<string, unknown>;
  /** Hidden from the model until a `tool_reference` loads it (Claude Code defers most of its tools). */
  defer_loading?: boolean;
}

export type RequestToolChoice = { type: 'auto' | 'any' | 'none'; disable_parallel_tool_use?: boolean } | { type: 'tool'; name: string; disable_parallel_tool_use?: boolean };

/** A validated request: what the translation reads. */
export interface MessagesRequest {
  model: string;
  max_tokens: number;
  messages: RequestMessage[];
  system?: string;
  /** Custom tools only: tools of Anthropic's own types (server tools such as web_search_20250305) are dropped. */
  tools: RequestTool[];
  tool_choice?: RequestToolChoice;
  stop_sequences?: string[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  /** `metadata.user_id`, cut to 256 characters (Claude Code sends a JSON string). */
  user_id?: string;
  /** `output_config.format.schema`: the answer must be JSON of this schema (structured output). */
  output_schema?: Record<string, unknown>;
  /** `thinking` (`enabled` with `budget_tokens`, `adaptive`, `disabled`): the translation makes it a reasoning_effort. */
  thinking?: { type?: unknown; budget_tokens?: unknown };
  stream: boolean;
}

const IMAGE_TYPES = ['image/jpeg', 'image/png', 'image/gif', 'image/webp'];
const MAX_MODEL_CHARS = 200;
const MAX_USER_ID_CHARS = 256;

class RequestError {
  constructor(readonly error: ApiError) {}
}

function refuse(param: string, message: string, code?: string): never {
  throw new RequestError(ApiError.badRequest(`${param}: ${message}`, param, code));
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function stringAt(fields: Record<string, unknown>, name: string, at: string, options: { optional?: boolean } = {}): string | undefined {
  const value = fields[name];
  if (value === undefined && options.optional) return undefined;
  if (typeof value !== 'string') refuse(`${at}.${name}`, value === undefined ? 'Field required.' : 'must be a string.');
  return value;
}

function numberAt(fields: Record<string, unknown>, name: string, min: number, max: number, integer = false): number | undefined {
  const value = fields[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value) || (integer && !Number.isInteger(value)) || value < min || value > max) {
    refuse(name, `must be ${integer ? 'an integer' : 'a number'} from ${min}${max === Number.MAX_SAFE_INTEGER ? ' up' : ` to ${max}`}.`);
  }
  return value;
}

/**
 * Checks a Messages request body: a 400 (`invalid_request_error` on the wire) naming the
 * field at fault, `param` its dotted path (`messages.2.content.0.source.type`). Refuses what the
 * chat core cannot carry (a document by URL); accepts and drops thinking blocks, cache_control
 * and unknown top-level fields.
 */
export function validateMessagesRequest(body: unknown, options: { countingTokens?: boolean } = {}): MessagesRequest {
  try {
    return checkedRequest(body, options.countingTokens === true);
  } catch (error) {
    throw error instanceof RequestError ? error.error : error;
  }
}

/** `countingTokens`: count_tokens takes the request without max_tokens. */
function checkedRequest(body: unknown, countingTokens: boolean): MessagesRequest {
  if (!isObject(body)) throw new RequestError(ApiError.badRequest('The request body must be a JSON object.', undefined, 'invalid_body'));
  const model = stringAt(body, 'model', '')?.trim();
  if (!model) refuse('model', 'Field required: a model id, or "assistant/<slug>".');
  if (model.length > MAX_MODEL_CHARS) refuse('model', `can be at most ${MAX_MODEL_CHARS} characters long.`);
  if ((body.max_tokens === undefined || body.max_tokens === null) && !countingTokens) refuse('max_tokens', 'Field required.');
  const maxTokens = numberAt(body, 'max_tokens', 1, Number.MAX_SAFE_INTEGER, true) ?? 1;
  if (!Array.isArray(body.messages)) refuse('messages', body.messages === undefined ? 'Field required.' : 'must be an array of messages.');
  if (body.messages.length === 0) refuse('messages', 'must contain at least one message.');
  const messages = body.messages.map((message: unknown, index: number) => messageOf(message, `messages.${index}`));
  const stream = body.stream ?? false;
  if (typeof stream !== 'boolean') refuse('stream', 'must be a boolean.');
  if (body.metadata !== undefined && body.metadata !== null && !isObject(body.metadata)) refuse('metadata', 'must be an object.');
  const userId = (body.metadata as { user_id?: unknown } | undefined)?.user_id;
  if (userId !== undefined && userId !== null && typeof userId !== 'string') refuse('metadata.user_id', 'must be a string.');
  if (body.thinking !== undefined && body.thinking !== null && !isObject(body.thinking)) refuse('thinking', 'must be an object.');
  const stops = body.stop_sequences;
  if (stops !== undefined && stops !== null && (!Array.isArray(stops) || stops.some((stop) => typeof stop !== 'string'))) {
    refuse('stop_sequences', 'must be an array of strings.');
  }
  return {
    model,
    max_tokens: maxTokens,
    messages,
    system: systemOf(body.system),
    tools: toolsOf(body.tools),
    tool_choice: toolChoiceOf(body.tool_choice),
    stop_sequences: Array.isArray(stops) && stops.length > 0 ? (stops as string[]) : undefined,
    temperature: numberAt(body, 'temperature', 0, 1),
    top_p: numberAt(body, 'top_p', 0, 1),
    top_k: numberAt(body, 'top_k', 0, Number.MAX_SAFE_INTEGER, true),
    user_id: typeof userId === 'string' && userId.length > 0 ? userId.slice(0, MAX_USER_ID_CHARS) : undefined,
    output_schema: outputSchemaOf(body.output_config),
    thinking: isObject(body.thinking) ? body.thinking : undefined,
    stream,
  };
}

function messageOf(message: unknown, at: string): RequestMessage {
  if (!isObject(message)) refuse(at, 'must be an object with role and content.');
  const { role } = message;
  if (role !== 'user' && role !== 'assistant' && role !== 'system') refuse(`${at}.role`, 'must be "user" or "assistant".');
  const content = message.content;
  if (typeof content === 'string') return { role, content };
  if (!Array.isArray(content)) refuse(`${at}.content`, content === undefined ? 'Field required.' : 'must be a string or an array of content blocks.');
  return { role, content: content.map((block: unknown, index: number) => blockOf(block, role, `${at}.content.${index}`)) };
}

function blockOf(block: unknown, role: RequestMessage['role'], at: string): RequestBlock {
  if (!isObject(block)) refuse(at, 'must be a content block object.');
  switch (block.type) {
    case 'text':
      return { type: 'text', text: stringAt(block, 'text', at)! };
    case 'image':
      return { type: 'image', source: imageSourceOf(block.source, `${at}.source`) };
    case 'document':
      return { type: 'document', source: documentSourceOf(block.source, `${at}.source`), title: typeof block.title === 'string' ? block.title : undefined };
    case 'tool_use': {
      if (role !== 'assistant') refuse(`${at}.type`, 'tool_use blocks belong in assistant messages.');
      const input = block.input ?? {};
      if (!isObject(input)) refuse(`${at}.input`, 'must be an object.');
      return { type: 'tool_use', id: stringAt(block, 'id', at)!, name: stringAt(block, 'name', at)!, input };
    }
    case 'tool_result': {
      if (role !== 'user') refuse(`${at}.type`, 'tool_result blocks belong in user messages.');
      const isError = block.is_error ?? false;
      if (typeof isError !== 'boolean') refuse(`${at}.is_error`, 'must be a boolean.');
      return { type: 'tool_result', tool_use_id: stringAt(block, 'tool_use_id', at)!, content: toolResultContentOf(block.content, `${at}.content`), is_error: isError };
    }
    case 'thinking':
    case 'redacted_thinking':
      // Sent as they came to Anthropic deployments; dropped by the translation: see docs/api.md.
      return { type: block.type };
    default:
      refuse(
        `${at}.type`,
        `${JSON.stringify(block.type ?? null)} is not supported here: use text, image, document, tool_use, tool_result, thinking or redacted_thinking.`,
        'unsupported_content',
      );
  }
}

function imageSourceOf(source: unknown, at: string): ImageSource {
  if (!isObject(source)) refuse(at, 'Field required: {"type": "base64", "media_type", "data"} or {"type": "url", "url"}.');
  if (source.type === 'url') return { type: 'url', url: stringAt(source, 'url', at)! };
  if (source.type !== 'base64') refuse(`${at}.type`, 'must be "base64" or "url".', 'unsupported_content');
  const mediaType = stringAt(source, 'media_type', at)!;
  if (!IMAGE_TYPES.includes(mediaType)) refuse(`${at}.media_type`, `must be one of ${IMAGE_TYPES.join(', ')}.`);
  return { type: 'base64', media_type: mediaType, data: stringAt(source, 'data', at)! };
}

function documentSourceOf(source: unknown, at: string): DocumentSource {
  if (!isObject(source)) refuse(at, 'Field required.');
  switch (source.type) {
    case 'text':
      return { type: 'text', data: stringAt(source, 'data', at)! };
    case 'base64':
      if (source.media_type !== 'application/pdf') refuse(`${at}.media_type`, 'must be "application/pdf" (plain text goes in a source of type "text").');
      return { type: 'base64', media_type: 'application/pdf', data: stringAt(source, 'data', at)! };
    case 'content': {
      const content = source.content;
      if (typeof content === 'string') return { type: 'content', blocks: [{ type: 'text', text: content }] };
      if (!Array.isArray(content)) refuse(`${at}.content`, 'must be a string or an array of text and image blocks.');
      return {
        type: 'content',
        blocks: content.map((block: unknown, index: number) => {
          const checked = blockOf(block, 'user', `${at}.content.${index}`);
          if (checked.type !== 'text' && checked.type !== 'image') refuse(`${at}.content.${index}.type`, 'must be "text" or "image".');
          return checked;
        }),
      };
    }
    case 'url':
    case 'file':
      refuse(
        `${at}.type`,
        `documents by ${source.type} are not supported here: send the PDF as {"type": "base64", "media_type": "application/pdf", "data"}, or its text.`,
        'unsupported_content',
      );
    // falls through: refuse() never returns
    default:
      refuse(`${at}.type`, 'must be "text", "base64" or "content".');
  }
}

function toolResultContentOf(content: unknown, at: string): ToolResultBlock[] {
  if (content === undefined || content === null) return [];
  if (typeof content === 'string') return [{ type: 'text', text: content }];
  if (!Array.isArray(content)) refuse(at, 'must be a string or an array of content blocks.');
  return content.map((block: unknown, index: number): ToolResultBlock => {
    if (isObject(block) && block.type === 'tool_reference') return { type: 'tool_reference', tool_name: stringAt(block, 'tool_name', `${at}.${index}`)! };
    const checked = blockOf(block, 'user', `${at}.${index}`);
    if (checked.type !== 'text' && checked.type !== 'image' && checked.type !== 'document') {
      refuse(`${at}.${index}.type`, 'a tool result holds text, image, document and tool_reference blocks.', 'unsupported_content');
    }
    return checked;
  });
}

/**
 * Claude Code's first system line, `x-anthropic-billing-header: cc_version=...; cch=...;`: its
 * attribution for Anthropic, meaningless to a model, and varying with the request, so that it
 * would defeat the prefix caching of the upstreams that have one.
 */
const BILLING_HEADER_LINE = /^x-anthropic-billing-header:[^\n]*(\n|$)/;

/** A string, or text blocks (their cache_control ignored), joined as one system prompt, without Claude Code's billing line. */
function systemOf(system: unknown): string | undefined {
  if (system === undefined || system === null) return undefined;
  if (typeof system === 'string') {
    const text = system.replace(BILLING_HEADER_LINE, '');
    return text.length > 0 ? text : undefined;
  }
  if (!Array.isArray(system)) refuse('system', 'must be a string or an array of text blocks.');
  const texts = system.map((block: unknown, index: number) => {
    if (!isObject(block) || block.type !== 'text') refuse(`system.${index}`, 'must be a text block: {"type": "text", "text"}.');
    return stringAt(block, 'text', `system.${index}`)!.replace(BILLING_HEADER_LINE, '');
  });
  const joined = texts.filter((text) => text.length > 0).join('\n\n');
  return joined.length > 0 ? joined : undefined;
}

/** Custom tools (no type, or `custom`); Anthropic's own tool types run on Anthropic's servers and are dropped (docs/api.md). */
function toolsOf(tools: unknown): RequestTool[] {
  if (tools === undefined || tools === null) return [];
  if (!Array.isArray(tools)) refuse('tools', 'must be an array of tools.');
  const custom: RequestTool[] = [];
  tools.forEach((tool: unknown, index: number) => {
    const at = `tools.${index}`;
    if (!isObject(tool)) refuse(at, 'must be a tool object.');
    if (tool.type !== undefined && tool.type !== null && tool.type !== 'custom') return;
    const name = stringAt(tool, 'name', at)!;
    const description = stringAt(tool, 'description', at, { optional: true });
    if (!isObject(tool.input_schema)) refuse(`${at}.input_schema`, tool.input_schema === undefined ? 'Field required.' : 'must be a JSON Schema object.');
    const deferred = tool.defer_loading ?? false;
    if (typeof deferred !== 'boolean') refuse(`${at}.defer_loading`, 'must be a boolean.');
    custom.push({ name, ...(description !== undefined ? { description } : {}), input_schema: tool.input_schema, ...(deferred ? { defer_loading: true } : {}) });
  });
  return custom;
}

/** `output_config.format` (`{type: "json_schema", schema}`); the rest of output_config (`effort`) is dropped. */
function outputSchemaOf(config: unknown): Record<string, unknown> | undefined {
  if (!isObject(config) || config.format === undefined || config.format === null) return undefined;
  const { format } = config;
  if (!isObject(format) || format.type !== 'json_schema') refuse('output_config.format.type', 'must be "json_schema".');
  if (!isObject(format.schema)) refuse('output_config.format.schema', format.schema === undefined ? 'Field required.' : 'must be a JSON Schema object.');
  return format.schema;
}

function toolChoiceOf(choice: unknown): RequestToolChoice | undefined {
  if (choice === undefined || choice === null) return undefined;
  if (!isObject(choice)) refuse('tool_choice', 'must be an object: {"type": "auto" | "any" | "tool" | "none"}.');
  const serial = choice.disable_parallel_tool_use;
  if (serial !== undefined && typeof serial !== 'boolean') refuse('tool_choice.disable_parallel_tool_use', 'must be a boolean.');
  const parallel = serial === undefined ? {} : { disable_parallel_tool_use: serial };
  switch (choice.type) {
    case 'auto':
    case 'any':
    case 'none':
      return { type: choice.type, ...parallel };
    case 'tool':
      return { type: 'tool', name: stringAt(choice, 'name', 'tool_choice')!, ...parallel };
    default:
      refuse('tool_choice.type', 'must be "auto", "any", "tool" or "none".');
  }
}

// The classes below only describe the request in the OpenAPI document.

export class ContentBlockDto {
  @ApiProperty({ enum: ['text', 'image', 'document', 'tool_use', 'tool_result', 'thinking', 'redacted_thinking'], example: 'text' })
  type: string;

  @ApiPropertyOptional({ example: 'Hello, Claude' })
  text?: string;

  @ApiPropertyOptional({ description: 'image: `{type: "base64", media_type, data}` or `{type: "url", url}`; document: `{type: "text", data}`, `{type: "base64", media_type: "application/pdf", data}` or `{type: "content", content}`.' })
  source?: Record<string, unknown>;

  @ApiPropertyOptional({ description: 'tool_use: the call id; tool_result answers it with `tool_use_id`.', example: 'toolu_01A09q90qw90lq917835lq9' })
  id?: string;

  @ApiPropertyOptional({ example: 'get_weather' })
  name?: string;

  @ApiPropertyOptional({ example: { city: 'Paris' } })
  input?: Record<string, unknown>;

  @ApiPropertyOptional({ example: 'toolu_01A09q90qw90lq917835lq9' })
  tool_use_id?: string;

  @ApiPropertyOptional({ description: 'tool_result: a string or text, image, document and `tool_reference` (`{type, tool_name}`: a deferred tool it loads) blocks.' })
  content?: unknown;

  @ApiPropertyOptional()
  is_error?: boolean;

  @ApiPropertyOptional({ description: 'Sent as it came to Anthropic deployments; ignored on other providers.' })
  cache_control?: Record<string, unknown>;
}

@ApiExtraModels(ContentBlockDto)
class InputMessageDto {
  @ApiProperty({ enum: ['user', 'assistant', 'system'], description: '`system` inside messages (as Claude Code sends for models other than Claude) is a system message.' })
  role: string;

  @ApiProperty({ oneOf: [{ type: 'string' }, { type: 'array', items: { $ref: getSchemaPath(ContentBlockDto) } }], example: 'Hello, Claude' })
  content: string | ContentBlockDto[];
}

class CustomToolDto {
  @ApiProperty({ example: 'get_weather' })
  name: string;

  @ApiPropertyOptional({ example: 'Current weather in a city' })
  description?: string;

  @ApiProperty({ example: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } })
  input_schema: Record<string, unknown>;

  @ApiPropertyOptional({ description: 'Absent or `custom`. Anthropic server tools (`web_search_20250305`, ...) are dropped.' })
  type?: string;

  @ApiPropertyOptional({ description: 'Not shown to the model until a `tool_reference` block of a tool result names it (Claude Code\'s ToolSearch).' })
  defer_loading?: boolean;
}

export class CreateMessageRequestDto {
  @ApiProperty({ description: 'A model id of GET /v1/models, or `assistant/<slug>` to run an assistant (its server tools stay server-side).', example: 'gpt-4o-mini' })
  model: string;

  @ApiProperty({ minimum: 1, description: "Lowered to the answering model's output limit when above it (told in `x_service.max_tokens_lowered_to`), never refused for it.", example: 1024 })
  max_tokens: number;

  @ApiProperty({ type: [InputMessageDto] })
  messages: InputMessageDto[];

  @ApiPropertyOptional({ oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'object' } }], description: 'A string or text blocks (joined with a blank line).' })
  system?: string | unknown[];

  @ApiPropertyOptional({ type: [CustomToolDto] })
  tools?: CustomToolDto[];

  @ApiPropertyOptional({ description: '`{type: "auto" | "any" | "tool" | "none", name?, disable_parallel_tool_use?}`.', example: { type: 'auto' } })
  tool_choice?: Record<string, unknown>;

  @ApiPropertyOptional({ type: [String] })
  stop_sequences?: string[];

  @ApiPropertyOptional({ minimum: 0, maximum: 1 })
  temperature?: number;

  @ApiPropertyOptional({ minimum: 0, maximum: 1 })
  top_p?: number;

  @ApiPropertyOptional({ minimum: 0, description: 'Sent to Anthropic upstreams; dropped where the provider has no top_k.' })
  top_k?: number;

  @ApiPropertyOptional({ description: '`user_id` (at most 256 characters kept) is the usage record\'s user id.', example: { user_id: 'user-42' } })
  metadata?: Record<string, unknown>;

  @ApiPropertyOptional({
    description:
      'Sent as it came to Anthropic deployments (a budget not below a lowered max_tokens is lowered); elsewhere a `reasoning_effort` by budget, for models that reason (docs/api.md).',
    example: { type: 'enabled', budget_tokens: 2048 },
  })
  thinking?: Record<string, unknown>;

  @ApiPropertyOptional({
    description: 'Sent as it came to Anthropic deployments. Elsewhere `format: {type: "json_schema", schema}` (structured output) becomes `response_format` (json_schema), and `effort` is dropped.',
    example: { format: { type: 'json_schema', schema: { type: 'object', properties: { title: { type: 'string' } }, required: ['title'] } } },
  })
  output_config?: Record<string, unknown>;

  @ApiPropertyOptional({ default: false, description: 'Server-Sent Events in Anthropic\'s order.' })
  stream?: boolean;
}
