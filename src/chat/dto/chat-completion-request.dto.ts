import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { Type } from 'class-transformer';
import {
  ArrayMaxSize,
  ArrayNotEmpty,
  IsArray,
  IsBoolean,
  IsDefined,
  IsIn,
  IsObject,
  IsOptional,
  IsString,
  Matches,
  MaxLength,
  ValidateNested,
} from 'class-validator';
import { IsIntegerOfAtLeast, IsNumberBetween, IsStringOfAtMost } from '../../common/validation/decorators';
import { IsMessageContent } from './message-content.validator';

export const MESSAGE_ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;
/** What OpenAI accepts as a function's name. Without the `g` flag: it is shared, and `test` on a global one would keep state. */
export const FUNCTION_NAME_PATTERN = /^[a-zA-Z0-9_-]{1,64}$/;
export type MessageRole = (typeof MESSAGE_ROLES)[number];

export class FunctionCallDto {
  @ApiProperty({ example: 'get_weather' })
  @IsString()
  name: string;

  @ApiProperty({ description: 'JSON-encoded arguments.', example: '{"city":"Paris"}' })
  @IsString()
  arguments: string;
}

export class ToolCallDto {
  @ApiProperty({ example: 'call_abc123' })
  @IsString()
  id: string;

  @ApiProperty({ enum: ['function'] })
  @IsIn(['function'], { message: 'type must be "function"' })
  type: 'function';

  @ApiProperty({ type: FunctionCallDto })
  @IsDefined({ message: 'function is required in a tool call: {"name": ..., "arguments": ...}' })
  @ValidateNested()
  @Type(() => FunctionCallDto)
  function: FunctionCallDto;
}

import type { ContentPart } from '../../providers/provider-adapter';

// Declared beside the provider types, so that conversations (which store parts) need not import chat.
export type { ContentPart } from '../../providers/provider-adapter';

export class ChatMessageDto {
  @ApiProperty({ enum: MESSAGE_ROLES, example: 'user' })
  @IsIn(MESSAGE_ROLES as unknown as string[], { message: `role must be one of ${MESSAGE_ROLES.join(', ')}` })
  role: MessageRole;

  @ApiPropertyOptional({
    description:
      'A string, or an array of parts: `{type: "text", text}`, `{type: "image_url", image_url: {url}}`, ' +
      '`{type: "file", file: {file_data | file_id, filename?}}` (a PDF) and `{type: "input_audio", input_audio: {data, format: "wav" | "mp3"}}`.',
    oneOf: [{ type: 'string' }, { type: 'array', items: { type: 'object' } }],
    example: 'What is the capital of France?',
  })
  @IsMessageContent()
  content?: string | ContentPart[] | null;

  @ApiPropertyOptional({ description: 'An optional name for the participant.' })
  @IsOptional()
  @IsString()
  name?: string;

  @ApiPropertyOptional({ type: [ToolCallDto], description: 'Assistant messages: the tool calls the model made.' })
  @IsOptional()
  @IsArray()
  @ValidateNested({ each: true })
  @Type(() => ToolCallDto)
  tool_calls?: ToolCallDto[];

  @ApiPropertyOptional({ description: 'Tool messages: the id of the call this message answers.' })
  @IsOptional()
  @IsString()
  tool_call_id?: string;
}

export class FunctionDefinitionDto {
  @ApiProperty({ example: 'get_weather' })
  @IsString()
  @Matches(FUNCTION_NAME_PATTERN, { message: 'function.name must be 1 to 64 letters, digits, underscores or dashes' })
  name: string;

  @ApiPropertyOptional({ example: 'Current weather in a city' })
  @IsOptional()
  @IsString()
  description?: string;

  @ApiPropertyOptional({
    description: 'JSON Schema of the arguments.',
    example: { type: 'object', properties: { city: { type: 'string', description: 'City name' } }, required: ['city'] },
  })
  @IsOptional()
  @IsObject()
  parameters?: Record<string, unknown>;

  @ApiPropertyOptional()
  @IsOptional()
  @IsBoolean()
  strict?: boolean;
}

export class ToolDefinitionDto {
  @ApiProperty({ enum: ['function'], example: 'function' })
  @IsString()
  type: string;

  @ApiPropertyOptional({ type: FunctionDefinitionDto })
  @IsOptional()
  @ValidateNested()
  @Type(() => FunctionDefinitionDto)
  function?: FunctionDefinitionDto;
}

export class StreamOptionsDto {
  @ApiPropertyOptional({ description: 'Send a final chunk with `usage` before `[DONE]`.' })
  @IsOptional()
  @IsBoolean()
  include_usage?: boolean;
}

/**
 * The OpenAI chat request, with our extensions (`assistant_id`, `user_id`,
 * `subscription_id`, `conversation_id`). Fields not listed here are accepted and
 * forwarded to providers that support them (`top_p`, `seed`, `stop`, `response_format`, ...).
 * A field sent as `null` is treated as absent, as OpenAI does.
 */
export class ChatCompletionRequestDto {
  @ApiPropertyOptional({ description: 'Model id (direct mode). With assistant_id it overrides the assistant model.', example: 'gpt-4o-mini' })
  @IsOptional()
  @IsStringOfAtMost(200)
  model?: string;

  @ApiPropertyOptional({
    type: [String],
    description:
      'Direct mode: models to fall back on, in order, when the first cannot answer (every deployment failing or rate limited before its first byte), as OpenRouter accepts it. ' +
      'Without `model`, the first is the model; the answer\'s `model` says which one answered. The hold covers the most expensive. At most 5.',
    example: ['gpt-4o-mini', 'claude-haiku-4-5'],
  })
  @IsOptional()
  @IsArray({ message: 'models must be an array of model ids' })
  @ArrayNotEmpty({ message: 'models must name at least one model' })
  @ArrayMaxSize(5, { message: 'models can name at most 5 models' })
  @IsString({ each: true, message: 'each of models must be a model id' })
  @MaxLength(200, { each: true, message: 'each of models must be at most 200 characters' })
  models?: string[];

  @ApiPropertyOptional({ description: 'Assistant UUID or slug (assistant mode).' })
  @IsOptional()
  @IsStringOfAtMost(200)
  assistant_id?: string;

  @ApiProperty({ type: [ChatMessageDto] })
  @IsArray({ message: 'messages must be an array' })
  @ArrayNotEmpty({ message: 'messages must contain at least one message' })
  @ValidateNested({ each: true })
  @Type(() => ChatMessageDto)
  messages: ChatMessageDto[];

  @ApiPropertyOptional({ default: false })
  @IsOptional()
  @IsBoolean({ message: 'stream must be a boolean' })
  stream?: boolean;

  @ApiPropertyOptional({ type: StreamOptionsDto, description: 'Only with `stream: true` (400 otherwise, as OpenAI answers).' })
  @IsOptional()
  @ValidateNested()
  @Type(() => StreamOptionsDto)
  stream_options?: StreamOptionsDto;

  @ApiPropertyOptional({ type: [ToolDefinitionDto] })
  @IsOptional()
  @IsArray()
  @ValidateNested({ each: true })
  @Type(() => ToolDefinitionDto)
  tools?: ToolDefinitionDto[];

  /** Documented here; checked in chat-request.ts and forwarded as it came. */
  @ApiPropertyOptional({ minimum: 1, maximum: 128, default: 1, description: 'Number of choices; the wallet hold covers the output cap n times.' })
  n?: number;

  @ApiPropertyOptional({ minimum: 0, maximum: 2, example: 0.7 })
  @IsOptional()
  @IsNumberBetween(0, 2)
  temperature?: number;

  @ApiPropertyOptional({ minimum: 1, description: "At most the model's output limit." })
  @IsOptional()
  @IsIntegerOfAtLeast(1)
  max_tokens?: number;

  @ApiPropertyOptional({ minimum: 1, description: 'The newer name of max_tokens; the smaller of the two applies.' })
  @IsOptional()
  @IsIntegerOfAtLeast(1)
  max_completion_tokens?: number;

  @ApiPropertyOptional({ description: 'End-user id, recorded in the usage record.', example: 'user-42' })
  @IsOptional()
  @IsStringOfAtMost(256)
  user_id?: string;

  @ApiPropertyOptional({ description: 'Subscription id, recorded in the usage record.', example: 'sub_123' })
  @IsOptional()
  @IsStringOfAtMost(256)
  subscription_id?: string;

  @ApiPropertyOptional({ description: 'Continue a stored conversation: its id.' })
  @IsOptional()
  @IsStringOfAtMost(200)
  conversation_id?: string;

  /** Any other field of the OpenAI request, kept for forwarding. */
  [field: string]: unknown;
}
