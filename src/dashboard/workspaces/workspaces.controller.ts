import { Body, Get, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { MembersService } from '../../accounts/members.service';
import { DocumentEmbeddings } from '../../assistants/documents/document-embeddings';
import { ApiError } from '../../common/errors/api-error';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { ModelsService } from '../../models/models.service';
import { WorkspacesService } from '../../workspaces/workspaces.service';
import { DashboardController, RequireRole, SignedIn } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';
import { tierLimits } from './tier-limits';

/** Settings > General (name, tier and limits, id, leaving), and creating a workspace. */
@DashboardController()
export class WorkspacesController {
  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly members: MembersService,
    private readonly workspaces: WorkspacesService,
    private readonly pages: PagesService,
    private readonly embeddings: DocumentEmbeddings,
    private readonly models: ModelsService,
  ) {}

  @Get('w/:workspaceId/settings')
  @RequireRole('member')
  async settings(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.renderSettings(req, res, {});
  }

  @Post('w/:workspaceId/settings')
  @RequireRole('owner')
  async rename(@Req() req: PageRequest, @Res() res: Response, @Body('name') name: string): Promise<void> {
    const workspaceId = req.member!.id;
    try {
      await this.members.renameWorkspace(workspaceId, name);
    } catch (error) {
      return this.renderSettings(req, res, formErrors(error), { name: String(name ?? '') }, 400);
    }
    await this.pages.redirect(req, res, `/w/${workspaceId}/settings`, { kind: 'success', text: 'The workspace is renamed.' });
  }

  @Post('w/:workspaceId/settings/embedding-model')
  @RequireRole('owner')
  async setEmbeddingModel(@Req() req: PageRequest, @Res() res: Response, @Body('embedding_model') model: string): Promise<void> {
    const workspaceId = req.member!.id;
    try {
      await this.embeddings.setWorkspaceModel(workspaceId, typeof model === 'string' && model !== '' ? model : null);
    } catch (error) {
      return this.renderSettings(req, res, formErrors(error), {}, error instanceof ApiError ? error.status : 400);
    }
    await this.pages.redirect(req, res, `/w/${workspaceId}/settings`, { kind: 'success', text: 'The embedding model of document search is saved.' });
  }

  @Post('w/:workspaceId/leave')
  @RequireRole('member')
  async leave(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const workspace = req.member!;
    try {
      await this.members.leave(workspace.id, req.user!.id);
    } catch (error) {
      return this.renderSettings(req, res, formErrors(error), {}, error instanceof ApiError ? error.status : 400);
    }
    if (req.session.lastWorkspaceId === workspace.id) delete req.session.lastWorkspaceId;
    await this.pages.redirect(req, res, '/', { kind: 'success', text: `You left ${workspace.name}.` });
  }

  @Get('workspaces/new')
  @SignedIn()
  async newWorkspace(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.pages.render(req, res, 'new-workspace', { errors: {}, values: {}, tier: this.config.dashboard.signupDefaultTier });
  }

  @Post('workspaces')
  @SignedIn()
  async create(@Req() req: PageRequest, @Res() res: Response, @Body('name') name: string): Promise<void> {
    const tier = this.config.dashboard.signupDefaultTier;
    let created: { id: string; name: string };
    try {
      created = await this.members.createWorkspaceFor(req.user!.id, name, tier);
    } catch (error) {
      return this.pages.render(
        req,
        res,
        'new-workspace',
        { errors: formErrors(error), values: { name: String(name ?? '') }, tier, path: '/workspaces/new' },
        400,
      );
    }
    await this.pages.redirect(req, res, `/w/${created.id}`, { kind: 'success', text: `${created.name} is created. You are its owner.` });
  }

  private async renderSettings(
    req: PageRequest,
    res: Response,
    errors: Record<string, string>,
    values: Record<string, string> = {},
    status = 200,
  ): Promise<void> {
    const member = req.member!;
    const workspace = await this.workspaces.get(member.id);
    const soleOwner = member.role === 'owner' && (await this.members.ownerCount(member.id)) === 1;
    await this.pages.render(
      req,
      res,
      'workspace-settings',
      {
        workspace,
        limits: tierLimits(workspace),
        embeddingModels: this.models.list().filter((model) => model.kind === 'embedding').map((model) => model.id),
        canRename: member.role === 'owner',
        soleOwner,
        errors,
        values,
        // A form re-rendered after a POST is still the General tab.
        path: `/w/${member.id}/settings`,
      },
      status,
    );
  }
}
