import { ApiProperty } from '@nestjs/swagger';
import type { ModelDefinition } from '../model-catalog';

export class ModelCapabilitiesDto {
  @ApiProperty({ example: true })
  vision: boolean;

  @ApiProperty({ example: true })
  function_calling: boolean;
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

  static from(model: ModelDefinition): ModelDto {
    return {
      id: model.id,
      object: 'model',
      created: model.created,
      owned_by: model.ownedBy,
      context_length: model.contextLength,
      capabilities: { vision: model.vision, function_calling: model.functionCalling },
    };
  }
}

export class ModelListDto {
  @ApiProperty({ enum: ['list'], example: 'list' })
  object: 'list';

  @ApiProperty({ type: [ModelDto] })
  data: ModelDto[];
}
