import { Get, Param, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { MembersService, UsableInvitation } from '../../accounts/members.service';
import { ApiError } from '../../common/errors/api-error';
import { DashboardController, PublicPage, SignedIn } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

/**
 * The link of an invitation. Opening it spends nothing (a link previewer may open it). It is
 * for one address: a person signed in with that address, verified, joins with a button;
 * anyone else is told whom it is for and to sign in (or sign up) with that address. The page
 * shows the invited address in full: only the link's holder sees it, and the real invitee
 * needs to know exactly which of their addresses to sign in with.
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
    await this.render(req, res, invitation, token);
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
      if (error instanceof ApiError && (error.code === 'invitation_for_another_address' || error.code === 'email_not_verified')) {
        return this.render(req, res, invitation, token, error.message, 403);
      }
      throw error;
    }
    req.session.lastWorkspaceId = joined.workspaceId;
    await this.pages.redirect(req, res, `/w/${joined.workspaceId}`, {
      kind: 'success',
      text: `You joined ${invitation.workspaceName}; your role is ${joined.role}.`,
    });
  }

  /** The invitation's page; `refusal`: why the signed-in account could not accept it. */
  private async render(
    req: PageRequest,
    res: Response,
    invitation: UsableInvitation,
    token: string,
    refusal: string | null = null,
    status = 200,
  ): Promise<void> {
    const user = req.user;
    const membership = user ? await this.members.membership(user.id, invitation.workspaceId) : null;
    await this.pages.render(
      req,
      res,
      'invitation',
      {
        invitation,
        token,
        currentRole: membership?.role ?? null,
        // Emails are stored lower-cased, invitations' too.
        forThisAccount: user ? user.email.toLowerCase() === invitation.email.toLowerCase() : false,
        verified: Boolean(user?.emailVerifiedAt),
        refusal,
        expires: invitation.expiresAt.toISOString().slice(0, 10),
      },
      status,
    );
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
