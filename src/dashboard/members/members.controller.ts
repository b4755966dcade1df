import { Body, Get, Param, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { ROLES } from '../../accounts/entities/membership.entity';
import { MembersService } from '../../accounts/members.service';
import { ApiError } from '../../common/errors/api-error';
import { MailService } from '../../mail/mail.service';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';

/**
 * Settings > Members: who belongs to the workspace, pending invitations, inviting, roles,
 * removal. Everyone in the workspace sees the lists; every change needs the owner role.
 */
@DashboardController('w/:workspaceId/settings')
export class MembersController {
  constructor(
    private readonly members: MembersService,
    private readonly mail: MailService,
    private readonly pages: PagesService,
  ) {}

  @Get('members')
  @RequireRole('member')
  async page(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.render(req, res, {});
  }

  @Post('invitations')
  @RequireRole('owner')
  async invite(@Req() req: PageRequest, @Res() res: Response, @Body() form: { email?: string; role?: string }): Promise<void> {
    const workspace = req.member!;
    const inviter = req.user!;
    const values = { email: String(form.email ?? ''), role: String(form.role ?? 'member') };
    let invitation;
    try {
      invitation = await this.members.inviteNewMember(workspace.id, values.email, values.role, inviter.id);
    } catch (error) {
      return this.render(req, res, { errors: formErrors(error), values }, statusOf(error));
    }
    const link = this.pages.absoluteUrl(req, `/invitations/${invitation.token}`);
    const delivery = await this.mail.send({
      to: invitation.email,
      subject: `${inviter.name} invited you to ${workspace.name}`,
      text:
        `${inviter.name} (${inviter.email}) invited you to join the workspace "${workspace.name}" on the Assistant Chat Service as ${values.role}.\n\n` +
        `Open this link within 7 days to accept (it works once):\n\n${link}\n\nIf you did not expect this, ignore this message.`,
      link,
    });
    const replaced = invitation.replaced ? ' The earlier invitation to this address no longer works.' : '';
    if (delivery === 'smtp') {
      this.pages.flash(req, { kind: 'success', text: `Invitation sent to ${invitation.email}.${replaced}` });
      return this.pages.redirect(req, res, `/w/${workspace.id}/settings/members`);
    }
    // No mail server, or it refused the message: the inviter passes the link on (it only works
    // for the invited address). It is shown once, in the answer to this POST (as a new API key
    // is), and never stored in the session.
    const why = delivery === 'failed' ? `The mail to ${invitation.email} could not be sent` : 'No mail server is configured';
    await this.render(
      req,
      res,
      {
        invitationLink: { email: invitation.email, href: link },
        flash: [
          {
            kind: 'info',
            text: `${why}, so send ${invitation.email} this invitation link yourself (it works once, for 7 days, for that address only).${replaced}`,
          },
        ],
      },
      201,
    );
  }

  @Post('invitations/:invitationId/revoke')
  @RequireRole('owner')
  async revoke(@Req() req: PageRequest, @Res() res: Response, @Param('invitationId') invitationId: string): Promise<void> {
    const workspaceId = req.member!.id;
    let revoked;
    try {
      revoked = await this.members.revokeInvitation(workspaceId, invitationId);
    } catch (error) {
      return this.render(req, res, { errors: formErrors(error) }, statusOf(error));
    }
    await this.pages.redirect(req, res, `/w/${workspaceId}/settings/members`, {
      kind: 'success',
      text: `The invitation to ${revoked.email} is revoked: its link no longer works.`,
    });
  }

  @Post('members/:userId/role')
  @RequireRole('owner')
  async changeRole(
    @Req() req: PageRequest,
    @Res() res: Response,
    @Param('userId') userId: string,
    @Body('role') role: string,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    let changed;
    try {
      changed = await this.members.changeRole(workspaceId, userId, String(role ?? ''), req.user!.id);
    } catch (error) {
      return this.render(req, res, { errors: formErrors(error) }, statusOf(error));
    }
    const you = userId === req.user!.id;
    await this.pages.redirect(req, res, `/w/${workspaceId}/settings/members`, {
      kind: 'success',
      text: you ? `You are now ${article(changed.role)} ${changed.role}.` : `${changed.name} is now ${article(changed.role)} ${changed.role}.`,
    });
  }

  @Post('members/:userId/remove')
  @RequireRole('owner')
  async remove(@Req() req: PageRequest, @Res() res: Response, @Param('userId') userId: string): Promise<void> {
    const workspace = req.member!;
    let removed;
    try {
      removed = await this.members.removeMember(workspace.id, userId, req.user!.id);
    } catch (error) {
      return this.render(req, res, { errors: formErrors(error) }, statusOf(error));
    }
    if (userId === req.user!.id) {
      return this.pages.redirect(req, res, '/', { kind: 'success', text: `You left ${workspace.name}.` });
    }
    await this.pages.redirect(req, res, `/w/${workspace.id}/settings/members`, {
      kind: 'success',
      text: `${removed.name} is removed from ${workspace.name}.`,
    });
  }

  private async render(
    req: PageRequest,
    res: Response,
    data: {
      errors?: Record<string, string>;
      values?: Record<string, string>;
      invitationLink?: { email: string; href: string };
      flash?: { kind: 'info'; text: string }[];
    },
    status = 200,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    const [members, invitations] = await Promise.all([this.members.members(workspaceId), this.members.pendingInvitations(workspaceId)]);
    await this.pages.render(
      req,
      res,
      'members',
      {
        members,
        invitations,
        ownerCount: members.filter((m) => m.role === 'owner').length,
        canManage: req.member!.role === 'owner',
        roles: ROLES,
        invitationLink: data.invitationLink ?? null,
        ...(data.flash ? { flash: data.flash } : {}),
        errors: data.errors ?? {},
        values: data.values ?? { email: '', role: 'member' },
        formatDate,
        // A page re-rendered after a POST is still the Members tab.
        path: `/w/${workspaceId}/settings/members`,
      },
      status,
    );
  }
}

function statusOf(error: unknown): number {
  return error instanceof ApiError ? error.status : 400;
}

function article(role: string): string {
  return role === 'admin' || role === 'owner' ? 'an' : 'a';
}

/** `2025-01-31` (UTC): dates in tables. */
function formatDate(value: Date | string): string {
  return new Date(value).toISOString().slice(0, 10);
}
