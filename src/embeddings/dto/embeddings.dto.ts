import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';

/** The body of `POST /v1/embeddings`, as OpenAI's; validated by the service (embedding-request.ts) so that refusals get a usage record. */
export class CreateEmbeddingRequestDto {
  @ApiProperty({ description: 'An embedding model of the catalog (`kind: "embedding"` in GET /v1/models).', example: 'text-embedding-3-small' })
  model: string;

  @ApiProperty({
    description:
      'A string, an array of strings, a token array (integers) or an array of token arrays: at most 2048 inputs, none empty, ' +
      "each within the model's input limit (8192 tokens for OpenAI's), at most 300,000 tokens in all; a token array's ids within the model's " +
      "vocabulary (0 to 100,276 for text-embedding-3-*).",
    oneOf: [
      { type: 'string' },
      { type: 'array', items: { type: 'string' } },
      { type: 'array', items: { type: 'integer' } },
      { type: 'array', items: { type: 'array', items: { type: 'integer' } } },
    ],
    example: 'The food was delicious and the waiter...',
  })
  input: string | string[] | number[] | number[][];

  @ApiPropertyOptional({
    description:
      "Fewer dimensions than the model's native size (1 to it), where the model allows it (text-embedding-3-*, gemini-embedding-001); a 400 elsewhere. " +
      'The shortened vectors are of unit length.',
    example: 256,
  })
  dimensions?: number;

  @ApiPropertyOptional({
    enum: ['float', 'base64'],
    default: 'float',
    description: "`base64`: each vector as the base64 of its little-endian float32 bytes (the OpenAI SDK's default; it decodes them to the same numbers as `float`).",
  })
  encoding_format?: 'float' | 'base64';

  @ApiPropertyOptional({ description: 'Your end user, kept on the usage record as its user id.', example: 'user-42' })
  user?: string;
}

class EmbeddingDto {
  @ApiProperty({ enum: ['embedding'] })
  object: 'embedding';

  @ApiProperty({ description: 'The input it is of, from 0.', example: 0 })
  index: number;

  @ApiProperty({
    description: 'The vector: numbers with `encoding_format: "float"`, a base64 string of little-endian float32 values with `"base64"`.',
    oneOf: [{ type: 'array', items: { type: 'number' } }, { type: 'string' }],
    example: [0.0023064255, -0.009327292, 0.015797347],
  })
  embedding: number[] | string;
}

class EmbeddingUsageDto {
  @ApiProperty({ description: "Input tokens, as the provider counted them (ours when it reports none): what was charged.", example: 8 })
  prompt_tokens: number;

  @ApiProperty({ example: 8 })
  total_tokens: number;
}

class EmbeddingXServiceDto {
  @ApiProperty({ description: 'Exact cost of this request in millicents: prompt_tokens times the input price; may be fractional.', example: 0.016 })
  cost_millicents: number;

  @ApiProperty({ type: String, nullable: true, description: 'Provider of the deployment that answered.', example: 'openai' })
  provider: string | null;

  @ApiProperty({ type: String, nullable: true, description: 'Label of the deployment that answered, from the model catalog.', example: 'openai' })
  deployment: string | null;

  @ApiProperty({ description: 'Upstream attempts, including failed ones on other deployments (not charged).', example: 1 })
  attempts: number;
}

export class CreateEmbeddingResponseDto {
  @ApiProperty({ enum: ['list'] })
  object: 'list';

  @ApiProperty({ type: [EmbeddingDto] })
  data: EmbeddingDto[];

  @ApiProperty({ example: 'text-embedding-3-small' })
  model: string;

  @ApiProperty({ type: EmbeddingUsageDto })
  usage: EmbeddingUsageDto;

  @ApiProperty({ type: EmbeddingXServiceDto })
  x_service: EmbeddingXServiceDto;
}
