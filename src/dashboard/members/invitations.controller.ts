import { Get, Param, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { MembersService } from '../../accounts/members.service';
import { ApiError } from '../../common/errors/api-error';
import { DashboardController, PublicPage, SignedIn } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

/**
 * The link of an invitation. Opening it spends nothing (a link previewer may open it):
 * a signed-in person joins with a button; anyone else signs up or signs in first.
 */
@DashboardController('invitations')
export class InvitationsController {
  constructor(
    private readonly members: MembersService,
    private readonly pages: PagesService,
  ) {}

  @Get(':token')
  @PublicPage()
  async page(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    const invitation = await this.members.usableInvitation(token);
    if (!invitation) return this.invalid(req, res);
    const membership = req.user ? await this.members.membership(req.user.id, invitation.workspaceId) : null;
    await this.pages.render(req, res, 'invitation', {
      invitation,
      token,
      currentRole: membership?.role ?? null,
      expires: invitation.expiresAt.toISOString().slice(0, 10),
    });
  }

  @Post(':token/accept')
  @SignedIn()
  async accept(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    const invitation = await this.members.usableInvitation(token);
    if (!invitation) return this.invalid(req, res);
    let joined;
    try {
      joined = await this.members.acceptInvitation(token, req.user!.id);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'invalid_invitation') return this.invalid(req, res);
      throw error;
    }
    req.session.lastWorkspaceId = joined.workspaceId;
    await this.pages.redirect(req, res, `/w/${joined.workspaceId}`, {
      kind: 'success',
      text: `You joined ${invitation.workspaceName}; your role is ${joined.role}.`,
    });
  }

  private async invalid(req: PageRequest, res: Response): Promise<void> {
    await this.pages.render(
      req,
      res,
      'message',
      {
        title: 'Invitation not valid',
        message: 'This invitation is invalid, used, revoked or expired. Ask the person who invited you for a new one.',
        inApp: true,
      },
      400,
    );
  }
}
