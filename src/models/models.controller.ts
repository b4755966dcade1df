import { Controller, Get, Param } from '@nestjs/common';
import { ApiOperation, ApiParam, ApiTags } from '@nestjs/swagger';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { ModelDto, ModelListDto } from './dto/model.dto';
import { ModelsService } from './models.service';

@ApiTags('Models')
@Controller('v1/models')
export class ModelsController {
  constructor(private readonly models: ModelsService) {}

  @Get()
  @ApiOperation({ summary: 'List the models', description: 'The curated catalog; every model is available on every tier.' })
  @ApiStandardResponses({ ok: ModelListDto })
  list(): ModelListDto {
    return { object: 'list', data: this.models.list().map(ModelDto.from) };
  }

  // `*id` so that ids with a slash (`openai/gpt-4o` in a custom catalog) resolve too.
  @Get('*id')
  @ApiOperation({ summary: 'Retrieve a model', description: 'As `client.models.retrieve(id)` of the OpenAI SDK.' })
  @ApiParam({ name: 'id', example: 'gpt-4o' })
  @ApiStandardResponses({ ok: ModelDto, errors: [404] })
  retrieve(@Param('id') id: string | string[]): ModelDto {
    return ModelDto.from(this.models.get(Array.isArray(id) ? id.join('/') : id, 'id'));
  }
}
