import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';

export class XServiceDto {
  @ApiProperty({ description: 'Exact cost of this request in millicents; may be fractional.', example: 12.75 })
  cost_millicents: number;

  @ApiProperty({ description: 'Model calls made for this request (1 in direct mode).', example: 1 })
  iterations: number;

  @ApiProperty({ type: [String], description: 'Server-side tools that ran, e.g. web_search.', example: [] })
  tools_used: string[];

  @ApiProperty({ type: [String], nullable: true, description: 'URLs of generated files; null when none.', example: null })
  generated_files: string[] | null;

  @ApiProperty({ type: String, nullable: true, description: 'Provider of the deployment that answered (the last model call); null when none answered.', example: 'openai' })
  provider: string | null;

  @ApiProperty({ type: String, nullable: true, description: "Label of the deployment that answered, from the model catalog; null when none answered.", example: 'openai-eu' })
  deployment: string | null;

  @ApiProperty({ description: 'Upstream attempts of this request, including failed attempts on other deployments (which were not charged).', example: 1 })
  attempts: number;
}

class ResponseMessageDto {
  @ApiProperty({ example: 'assistant' })
  role: string;

  @ApiProperty({ type: String, nullable: true, example: 'Paris is the capital of France.' })
  content: string | null;

  @ApiPropertyOptional({
    description: 'Calls of client function tools; then finish_reason is "tool_calls".',
    example: [{ id: 'call_abc', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
  })
  tool_calls?: unknown[];

  @ApiPropertyOptional({
    description:
      "With an assistant's server tools: the answer's citations of what they found. `url_citation` (OpenAI's shape) for a web " +
      'page, `file_citation` (file_id: the document, filename, index, start_index, end_index) for a passage; the indices are ' +
      'the span of the marker ([1]) in `content`. Streams send them as `delta.annotations` before the finish.',
    example: [
      { type: 'url_citation', url_citation: { url: 'https://nodejs.org/blog/24', title: 'Node 24 released', start_index: 15, end_index: 18 } },
      { type: 'file_citation', file_citation: { file_id: '0f8e2c1a-4b7d-4e8a-9c3b-2d1f0e9a8b7c', filename: 'returns.md', index: 40, start_index: 40, end_index: 43 } },
    ],
  })
  annotations?: unknown[];
}

class ChoiceDto {
  @ApiProperty({ example: 0 })
  index: number;

  @ApiProperty({ type: ResponseMessageDto })
  message: ResponseMessageDto;

  @ApiProperty({ example: 'stop', description: 'stop, length or tool_calls' })
  finish_reason: string;
}

class UsageDto {
  @ApiProperty({ example: 14 })
  prompt_tokens: number;

  @ApiProperty({ example: 8 })
  completion_tokens: number;

  @ApiProperty({ example: 22 })
  total_tokens: number;
}

export class ChatCompletionResponseDto {
  @ApiProperty({ example: 'chatcmpl-123' })
  id: string;

  @ApiProperty({ example: 'chat.completion' })
  object: string;

  @ApiProperty({ example: 1795000000 })
  created: number;

  @ApiProperty({ example: 'gpt-4o-mini' })
  model: string;

  @ApiProperty({ type: [ChoiceDto] })
  choices: ChoiceDto[];

  @ApiProperty({ type: UsageDto })
  usage: UsageDto;

  @ApiProperty({ type: XServiceDto })
  x_service: XServiceDto;
}
