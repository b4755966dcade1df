import { Controller, Get, Inject, Param, Query } from '@nestjs/common';
import { ApiOperation, ApiParam, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { ListModelsQueryDto, ModelDto, ModelListDto } from './dto/model.dto';
import { ASSISTANT_MODELS, AssistantModels, assistantOfModel } from './assistant-models';
import { ModelsService } from './models.service';

@ApiTags('Models')
@Controller('v1/models')
export class ModelsController {
  constructor(
    private readonly models: ModelsService,
    @Inject(ASSISTANT_MODELS) private readonly assistants: AssistantModels,
  ) {}

  @Get()
  @ApiOperation({
    summary: 'List the models',
    description:
      'The curated catalog, each alias of a model as its own entry (with `alias_of`); every model is available on every tier. ' +
      "With `include_assistants=true`, the workspace's assistants follow as `assistant/<slug>`: that id as `model` runs the " +
      'assistant, for clients that always send a model.',
  })
  @ApiStandardResponses({ ok: ModelListDto, errors: [400] })
  async list(@CurrentPrincipal() principal: Principal, @Query() query: ListModelsQueryDto): Promise<ModelListDto> {
    const catalog = this.models.list().flatMap(ModelDto.entriesOf);
    // The specification's list is the catalog alone; assistants are listed only when asked for.
    if (query.include_assistants !== 'true') return { object: 'list', data: catalog };
    return { object: 'list', data: [...catalog, ...(await this.assistants.list(principal.workspaceId))] };
  }

  // `*id` so that ids with a slash (`assistant/support-bot`, `openai/gpt-4o` in a custom catalog) resolve too.
  @Get('*id')
  @ApiOperation({ summary: 'Retrieve a model', description: 'As `client.models.retrieve(id)` of the OpenAI SDK; an alias, `assistant/<slug>` too.' })
  @ApiParam({ name: 'id', example: 'gpt-4o' })
  @ApiStandardResponses({ ok: ModelDto, errors: [404] })
  async retrieve(@CurrentPrincipal() principal: Principal, @Param('id') id: string | string[]): Promise<ModelDto> {
    const modelId = Array.isArray(id) ? id.join('/') : id;
    const assistantRef = assistantOfModel(modelId);
    if (assistantRef === undefined) return ModelDto.named(this.models.get(modelId, 'id'), modelId);
    return this.assistants.get(principal.workspaceId, assistantRef);
  }
}
