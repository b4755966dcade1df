import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { XServiceDto } from '../../chat/dto/chat-completion-response.dto';

/** The Responses API's answers, as the OpenAPI document describes them (the request: create-response.dto.ts). */

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
