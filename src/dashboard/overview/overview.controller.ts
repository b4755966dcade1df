import { Get, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

/** A workspace's front page. */
@DashboardController('w/:workspaceId')
export class OverviewController {
  constructor(private readonly pages: PagesService) {}

  @Get()
  @RequireRole('member')
  async overview(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    req.session.lastWorkspaceId = req.member!.id;
    await this.pages.render(req, res, 'overview', {});
  }
}
