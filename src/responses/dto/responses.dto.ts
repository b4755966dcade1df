import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { XServiceDto } from '../../chat/dto/chat-completion-response.dto';

/**
 * Swagger documentation of the Responses API. The body is validated by
 * responses-request.ts inside the service (so that refusals name Responses fields), not by
 * these classes: they only describe it.
 */
export class CreateResponseRequestDto {
  @ApiPropertyOptional({ description: 'A catalog model, or `assistant/<slug>` to run an assistant.', example: 'gpt-4o-mini' })
  model?: string;

  @ApiPropertyOptional({ description: 'Runs an assistant (id or slug), as on chat completions; `model` then overrides its model.' })
  assistant_id?: string;

  @ApiPropertyOptional({
    description:
      'A string (one user message) or input items: messages (`role` user, system, developer or assistant; content a string or ' +
      '`input_text`, `input_image` (image_url), `input_file` (file_data, filename), `input_audio` parts), `function_call`, ' +
      '`function_call_output`, and `item_reference` to an output item of a stored response. Uploaded file ids are not supported.',
    oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'object' } }],
    example: 'What is the capital of France?',
  })
  input?: string | unknown[];

  @ApiPropertyOptional({ description: 'A system message before the input. Kept in the stored conversation, so a continuation does not need it again.' })
  instructions?: string;

  @ApiPropertyOptional({
    description:
      'Function tools (`{type: "function", name, description, parameters, strict}`). With an assistant, `web_search` ' +
      '(also `web_search_preview`) and `file_search` name its server tools, which run in the server-side loop; the assistant ' +
      'must have them (else 400 `tool_not_enabled`), `vector_store_ids` must be empty (its own documents are searched). ' +
      "Other hosted tools (code_interpreter, computer_use_preview, image_generation, mcp, ...) answer 400 `unsupported_tool`.",
    type: 'array',
    items: { type: 'object' },
  })
  tools?: unknown[];

  @ApiPropertyOptional({ description: '"auto", "none", "required" or `{type: "function", name}`.', example: 'auto' })
  tool_choice?: unknown;

  @ApiPropertyOptional({ description: 'Output cap; the hold covers it. At most the model\'s output limit.', example: 256 })
  max_output_tokens?: number;

  @ApiPropertyOptional({ example: 0.7 })
  temperature?: number;

  @ApiPropertyOptional({ example: 1 })
  top_p?: number;

  @ApiPropertyOptional({
    description: '`{format: {type: "text" | "json_object" | "json_schema", name, schema, strict}}`: structured output. `verbosity` is not supported.',
    example: { format: { type: 'json_schema', name: 'city', schema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } } },
  })
  text?: unknown;

  @ApiPropertyOptional({ description: 'Server-Sent Events of the Responses API (`response.created` ... `response.completed`).' })
  stream?: boolean;

  @ApiPropertyOptional({
    description:
      'Default true: the turn is kept in a conversation (see `/v1/conversations`) and the response can be read, continued ' +
      '(`previous_response_id`) and deleted. false cannot be combined with previous_response_id or conversation.',
  })
  store?: boolean;

  @ApiPropertyOptional({ description: 'Continues a stored response (its conversation). Only the newest response of a conversation can be continued.' })
  previous_response_id?: string;

  @ApiPropertyOptional({ description: 'One of our conversations (an id, or `{id}`) to add this turn to.' })
  conversation?: unknown;

  @ApiPropertyOptional({ description: 'Up to 16 string pairs, kept on the response and its new conversation.' })
  metadata?: Record<string, string>;

  @ApiPropertyOptional({ description: 'Your end user\'s id: kept as `user_id` on the usage record.' })
  user?: string;

  @ApiPropertyOptional({ description: 'Forwarded to the model when tools are given.' })
  parallel_tool_calls?: boolean;

  @ApiPropertyOptional({
    description:
      'Refused with 400 `unsupported_parameter`: `background: true`, `prompt`, `max_tool_calls`, `top_logprobs`, `reasoning.summary`, ' +
      '`service_tier` other than auto/default, `include` values other than those naming items never produced here.',
  })
  background?: boolean;
}

class OutputItemDto {
  @ApiProperty({ enum: ['message', 'function_call'] })
  type: string;

  @ApiProperty({ example: 'msg_6a1f...' })
  id: string;

  @ApiPropertyOptional({ description: 'message: `[{type: "output_text", text, annotations: []}]` (or a `refusal` part).' })
  content?: unknown[];

  @ApiPropertyOptional({ description: 'function_call: the id to answer with a `function_call_output` item.', example: 'call_abc' })
  call_id?: string;

  @ApiPropertyOptional({ example: 'get_weather' })
  name?: string;

  @ApiPropertyOptional({ example: '{"city":"Paris"}' })
  arguments?: string;

  @ApiProperty({ example: 'completed' })
  status: string;
}

class ResponseUsageDto {
  @ApiProperty({ example: 14 })
  input_tokens: number;

  @ApiProperty({ example: 8 })
  output_tokens: number;

  @ApiProperty({ example: 22 })
  total_tokens: number;

  @ApiProperty({ example: { cached_tokens: 0 } })
  input_tokens_details: unknown;

  @ApiProperty({ example: { reasoning_tokens: 0 } })
  output_tokens_details: unknown;
}

export class ResponseObjectDto {
  @ApiProperty({ example: 'resp_6a1f...' })
  id: string;

  @ApiProperty({ example: 'response' })
  object: string;

  @ApiProperty({ example: 1795000000 })
  created_at: number;

  @ApiProperty({ enum: ['completed', 'incomplete', 'failed', 'in_progress'], description: 'incomplete: cut at max_output_tokens (see incomplete_details).' })
  status: string;

  @ApiProperty({ example: 'gpt-4o-mini' })
  model: string;

  @ApiProperty({ type: [OutputItemDto] })
  output: OutputItemDto[];

  @ApiProperty({ type: ResponseUsageDto, nullable: true })
  usage: ResponseUsageDto | null;

  @ApiProperty({ type: Object, nullable: true, description: 'The conversation a stored response is in.', example: { id: '5f0c1a52-8d0e-4a8e-9d51-0c3f4e2b7a10' } })
  conversation: unknown;

  @ApiPropertyOptional({ type: XServiceDto })
  x_service?: XServiceDto;
}

export class DeletedResponseDto {
  @ApiProperty({ example: 'resp_6a1f...' })
  id: string;

  @ApiProperty({ example: 'response' })
  object: string;

  @ApiProperty({ example: true })
  deleted: boolean;
}

export class InputItemListDto {
  @ApiProperty({ example: 'list' })
  object: string;

  @ApiProperty({ type: 'array', items: { type: 'object' }, description: 'The input items as given, each with an id.' })
  data: unknown[];

  @ApiProperty({ type: String, nullable: true })
  first_id: string | null;

  @ApiProperty({ type: String, nullable: true })
  last_id: string | null;

  @ApiProperty({ example: false })
  has_more: boolean;
}
