import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { XServiceDto } from '../../chat/dto/chat-completion-response.dto';

/** The Messages API's answers, as the OpenAPI document describes them (the request: create-message.dto.ts). */

class ResponseBlockDto {
  @ApiProperty({ enum: ['text', 'tool_use', 'thinking', 'redacted_thinking'], description: 'thinking and redacted_thinking (and text `citations`) as an Anthropic deployment sent them.' })
  type: string;

  @ApiPropertyOptional({ description: 'text: never empty.', example: 'Hello! How can I help?' })
  text?: string;

  @ApiPropertyOptional({ description: 'tool_use: answer it with a `tool_result` block of this `tool_use_id`.', example: 'call_abc123' })
  id?: string;

  @ApiPropertyOptional({ example: 'get_weather' })
  name?: string;

  @ApiPropertyOptional({ description: "tool_use: the call's arguments, parsed.", example: { city: 'Paris' } })
  input?: Record<string, unknown>;
}

class MessageUsageDto {
  @ApiProperty({ description: 'Input tokens not read from a cache.', example: 14 })
  input_tokens: number;

  @ApiProperty({ example: 8 })
  output_tokens: number;

  @ApiProperty({ type: Number, nullable: true, description: "Anthropic deployments' own count; null on translated upstreams.", example: null })
  cache_creation_input_tokens: number | null;

  @ApiProperty({ type: Number, nullable: true, example: 0 })
  cache_read_input_tokens: number | null;
}

class MessageXServiceDto extends XServiceDto {
  @ApiPropertyOptional({ description: "Set when max_tokens was above the model's output limit: the cap the request ran with.", example: 16384 })
  max_tokens_lowered_to?: number;
}

export class MessageObjectDto {
  @ApiProperty({ example: 'msg_6a1f0c...' })
  id: string;

  @ApiProperty({ enum: ['message'] })
  type: string;

  @ApiProperty({ enum: ['assistant'] })
  role: string;

  @ApiProperty({ description: 'The model that answered (a fallback may have).', example: 'gpt-4o-mini' })
  model: string;

  @ApiProperty({ type: [ResponseBlockDto] })
  content: ResponseBlockDto[];

  @ApiProperty({ enum: ['end_turn', 'max_tokens', 'stop_sequence', 'tool_use', 'refusal'], example: 'end_turn' })
  stop_reason: string;

  @ApiProperty({ type: String, nullable: true, example: null })
  stop_sequence: string | null;

  @ApiProperty({ type: MessageUsageDto })
  usage: MessageUsageDto;

  @ApiProperty({ type: MessageXServiceDto })
  x_service: MessageXServiceDto;
}

export class CountTokensResponseDto {
  @ApiProperty({ example: 14 })
  input_tokens: number;
}
