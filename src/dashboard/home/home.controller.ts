import { Get, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { MembersService } from '../../accounts/members.service';
import { DashboardController, PublicPage } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

/** `/`: the sign-in page for strangers, else the workspace looked at last (or the first one). */
@DashboardController()
export class HomeController {
  constructor(
    private readonly members: MembersService,
    private readonly pages: PagesService,
  ) {}

  @Get()
  @PublicPage()
  async home(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    if (!req.user) return this.pages.redirect(req, res, '/login');
    const workspaces = await this.members.workspacesOf(req.user.id);
    const last = workspaces.find((workspace) => workspace.id === req.session.lastWorkspaceId);
    const target = last ?? workspaces[0];
    await this.pages.redirect(req, res, target ? `/w/${target.id}` : '/workspaces/new');
  }
}
