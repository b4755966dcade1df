import { Body, Get, NotFoundException, Param, Post, Req, Res } from '@nestjs/common';
import { isUUID } from 'class-validator';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { AssistantsService } from '../../assistants/assistants.service';
import { DocumentsService } from '../../assistants/documents/documents.service';
import type { Assistant } from '../../assistants/entities/assistant.entity';
import { ApiError } from '../../common/errors/api-error';
import { TIERS, UNLIMITED } from '../../limits/tier-policy';
import { ModelsService } from '../../models/models.service';
import { ToolsService } from '../../tools/tools.service';
import { WorkspacesService } from '../../workspaces/workspaces.service';
import { formatMillicents } from '../format';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import {
  AssistantFormValues,
  assistantRow,
  DESCRIPTION_MAX_LENGTH,
  formValues,
  modelChoices,
  NAME_MAX_LENGTH,
  newAssistantValues,
  readAssistantForm,
  SYSTEM_PROMPT_MAX_LENGTH,
  ToolSwitch,
  toolSwitches,
  valuesOf,
} from './assistant-form';
import { DocumentsPanel } from './documents-panel';

type Form = Record<string, string | string[] | undefined>;

/**
 * Assistants: everyone in the workspace sees the list and each assistant's settings (to
 * copy its id into their code); admins and owners create, edit and delete them, as they
 * manage keys. Every rule (slug syntax, the tier's maxAssistants under a lock, the model
 * catalog) is AssistantsService's, the same as for the CLI; this controller shows its
 * refusals as form errors.
 */
@DashboardController('w/:workspaceId/assistants')
export class AssistantsController {
  /** The registered server tools (ToolsService), as the editor's switches. */
  private readonly toolSwitches: ToolSwitch[];

  constructor(
    private readonly pages: PagesService,
    private readonly assistants: AssistantsService,
    private readonly documents: DocumentsService,
    private readonly models: ModelsService,
    private readonly documentsPanel: DocumentsPanel,
    private readonly workspaces: WorkspacesService,
    tools: ToolsService,
  ) {
    this.toolSwitches = toolSwitches(tools.descriptors());
  }

  @Get()
  @RequireRole('member')
  async list(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const workspaceId = req.member!.id;
    const [assistants, documents] = await Promise.all([this.assistants.list(workspaceId), this.documents.countsByAssistant(workspaceId)]);
    await this.pages.render(req, res, 'assistants', {
      assistants: assistants.map((assistant) => ({ ...assistantRow(assistant), documents: documents.get(assistant.id) ?? 0 })),
      limit: this.limitOf(req, assistants.length),
      canManage: roleAtLeast(req.member!.role, 'admin'),
    });
  }

  @Get('new')
  @RequireRole('admin')
  async newForm(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const count = (await this.assistants.list(req.member!.id)).length;
    await this.renderEditor(req, res, null, newAssistantValues(this.models.chatModels()), {}, 200, count);
  }

  @Post()
  @RequireRole('admin')
  async create(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const values = formValues(form, this.toolSwitches);
    const read = readAssistantForm(values, this.models.chatModels());
    if (!read.ok) return this.renderEditor(req, res, null, values, read.errors, 400);
    let created: Assistant;
    try {
      created = await this.assistants.create(req.member!.id, read.fields);
    } catch (error) {
      return this.renderEditor(req, res, null, values, fieldErrors(error), statusOf(error));
    }
    await this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${created.id}`, {
      kind: 'success',
      text: `The assistant "${created.name}" is created: call it with assistant_id "${created.slug}".`,
    });
  }

  @Get(':assistantId')
  @RequireRole('member')
  async edit(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    await this.renderEditor(req, res, assistant, valuesOf(assistant), {});
  }

  @Post(':assistantId')
  @RequireRole('admin')
  async update(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string, @Body() form: Form): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const values = formValues(form, this.toolSwitches);
    const read = readAssistantForm(values, this.models.chatModels(), assistant.tools);
    if (!read.ok) return this.renderEditor(req, res, assistant, values, read.errors, 400);
    if (!read.fields.slug) return this.renderEditor(req, res, assistant, values, { slug: 'An assistant needs a slug.' }, 400);
    let updated: Assistant;
    try {
      updated = await this.assistants.update(assistant.id, read.fields);
    } catch (error) {
      return this.renderEditor(req, res, assistant, values, fieldErrors(error), statusOf(error));
    }
    await this.pages.redirect(req, res, `/w/${req.member!.id}/assistants/${updated.id}`, {
      kind: 'success',
      text: `Saved "${updated.name}".`,
    });
  }

  /** The confirmation page: a page rather than a script's dialog, so it works without JavaScript. */
  @Get(':assistantId/delete')
  @RequireRole('admin')
  async confirmDelete(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    const documents = await this.documents.list(assistant.id);
    await this.pages.render(req, res, 'assistant-delete', { assistant: assistantRow(assistant), documents: documents.length });
  }

  @Post(':assistantId/delete')
  @RequireRole('admin')
  async delete(@Req() req: PageRequest, @Res() res: Response, @Param('assistantId') assistantId: string): Promise<void> {
    const assistant = await this.find(req, assistantId);
    await this.assistants.delete(assistant.id);
    await this.pages.redirect(req, res, `/w/${req.member!.id}/assistants`, {
      kind: 'success',
      text: `The assistant "${assistant.name}" and its documents are deleted: requests with assistant_id "${assistant.slug}" now get 404.`,
    });
  }

  /** An assistant of the route's workspace; anything else (another workspace's, a bad id) is a 404 page. */
  private async find(req: PageRequest, assistantId: string): Promise<Assistant> {
    if (!isUUID(assistantId)) throw new NotFoundException();
    try {
      return await this.assistants.resolve(req.member!.id, assistantId);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) throw new NotFoundException();
      throw error;
    }
  }

  /** "n of maxAssistants" for the tier. */
  private limitOf(req: PageRequest, count: number): { count: number; max: number | null; tier: string; reached: boolean } {
    const max = TIERS[req.member!.tier].maxAssistants;
    return { count, max: max === UNLIMITED ? null : max, tier: req.member!.tier, reached: max !== UNLIMITED && count >= max };
  }

  private async renderEditor(
    req: PageRequest,
    res: Response,
    assistant: Assistant | null,
    values: AssistantFormValues,
    errors: Record<string, string>,
    status = 200,
    count?: number,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    const canManage = roleAtLeast(req.member!.role, 'admin');
    await this.pages.render(
      req,
      res,
      'assistant-editor',
      {
        assistant: assistant ? assistantRow(assistant) : null,
        values,
        errors,
        canManage,
        models: modelChoices(this.models.chatModels()),
        embeddingModels: this.models.list().filter((model) => model.kind === 'embedding').map((model) => ({ id: model.id, label: `${model.id} · ${formatMillicents(model.inputPrice)} per 1M tokens` })),
        workspaceEmbeddingModel: (await this.workspaces.get(workspaceId)).embeddingModel,
        toolSwitches: this.toolSwitches,
        limit: count === undefined ? null : this.limitOf(req, count),
        maxLengths: { name: NAME_MAX_LENGTH, description: DESCRIPTION_MAX_LENGTH, systemPrompt: SYSTEM_PROMPT_MAX_LENGTH },
        apiBase: this.pages.absoluteUrl(req, '/v1'),
        documents: assistant ? await this.documentsPanel.data(req, assistant, canManage) : null,
        action: `${req.basePath ?? ''}/w/${workspaceId}/assistants${assistant ? `/${assistant.id}` : ''}`,
      },
      status,
    );
  }
}

/** A refusal of the service, keyed by the form's field (`form` for the whole form). Server errors are rethrown. */
export function fieldErrors(error: unknown): Record<string, string> {
  if (error instanceof ApiError && error.status < 500) {
    // file_search's options, checked by the service as `tools.<n>.<option>...`, are the editor's file_search_<option> fields.
    const option = /^tools\.\d+\.(max_num_results|ranking_options|filters)/.exec(error.param ?? '')?.[1];
    const field =
      error.code === 'slug_taken' ? 'slug' : option ? `file_search_${option === 'ranking_options' ? 'score_threshold' : option}` : (error.param ?? 'form');
    return { [field]: error.message };
  }
  throw error;
}

function statusOf(error: unknown): number {
  return error instanceof ApiError && error.status < 500 ? error.status : 500;
}
