import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsIn, IsOptional } from 'class-validator';
import { ASSISTANT_MODEL_PREFIX } from '../assistant-models';
import { MODEL_KINDS, type ModelDefinition, type ModelKind } from '../model-catalog';

export class ModelCapabilitiesDto {
  @ApiProperty({ example: true })
  vision: boolean;

  @ApiProperty({ example: true })
  function_calling: boolean;

  @ApiProperty({ description: 'The model reasons, and takes `reasoning_effort` (dropped on the others).', example: false })
  reasoning: boolean;
}

export class ModelDto {
  @ApiProperty({ description: 'Use as `model` in chat requests.', example: 'gpt-4o' })
  id: string;

  @ApiProperty({ enum: ['model'], example: 'model' })
  object: 'model';

  @ApiProperty({ description: 'Unix timestamp (seconds).', example: 1715367049 })
  created: number;

  @ApiProperty({ description: 'Provider name.', example: 'openai' })
  owned_by: string;

  @ApiProperty({ description: 'Context window in tokens.', example: 128000 })
  context_length: number;

  @ApiProperty({ type: ModelCapabilitiesDto })
  capabilities: ModelCapabilitiesDto;

  @ApiProperty({
    enum: MODEL_KINDS,
    description: '`chat`: for chat completions, Responses and Messages; `embedding`: for `POST /v1/embeddings` only.',
    example: 'chat',
  })
  kind: ModelKind;

  @ApiPropertyOptional({
    description: "Only on embedding models: the vectors' native size, and whether a request's `dimensions` may lower it.",
    example: { dimensions: 1536, adjustable: true },
  })
  embedding?: { dimensions: number; adjustable: boolean };

  @ApiPropertyOptional({
    description: 'Only on `assistant/<slug>` entries: the assistant, and the catalog model it runs on.',
    example: { id: '3f1c1f0e-8f5a-4c1e-9a59-0b6f7c1d2e3f', name: 'Support Bot', model: 'gpt-4o-mini' },
  })
  assistant?: { id: string; name: string; model: string };

  @ApiPropertyOptional({
    description: "Only on an alias's entry: the id of the catalog model it runs (its capabilities and prices are that model's).",
    example: 'gpt-4o',
  })
  alias_of?: string;

  /** A catalog model's entries: its own, then one per alias (so that clients that pick from the list see every name accepted). */
  static entriesOf(model: ModelDefinition): ModelDto[] {
    return [model.id, ...(model.aliases ?? [])].map((name) => ModelDto.named(model, name));
  }

  /** The entry of `name`, the model's id or one of its aliases. */
  static named(model: ModelDefinition, name: string): ModelDto {
    return name === model.id ? ModelDto.from(model) : { ...ModelDto.from(model), id: name, alias_of: model.id };
  }

  /** A workspace's assistant as a model entry: its capabilities are those of the model it runs on. */
  static fromAssistant(assistant: { id: string; name: string; slug: string; createdAt: Date }, model: ModelDefinition): ModelDto {
    return {
      ...ModelDto.from(model),
      id: `${ASSISTANT_MODEL_PREFIX}${assistant.slug}`,
      created: Math.floor(assistant.createdAt.getTime() / 1000),
      owned_by: 'assistant',
      assistant: { id: assistant.id, name: assistant.name, model: model.id },
    };
  }

  static from(model: ModelDefinition): ModelDto {
    return {
      id: model.id,
      object: 'model',
      created: model.created,
      owned_by: model.ownedBy,
      context_length: model.contextLength,
      capabilities: { vision: model.vision, function_calling: model.functionCalling, reasoning: model.reasoning === true },
      kind: model.kind ?? 'chat',
      ...(model.embedding ? { embedding: { dimensions: model.embedding.dimensions, adjustable: model.embedding.adjustableDimensions } } : {}),
    };
  }
}

export class ModelListDto {
  @ApiProperty({ enum: ['list'], example: 'list' })
  object: 'list';

  @ApiProperty({ type: [ModelDto] })
  data: ModelDto[];
}

export class ListModelsQueryDto {
  @ApiPropertyOptional({
    enum: ['true', 'false'],
    default: 'false',
    description: "`true` adds the workspace's assistants after the catalog, as `assistant/<slug>` entries.",
  })
  @IsOptional()
  @IsIn(['true', 'false'], { message: 'include_assistants must be true or false' })
  include_assistants?: 'true' | 'false';

  // Anthropic's paging, read (and checked) only in Anthropic's shape: see anthropic-models.ts.
  @ApiPropertyOptional({ description: "With `anthropic-version` only: entries per page, 1 to 1000 (20).", example: 20 })
  limit?: string;

  @ApiPropertyOptional({ description: 'With `anthropic-version` only: the page after this entry of the list.' })
  after_id?: string;

  @ApiPropertyOptional({ description: 'With `anthropic-version` only: the page before this entry of the list.' })
  before_id?: string;
}

export class AnthropicModelDto {
  @ApiProperty({ enum: ['model'] })
  type: 'model';

  @ApiProperty({ example: 'claude-sonnet-4-5' })
  id: string;

  @ApiProperty({ description: "The id; for an alias, followed by the model it runs; an assistant's name.", example: 'claude-sonnet-4-5 (gpt-4o)' })
  display_name: string;

  @ApiProperty({ description: 'RFC 3339.', example: '2024-05-10T18:50:49Z' })
  created_at: string;

  @ApiProperty({ description: 'Context window in tokens.', example: 128000 })
  max_input_tokens: number;

  @ApiProperty({ description: 'Output limit in tokens.', example: 16384, nullable: true })
  max_tokens: number | null;
}

export class AnthropicModelListDto {
  @ApiProperty({ type: [AnthropicModelDto] })
  data: AnthropicModelDto[];

  @ApiProperty()
  has_more: boolean;

  @ApiProperty({ nullable: true, type: String })
  first_id: string | null;

  @ApiProperty({ nullable: true, type: String })
  last_id: string | null;
}
