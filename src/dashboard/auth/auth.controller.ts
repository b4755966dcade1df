import { Body, Get, Param, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { AccountsService } from '../../accounts/accounts.service';
import { MembersService } from '../../accounts/members.service';
import { PASSWORD_MIN_LENGTH } from '../../accounts/passwords';
import { ApiError } from '../../common/errors/api-error';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { MailService } from '../../mail/mail.service';
import { DashboardController, PublicPage } from '../dashboard.decorators';
import { LoginThrottle } from '../login-throttle';
import { VerificationMail } from './verification-mail';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { endSession, formErrors, safeNext, startSession } from '../sessions';

interface Form {
  [field: string]: string | undefined;
}

/** Sign-up, sign-in and out, email verification, password reset, and first-start sign-in links. */
@DashboardController()
export class AuthController {
  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly accounts: AccountsService,
    private readonly members: MembersService,
    private readonly mail: MailService,
    private readonly pages: PagesService,
    private readonly throttle: LoginThrottle,
    private readonly verification: VerificationMail,
  ) {}

  @Get('login')
  @PublicPage()
  async loginPage(@Req() req: PageRequest, @Res() res: Response, @Query('next') next?: string): Promise<void> {
    if (req.user) return this.pages.redirect(req, res, safeNext(next) ?? '/');
    // After a sign-out or a reset there is no session to carry a flash message.
    const notice =
      req.query.signed_out === '1'
        ? 'You are signed out.'
        : req.query.reset === '1'
          ? 'Your password is changed. Sign in with it.'
          : null;
    await this.pages.render(req, res, 'login', {
      next: safeNext(next),
      values: {},
      errors: {},
      ...(notice ? { flash: [{ kind: 'success', text: notice }] } : {}),
    });
  }

  @Post('login')
  @PublicPage()
  async login(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form, @Query('next') next?: string): Promise<void> {
    const email = form.email ?? '';
    await this.throttle.check(req, 'login', email);
    const user = await this.accounts.authenticate(email, form.password ?? '');
    if (!user) {
      // The same answer for an unknown email and a wrong password.
      return this.pages.render(
        req,
        res,
        'login',
        { next: safeNext(next), values: { email }, errors: { form: 'That email and password do not match an account.' } },
        401,
      );
    }
    await startSession(req, user.id);
    await this.pages.redirect(req, res, safeNext(next) ?? '/');
  }

  @Post('logout')
  @PublicPage()
  async logout(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await endSession(req, res);
    res.redirect(303, `${req.basePath}/login?signed_out=1`);
  }

  @Get('signup')
  @PublicPage()
  async signupPage(@Req() req: PageRequest, @Res() res: Response, @Query('invitation') token?: string): Promise<void> {
    const invitation = token ? await this.members.usableInvitation(token) : null;
    if (token && !invitation) return this.invalidInvitation(req, res);
    if (!invitation && this.config.dashboard.signup !== 'open') return this.signupClosed(req, res);
    await this.pages.render(req, res, 'signup', {
      invitation,
      invitationToken: token,
      values: { email: invitation?.email ?? '' },
      errors: {},
      minLength: PASSWORD_MIN_LENGTH,
    });
  }

  @Post('signup')
  @PublicPage()
  async signup(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const token = form.invitation || undefined;
    const invitation = token ? await this.members.usableInvitation(token) : null;
    if (token && !invitation) return this.invalidInvitation(req, res);
    if (!invitation && this.config.dashboard.signup !== 'open') return this.signupClosed(req, res);

    // Through an invitation the account gets the invited address, whatever the form says, and
    // it counts as verified: the link was sent to that mailbox.
    const values = { name: form.name ?? '', email: invitation?.email ?? form.email ?? '' };
    await this.throttle.check(req, 'signup', values.email);
    let signedUp;
    try {
      signedUp = await this.accounts.signUp(
        { name: values.name, email: values.email, password: form.password ?? '' },
        {
          firstWorkspace: invitation ? null : { tier: this.config.dashboard.signupDefaultTier },
          emailVerified: invitation !== null,
          onCreated: token ? (user, manager) => this.members.acceptInvitation(token, user.id, manager).then(() => undefined) : undefined,
        },
      );
    } catch (error) {
      const errors =
        error instanceof ApiError && error.code === 'email_taken'
          ? {
              email: invitation
                ? `An account with ${invitation.email} exists. Sign in with it, then open the invitation link again to accept.`
                : 'An account with this email exists. Sign in, or reset its password.',
            }
          : formErrors(error);
      return this.pages.render(
        req,
        res,
        'signup',
        { invitation, invitationToken: token, values, errors, minLength: PASSWORD_MIN_LENGTH },
        error instanceof ApiError && error.status === 409 ? 409 : 400,
      );
    }
    const { user, workspaceId, verificationToken } = signedUp;
    if (verificationToken) await this.verification.send(req, user.email, verificationToken);
    await startSession(req, user.id);
    await this.pages.redirect(req, res, `/w/${workspaceId ?? invitation!.workspaceId}`);
  }

  /** The link of the verification mail: GET, as mail clients open links. */
  @Get('verify-email/:token')
  @PublicPage()
  async verifyEmail(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    const userId = await this.accounts.consumeToken(token, 'verify_email');
    if (!userId) {
      return this.pages.render(
        req,
        res,
        'message',
        { title: 'Link expired', message: 'This verification link is invalid, used or expired. Sign in and ask for a new one.' },
        400,
      );
    }
    await this.accounts.markEmailVerified(userId);
    await this.pages.redirect(req, res, req.user ? '/' : '/login', { kind: 'success', text: 'Your email address is verified.' });
  }

  @Get('password/forgot')
  @PublicPage()
  async forgotPage(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.pages.render(req, res, 'forgot-password', { errors: {} });
  }

  @Post('password/forgot')
  @PublicPage()
  async forgot(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const email = (form.email ?? '').trim();
    await this.throttle.check(req, 'reset', email);
    const user = await this.accounts.findByEmail(email);
    if (user) {
      const token = await this.accounts.issueToken(user.id, 'reset_password');
      const link = this.pages.absoluteUrl(req, `/password/reset/${token}`);
      // Never shown in the page: whoever types an address must not receive its reset link.
      await this.mail.send({
        to: user.email,
        subject: 'Reset your password',
        text: `Someone asked to reset the password of your account. If it was you, open this link within an hour:\n\n${link}\n\nIf it was not, ignore this message.`,
        link,
      });
    }
    // The same page whether or not an account has this address.
    await this.pages.render(req, res, 'forgot-password', { sent: true, email, errors: {} });
  }

  @Get('password/reset/:token')
  @PublicPage()
  async resetPage(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    if (!(await this.accounts.tokenIsUsable(token, 'reset_password'))) return this.expiredLink(req, res, 'password/forgot');
    await this.pages.render(req, res, 'reset-password', { token, errors: {}, minLength: PASSWORD_MIN_LENGTH });
  }

  @Post('password/reset/:token')
  @PublicPage()
  async reset(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string, @Body() form: Form): Promise<void> {
    try {
      await this.accounts.resetPassword(token, form.password ?? '');
    } catch (error) {
      if (error instanceof ApiError && error.code === 'invalid_link') return this.expiredLink(req, res, 'password/forgot');
      return this.pages.render(
        req,
        res,
        'reset-password',
        { token, errors: formErrors(error), minLength: PASSWORD_MIN_LENGTH },
        400,
      );
    }
    // Whoever was signed in here (maybe someone else) is signed out; the person signs in with the new password.
    await endSession(req, res);
    res.redirect(303, `${req.basePath}/login?reset=1`);
  }

  /** The first-start link: a page with a button, so a link previewer that opens it spends nothing. */
  @Get('sign-in/:token')
  @PublicPage()
  async signInLinkPage(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    if (!(await this.accounts.tokenIsUsable(token, 'sign_in'))) return this.expiredLink(req, res, 'login');
    await this.pages.render(req, res, 'sign-in-link', { token });
  }

  @Post('sign-in/:token')
  @PublicPage()
  async signInWithLink(@Req() req: PageRequest, @Res() res: Response, @Param('token') token: string): Promise<void> {
    const userId = await this.accounts.consumeToken(token, 'sign_in');
    if (!userId) return this.expiredLink(req, res, 'login');
    await startSession(req, userId);
    // Straight to the workspace (the demo one at first start), whose overview asks for a
    // password: the first steps are there, not on the account page.
    const workspaces = await this.members.workspacesOf(userId);
    const workspace = workspaces.find((candidate) => candidate.role === 'owner') ?? workspaces[0];
    await this.pages.redirect(req, res, workspace ? `/w/${workspace.id}` : '/account', { kind: 'info', text: 'You are signed in.' });
  }

  private async signupClosed(req: PageRequest, res: Response): Promise<void> {
    const message =
      this.config.dashboard.signup === 'invite'
        ? 'New accounts need an invitation: ask someone in your team to invite you.'
        : 'New accounts are created by the operator of this service.';
    await this.pages.render(req, res, 'message', { title: 'Sign-up is closed', message }, 403);
  }

  private async invalidInvitation(req: PageRequest, res: Response): Promise<void> {
    await this.pages.render(
      req,
      res,
      'message',
      { title: 'Invitation not valid', message: 'This invitation is invalid, used, revoked or expired. Ask for a new one.' },
      400,
    );
  }

  private async expiredLink(req: PageRequest, res: Response, retry: string): Promise<void> {
    await this.pages.render(
      req,
      res,
      'message',
      {
        title: 'Link expired',
        message: 'This link is invalid, used or expired.',
        link: { href: `${req.basePath}/${retry}`, label: retry === 'login' ? 'Sign in' : 'Ask for a new link' },
      },
      400,
    );
  }
}
