import { ApiExtraModels, ApiProperty, ApiPropertyOptional, getSchemaPath } from '@nestjs/swagger';
import { IsArray, IsBoolean, IsObject, IsOptional, IsString, ValidateIf } from 'class-validator';
import { ApiError } from '../../common/errors/api-error';
import { MAX_USER_ID_LENGTH } from '../../conversations/dto/conversation-requests.dto';
import { Check, fieldsOf, Nested, Problem, validated } from './request-validation';

/**
 * The Responses API request (`POST /v1/responses`): these classes validate it (in the
 * service, so that a refused request still gets its usage record) and describe it in the
 * OpenAPI document. What cannot be mapped onto the chat core faithfully is refused with a 400
 * naming the field, never dropped silently. Fields passed on to the chat core as they are
 * (`max_output_tokens`, `temperature`, `subscription_id`, a function tool's fields) are
 * checked there, and its refusals renamed into these fields (`inResponsesTerms`).
 */

const unsupported = (why: string): Problem => ({ message: `is not supported: ${why}`, code: 'unsupported_parameter' });
const absent = (value: unknown) => value === undefined || value === null;
const mustBe = (what: string) => ({ message: `must be ${what}.` });

/** A string field, in the wording the refusals use. */
function IsText(): PropertyDecorator {
  return IsString({ message: 'must be a string.' });
}

export const MESSAGE_ROLES = ['user', 'system', 'developer', 'assistant'] as const;
export const INPUT_ITEM_TYPES = ['message', 'function_call', 'function_call_output', 'item_reference', 'file_search_call', 'web_search_call'] as const;
const CONTENT_PART_TYPES = ['input_text', 'output_text', 'refusal', 'input_image', 'input_file', 'input_audio'];

/**
 * `include` values accepted: `file_search_call.results` and `web_search_call.action.sources`
 * add the results to those output items; the others ask for what this service never produces.
 */
const INCLUDES = ['reasoning.encrypted_content', 'web_search_call.action.sources', 'web_search_call.results', 'file_search_call.results'];

/** OpenAI's metadata bounds: 16 pairs, keys up to 64 characters, values up to 512. */
const MAX_METADATA_PAIRS = 16;
const MAX_METADATA_KEY = 64;
const MAX_METADATA_VALUE = 512;

/** An input item's type: `{role, content}` without one is a message (EasyInputMessage). */
export function itemTypeOf(item: { type?: unknown; role?: unknown }): unknown {
  return item.type ?? (item.role !== undefined ? 'message' : undefined);
}

export class ContentPartDto {
  @ApiProperty({ enum: CONTENT_PART_TYPES, description: 'input_text (output_text and refusal in assistant messages), input_image, input_file or input_audio.' })
  @Check((type) =>
    typeof type === 'string' && CONTENT_PART_TYPES.includes(type)
      ? null
      : { message: 'must be input_text, input_image, input_file or input_audio.', code: 'unsupported_content' },
  )
  type: string;

  @ApiPropertyOptional({ description: 'input_text and output_text.' })
  @ValidateIf((part: ContentPartDto) => part.type === 'input_text' || part.type === 'output_text')
  @IsText()
  text?: string;

  @ApiPropertyOptional({ description: 'A refusal part (assistant messages).' })
  @ValidateIf((part: ContentPartDto) => part.type === 'refusal')
  @IsText()
  refusal?: string;

  @ApiPropertyOptional({ description: 'Not supported: uploaded files are not stored here.' })
  @Check((id, part) => {
    if (absent(id)) return null;
    if (part.type === 'input_image') return { message: ': uploaded files are not stored here; send image_url (a URL or a data URL).', code: 'unsupported_content' };
    if (part.type === 'input_file') return { message: ': only inline files are read here; send file_data (a base64 data URL) and filename.', code: 'unsupported_content' };
    return null;
  })
  file_id?: string;

  @ApiPropertyOptional({ description: 'Not supported: only inline files are read here.' })
  @Check((url, part) =>
    absent(url) || part.type !== 'input_file'
      ? null
      : { message: ': only inline files are read here; send file_data (a base64 data URL) and filename.', code: 'unsupported_content' },
  )
  file_url?: string;

  @ApiPropertyOptional({ description: 'input_image: a URL or a data URL.' })
  @ValidateIf((part: ContentPartDto) => part.type === 'input_image')
  @IsText()
  image_url?: string;

  @ApiPropertyOptional({ enum: ['auto', 'low', 'high'], description: 'input_image.' })
  @IsOptional()
  detail?: 'auto' | 'low' | 'high';

  @ApiPropertyOptional({ description: 'input_file: a base64 data URL (a PDF).' })
  @ValidateIf((part: ContentPartDto) => part.type === 'input_file')
  @IsText()
  file_data?: string;

  @ApiPropertyOptional({ description: 'input_file.' })
  @IsOptional()
  filename?: string;

  @ApiPropertyOptional({ description: 'input_audio: `{data: "<base64>", format: "wav" | "mp3"}`.' })
  @ValidateIf((part: ContentPartDto) => part.type === 'input_audio')
  @Check((audio) => {
    const { data, format } = (audio ?? {}) as { data?: unknown; format?: unknown };
    return typeof data === 'string' && (format === 'wav' || format === 'mp3') ? null : mustBe('{data, format: "wav" | "mp3"}');
  })
  input_audio?: { data: string; format: 'wav' | 'mp3' };
}

const isItem = (types: string[]) => (item: InputItemDto) => types.includes(itemTypeOf(item) as string);

export class InputItemDto {
  @ApiPropertyOptional({ enum: INPUT_ITEM_TYPES, description: 'Optional for a message (`{role, content}`).' })
  @Check((_type, item) => {
    const type = itemTypeOf(item);
    if (typeof type !== 'string') return { message: 'is required.' };
    return (INPUT_ITEM_TYPES as readonly string[]).includes(type) ? null : { message: `"${type}" is not supported.`, code: 'unsupported_input_item' };
  })
  type?: string;

  @ApiPropertyOptional({ description: 'item_reference: the id of an output item of a stored response. Other items: kept as their id, or one is given.' })
  @IsOptional()
  id?: string;

  @ApiPropertyOptional({ enum: MESSAGE_ROLES, description: 'message.' })
  @ValidateIf(isItem(['message']))
  @Check((role) => ((MESSAGE_ROLES as readonly unknown[]).includes(role) ? null : mustBe(`one of ${MESSAGE_ROLES.join(', ')}`)))
  role?: (typeof MESSAGE_ROLES)[number];

  @ApiPropertyOptional({
    description: 'message: a string or content parts. Only user messages carry images, files and audio.',
    oneOf: [{ type: 'string' }, { type: 'array', items: { $ref: getSchemaPath(ContentPartDto) } }],
  })
  @ValidateIf((item: InputItemDto) => isItem(['message'])(item) && typeof item.content !== 'string')
  @IsArray({ message: 'must be a string or an array of parts.' })
  @Nested(() => ContentPartDto)
  content?: string | ContentPartDto[];

  @ApiPropertyOptional({ description: 'function_call and function_call_output: the call answered.', example: 'call_abc' })
  @ValidateIf(isItem(['function_call', 'function_call_output']))
  @IsText()
  call_id?: string;

  @ApiPropertyOptional({ description: 'function_call.', example: 'get_weather' })
  @ValidateIf(isItem(['function_call']))
  @IsText()
  name?: string;

  @ApiPropertyOptional({ description: 'function_call: JSON-encoded arguments.', example: '{"city":"Paris"}' })
  @ValidateIf(isItem(['function_call']))
  @IsText()
  arguments?: string;

  @ApiPropertyOptional({ description: "function_call_output: the function's result, a string or input_text parts.", oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'object' } }] })
  @ValidateIf(isItem(['function_call_output']))
  @Check((output) => {
    if (typeof output === 'string') return null;
    if (!Array.isArray(output)) return mustBe('a string');
    const index = output.findIndex((part: { type?: unknown; text?: unknown } | null) => part?.type !== 'input_text' || typeof part.text !== 'string');
    return index < 0 ? null : { at: String(index), message: ": only input_text parts can be a function's output here." };
  })
  output?: string | Array<{ type: 'input_text'; text: string }>;
}

/**
 * A tool of the request. Which hosted tool types name a server tool depends on the registered
 * tools (ToolsService.hostedToolTypes): that, and what a hosted tool needs, is checked by the
 * translation (chat-translation.ts).
 */
export class ToolDto {
  @ApiProperty({
    description:
      'function; with an assistant, a hosted tool naming one of its server tools (web_search and its aliases such as ' +
      'web_search_preview, file_search). Other hosted tools (code_interpreter, computer_use_preview, image_generation, mcp, ...) ' +
      'answer 400 `unsupported_tool`.',
    example: 'function',
  })
  @IsText()
  type: string;

  @ApiPropertyOptional({ description: 'function: 1 to 64 letters, digits, underscores or dashes.', example: 'get_weather' })
  @IsOptional()
  name?: string;

  @ApiPropertyOptional({ description: 'function.' })
  @IsOptional()
  description?: string;

  @ApiPropertyOptional({ description: 'function: JSON Schema of the arguments.' })
  @IsOptional()
  parameters?: Record<string, unknown>;

  @ApiPropertyOptional({ description: 'function.' })
  @IsOptional()
  strict?: boolean;

  @ApiPropertyOptional({ description: "file_search: must be empty or absent (the assistant's own documents are searched).", type: [String] })
  @IsOptional()
  vector_store_ids?: string[];

  @ApiPropertyOptional({ description: "file_search: passages a call returns, 1 to 50 (over the assistant's setting).", minimum: 1, maximum: 50 })
  @IsOptional()
  max_num_results?: number;

  @ApiPropertyOptional({ description: 'file_search: `{score_threshold}`, 0 to 1: only passages scoring at least this.', example: { score_threshold: 0.5 } })
  @IsOptional()
  ranking_options?: { score_threshold?: number };

  @ApiPropertyOptional({
    description:
      'file_search: OpenAI\'s ComparisonFilter `{type: eq|ne|gt|gte|lt|lte|in|nin, key, value}` or CompoundFilter `{type: and|or, filters}` ' +
      'on the documents\' attributes: `filename`, `type` (MIME type or extension) and `uploaded_at` (unix seconds). At most 4 deep and 32 comparisons.',
    example: { type: 'and', filters: [{ type: 'eq', key: 'type', value: 'pdf' }, { type: 'gte', key: 'uploaded_at', value: 1767225600 }] },
  })
  @IsOptional()
  filters?: Record<string, unknown>;
}

export class TextFormatDto {
  @ApiProperty({ enum: ['text', 'json_object', 'json_schema'] })
  @Check((type) => (type === 'text' || type === 'json_object' || type === 'json_schema' ? null : mustBe('text, json_object or json_schema')))
  type: 'text' | 'json_object' | 'json_schema';

  @ApiPropertyOptional({ description: 'json_schema.' })
  @ValidateIf((format: TextFormatDto) => format.type === 'json_schema')
  @Check((name) => (typeof name === 'string' ? null : { at: '..', message: 'of type json_schema needs a name and a schema.' }))
  name?: string;

  @ApiPropertyOptional({ description: 'json_schema: the JSON Schema of the answer.' })
  @ValidateIf((format: TextFormatDto) => format.type === 'json_schema')
  @Check((schema) => (typeof schema === 'object' && schema !== null ? null : { at: '..', message: 'of type json_schema needs a name and a schema.' }))
  schema?: Record<string, unknown>;

  @ApiPropertyOptional({ description: 'json_schema.' })
  @IsOptional()
  strict?: boolean;

  @ApiPropertyOptional({ description: 'json_schema.' })
  @IsOptional()
  description?: string;
}

export class TextDto {
  @ApiPropertyOptional({ description: 'Not supported: the answer length is set with max_output_tokens.' })
  @Check((verbosity) => (absent(verbosity) ? null : unsupported('the answer length is set with max_output_tokens.')))
  verbosity?: string;

  @ApiPropertyOptional({ type: () => TextFormatDto })
  @IsOptional()
  @IsObject({ message: 'must be an object.' })
  @Nested(() => TextFormatDto)
  format?: TextFormatDto;
}

export class ReasoningDto {
  @ApiPropertyOptional({ description: 'Not supported: reasoning summaries are not produced here.' })
  @Check((summary) => (absent(summary) ? null : unsupported('reasoning summaries are not produced here.')))
  summary?: string;

  @ApiPropertyOptional({ description: 'Forwarded to the model as reasoning_effort.', example: 'low' })
  @IsOptional()
  @Check((effort) => (typeof effort === 'string' ? null : mustBe('a string such as "low", "medium" or "high"')))
  effort?: string;
}

/** An end user's id (`user`, or our `user_id`): as chat completions take it. */
const endUser = (value: unknown): Problem | null =>
  typeof value !== 'string' ? mustBe('a string') : value.length > MAX_USER_ID_LENGTH ? mustBe(`at most ${MAX_USER_ID_LENGTH} characters`) : null;

@ApiExtraModels(InputItemDto, ContentPartDto)
export class CreateResponseRequestDto {
  @ApiPropertyOptional({ description: 'A catalog model, or `assistant/<slug>` to run an assistant.', example: 'gpt-4o-mini' })
  @IsOptional()
  @IsText()
  model?: string;

  @ApiPropertyOptional({ description: 'Runs an assistant (id or slug), as on chat completions; `model` then overrides its model.' })
  @IsOptional()
  @IsText()
  assistant_id?: string;

  @ApiPropertyOptional({
    description:
      'A string (one user message) or input items: messages (`role` user, system, developer or assistant; content a string or ' +
      '`input_text`, `input_image` (image_url), `input_file` (file_data, filename), `input_audio` parts), `function_call`, ' +
      '`function_call_output`, and `item_reference` to an output item of a stored response. Uploaded file ids are not supported. ' +
      'Required unless previous_response_id or conversation is given.',
    oneOf: [{ type: 'string' }, { type: 'array', items: { $ref: getSchemaPath(InputItemDto) } }],
    example: 'What is the capital of France?',
  })
  @ValidateIf((request: CreateResponseRequestDto) => typeof request.input !== 'string')
  @Check((input, request) => {
    if (input === undefined) return absent(request.previous_response_id) && absent(request.conversation) ? { message: 'is required.' } : null;
    return Array.isArray(input) ? null : mustBe('a string or an array of input items');
  })
  @Nested(() => InputItemDto)
  input?: string | InputItemDto[];

  @ApiPropertyOptional({ description: 'A system message before the input. Kept in the stored conversation, so a continuation does not need it again.' })
  @IsOptional()
  @IsText()
  instructions?: string;

  @ApiPropertyOptional({
    type: [ToolDto],
    description:
      'Function tools (`{type: "function", name, description, parameters, strict}`). With an assistant, `web_search` ' +
      '(also `web_search_preview`) and `file_search` name its server tools, which run in the server-side loop; the assistant ' +
      'must have them (else 400 `tool_not_enabled`), `vector_store_ids` must be empty (its own documents are searched).',
  })
  @IsOptional()
  @IsArray({ message: 'must be an array.' })
  @Nested(() => ToolDto)
  tools?: ToolDto[];

  @ApiPropertyOptional({ description: '"auto", "none", "required" or `{type: "function", name}`.', example: 'auto' })
  @IsOptional()
  @Check((choice) => {
    if (choice === 'auto' || choice === 'none' || choice === 'required') return null;
    const { type, name } = (choice ?? {}) as { type?: unknown; name?: unknown };
    if (type === 'function' && typeof name === 'string') return null;
    return {
      message: 'must be "auto", "none", "required" or {"type": "function", "name": ...}; hosted tool choices are not supported.',
      code: 'unsupported_parameter',
    };
  })
  tool_choice?: 'auto' | 'none' | 'required' | { type: 'function'; name: string };

  @ApiPropertyOptional({ minimum: 1, description: "Output cap; the hold covers it. At most the model's output limit.", example: 256 })
  @IsOptional()
  max_output_tokens?: number;

  @ApiPropertyOptional({ minimum: 0, maximum: 2, example: 0.7 })
  @IsOptional()
  temperature?: number;

  @ApiPropertyOptional({ minimum: 0, maximum: 1, example: 1 })
  @IsOptional()
  @Check((topP) => (typeof topP === 'number' && topP >= 0 && topP <= 1 ? null : mustBe('a number from 0 to 1')))
  top_p?: number;

  @ApiPropertyOptional({
    type: () => TextDto,
    description: '`{format: {type: "text" | "json_object" | "json_schema", name, schema, strict}}`: structured output.',
    example: { format: { type: 'json_schema', name: 'city', schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } },
  })
  @IsOptional()
  @IsObject({ message: 'must be an object.' })
  @Nested(() => TextDto)
  text?: TextDto;

  @ApiPropertyOptional({ description: 'Server-Sent Events of the Responses API (`response.created` ... `response.completed`).' })
  @IsOptional()
  @IsBoolean({ message: 'must be a boolean.' })
  stream?: boolean;

  @ApiPropertyOptional({ description: 'Accepted; the stream always ends with the usage.' })
  @IsOptional()
  stream_options?: Record<string, unknown>;

  @ApiPropertyOptional({
    description:
      'Default true: the turn is kept in a conversation (see `/v1/conversations`) and the response can be read, continued ' +
      '(`previous_response_id`) and deleted. false cannot be combined with previous_response_id or conversation.',
  })
  @IsOptional()
  @Check((store, request) => {
    if (typeof store !== 'boolean') return mustBe('a boolean');
    if (store || (absent(request.previous_response_id) && absent(request.conversation))) return null;
    return {
      message:
        ': false cannot continue a stored response or conversation here: the turn is always added to the conversation. ' +
        'Send the history in input instead.',
      code: 'unsupported_parameter',
    };
  })
  store?: boolean;

  @ApiPropertyOptional({ description: 'Continues a stored response (its conversation). Only the newest response of a conversation can be continued.' })
  @IsOptional()
  @IsText()
  previous_response_id?: string;

  @ApiPropertyOptional({ description: 'One of our conversations (an id, or `{id}`) to add this turn to.', oneOf: [{ type: 'string' }, { type: 'object' }] })
  @IsOptional()
  @Check((conversation, request) => {
    const id = typeof conversation === 'string' ? conversation : (conversation as { id?: unknown }).id;
    if (typeof id !== 'string') return mustBe('a conversation id or {"id": ...}');
    return absent(request.previous_response_id) ? null : { message: ': send previous_response_id or conversation, not both.' };
  })
  conversation?: string | { id: string };

  @ApiPropertyOptional({ description: `Up to ${MAX_METADATA_PAIRS} string pairs, kept on the response and its new conversation.` })
  @IsOptional()
  @Check((metadata) => {
    if (typeof metadata !== 'object' || metadata === null || Array.isArray(metadata)) return mustBe('an object of strings');
    const entries = Object.entries(metadata);
    if (entries.length > MAX_METADATA_PAIRS) return { message: `can have at most ${MAX_METADATA_PAIRS} keys.` };
    for (const [key, value] of entries) {
      if (key.length > MAX_METADATA_KEY) return { message: `keys can be at most ${MAX_METADATA_KEY} characters long.` };
      if (typeof value !== 'string' || value.length > MAX_METADATA_VALUE) return { at: key, ...mustBe(`a string of at most ${MAX_METADATA_VALUE} characters`) };
    }
    return null;
  })
  metadata?: Record<string, string>;

  @ApiPropertyOptional({ description: "Your end user's id: kept as `user_id` on the usage record.", maxLength: MAX_USER_ID_LENGTH })
  @IsOptional()
  @Check(endUser)
  user?: string;

  @ApiPropertyOptional({ description: 'As on chat completions; `user` when absent.', maxLength: MAX_USER_ID_LENGTH })
  @IsOptional()
  @Check(endUser)
  user_id?: string;

  @ApiPropertyOptional({ description: 'Subscription id, recorded in the usage record.' })
  @IsOptional()
  subscription_id?: string;

  @ApiPropertyOptional({ description: 'Forwarded to the model when tools are given.' })
  @IsOptional()
  @IsBoolean({ message: 'must be a boolean.' })
  parallel_tool_calls?: boolean;

  @ApiPropertyOptional({
    description:
      '`file_search_call.results` (the passages found: file_id, filename, score, text, attributes) and `web_search_call.action.sources` ' +
      '(the pages found); also accepted, with nothing to add: reasoning.encrypted_content, web_search_call.results.',
    type: [String],
  })
  @IsOptional()
  @Check((include) => {
    if (!Array.isArray(include)) return mustBe('an array of strings');
    const index = include.findIndex((value: unknown) => typeof value !== 'string' || !INCLUDES.includes(value));
    return index < 0 ? null : { at: String(index), ...unsupported(`"${String(include[index])}" cannot be included here.`) };
  })
  include?: string[];

  @ApiPropertyOptional({ description: 'Only false: responses run while the request is open.' })
  @IsOptional()
  @Check((background) => (background === true ? unsupported('responses run while the request is open; send background: false or leave it out.') : null))
  background?: boolean;

  @ApiPropertyOptional({ enum: ['auto', 'disabled'] })
  @IsOptional()
  @Check((truncation) => (truncation === 'auto' || truncation === 'disabled' ? null : mustBe('"auto" or "disabled"')))
  truncation?: 'auto' | 'disabled';

  @ApiPropertyOptional({ type: () => ReasoningDto })
  @IsOptional()
  @IsObject({ message: 'must be an object.' })
  @Nested(() => ReasoningDto)
  reasoning?: ReasoningDto;

  @ApiPropertyOptional({ enum: ['auto', 'default'] })
  @IsOptional()
  @Check((tier) => (tier === 'auto' || tier === 'default' ? null : unsupported('only "auto" and "default" are served.')))
  service_tier?: string;

  @ApiPropertyOptional({ description: 'Accepted and not used.' })
  @IsOptional()
  prompt_cache_key?: string;

  @ApiPropertyOptional({ description: 'Accepted and not used.' })
  @IsOptional()
  safety_identifier?: string;

  @ApiPropertyOptional({ description: 'Only 0: log probabilities are not returned here.' })
  @IsOptional()
  @Check((count) => (count === 0 ? null : unsupported('log probabilities are not returned by the Responses API here.')))
  top_logprobs?: number;

  @ApiPropertyOptional({ description: "Not supported: an assistant's max_tool_iterations bounds its server tool calls." })
  @IsOptional()
  @Check(() => unsupported("an assistant's max_tool_iterations bounds its server tool calls."))
  max_tool_calls?: number;

  @ApiPropertyOptional({ description: 'Not supported: use an assistant (assistant_id) for a stored prompt with tools.' })
  @IsOptional()
  @Check(() => unsupported('reusable prompts are not stored here; use an assistant (assistant_id) for a stored prompt with tools.'))
  prompt?: unknown;
}

/** Every top-level field of the request; any other is refused, as OpenAI refuses unknown ones. */
let knownFields: Set<string> | undefined;

/** The request validated: the DTO, or a 400 naming the first field at fault. */
export function validateResponsesRequest(raw: unknown): CreateResponseRequestDto {
  if (typeof raw !== 'object' || raw === null || Array.isArray(raw)) {
    throw ApiError.badRequest('The request body must be a JSON object.', undefined, 'invalid_body');
  }
  // An explicit null is an absent field, as OpenAI takes it (openai-python sends `None`s as null).
  const fields = Object.fromEntries(Object.entries(raw).filter(([, value]) => value !== null));
  knownFields ??= fieldsOf(CreateResponseRequestDto);
  for (const key of Object.keys(fields)) {
    if (!knownFields.has(key)) throw ApiError.badRequest(`Unrecognized request argument supplied: ${key}`, key, 'unknown_parameter');
  }
  return validated(CreateResponseRequestDto, fields);
}
