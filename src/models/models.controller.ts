import { Controller, Get, Headers, Inject, Param, Query, UseFilters } from '@nestjs/common';
import { ApiExtraModels, ApiHeader, ApiOperation, ApiParam, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { AnthropicModel, anthropicModelOf, AnthropicModelPage, anthropicPage } from './anthropic-models';
import { AnthropicModelDto, AnthropicModelListDto, ListModelsQueryDto, ModelDto, ModelListDto } from './dto/model.dto';
import { ASSISTANT_MODELS, AssistantModels, assistantOfModel } from './assistant-models';
import { ModelsErrorFilter } from './models-error.filter';
import { ModelsService } from './models.service';

const ANTHROPIC_VERSION = ApiHeader({
  name: 'anthropic-version',
  required: false,
  description: "Sent by Anthropic's SDKs and Claude Code: the answer (and any error) is then in Anthropic's shape.",
});

@ApiTags('Models')
@ApiExtraModels(AnthropicModelDto, AnthropicModelListDto)
@UseFilters(ModelsErrorFilter)
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
      'assistant, for clients that always send a model. With an `anthropic-version` header (Anthropic\'s SDKs, Claude Code), ' +
      "the same entries in Anthropic's shape (AnthropicModelListDto), paged by `limit`, `after_id` and `before_id`.",
  })
  @ANTHROPIC_VERSION
  @ApiStandardResponses({ ok: ModelListDto, errors: [400] })
  async list(
    @CurrentPrincipal() principal: Principal,
    @Query() query: ListModelsQueryDto,
    @Headers('anthropic-version') anthropicVersion?: string,
  ): Promise<ModelListDto | AnthropicModelPage> {
    const catalog = this.models.list().flatMap(ModelDto.entriesOf);
    // The specification's list is the catalog alone; assistants are listed only when asked for.
    const entries = query.include_assistants === 'true' ? [...catalog, ...(await this.assistants.list(principal.workspaceId))] : catalog;
    if (anthropicVersion === undefined) return { object: 'list', data: entries };
    // Anthropic's clients (Claude Code's model picker) list chat models only: an embedding model cannot answer them.
    return anthropicPage(entries.filter((entry) => entry.kind === 'chat').map((entry) => this.inAnthropicShape(entry)), query);
  }

  // `*id` so that ids with a slash (`assistant/support-bot`, `openai/gpt-4o` in a custom catalog) resolve too.
  @Get('*id')
  @ApiOperation({
    summary: 'Retrieve a model',
    description: "As `client.models.retrieve(id)` of the OpenAI SDK (or of Anthropic's, in its shape); an alias, `assistant/<slug>` too.",
  })
  @ApiParam({ name: 'id', example: 'gpt-4o' })
  @ANTHROPIC_VERSION
  @ApiStandardResponses({ ok: ModelDto, errors: [404] })
  async retrieve(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string | string[],
    @Headers('anthropic-version') anthropicVersion?: string,
  ): Promise<ModelDto | AnthropicModel> {
    const modelId = Array.isArray(id) ? id.join('/') : id;
    const assistantRef = assistantOfModel(modelId);
    const entry =
      assistantRef === undefined ? ModelDto.named(this.models.get(modelId, 'id'), modelId) : await this.assistants.get(principal.workspaceId, assistantRef);
    return anthropicVersion === undefined ? entry : this.inAnthropicShape(entry);
  }

  /** An entry in Anthropic's shape, with the output limit of the catalog model it runs. */
  private inAnthropicShape(entry: ModelDto): AnthropicModel {
    return anthropicModelOf(entry, this.models.find(entry.alias_of ?? entry.assistant?.model ?? entry.id)?.maxOutputTokens);
  }
}
