import { Body, Get, Post, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { AccountsService } from '../../accounts/accounts.service';
import { PASSWORD_MIN_LENGTH } from '../../accounts/passwords';
import { VerificationMail } from '../auth/verification-mail';
import { DashboardController, SignedIn } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors, safeNext, startSession } from '../sessions';

/** The signed-in person's own account: name, password, email verification. */
@DashboardController('account')
export class AccountController {
  constructor(
    private readonly accounts: AccountsService,
    private readonly pages: PagesService,
    private readonly verification: VerificationMail,
  ) {}

  @Get()
  @SignedIn()
  async page(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.render(req, res, {});
  }

  @Post('profile')
  @SignedIn()
  async updateProfile(@Req() req: PageRequest, @Res() res: Response, @Body('name') name: string): Promise<void> {
    try {
      await this.accounts.updateName(req.user!.id, name);
    } catch (error) {
      return this.render(req, res, formErrors(error), 400);
    }
    await this.pages.redirect(req, res, '/account', { kind: 'success', text: 'Saved.' });
  }

  /**
   * Every session of the account ends (sessions_valid_from moves to now); this browser gets
   * a new session, under a new id, so the person stays signed in here only.
   */
  @Post('password')
  @SignedIn()
  async changePassword(
    @Req() req: PageRequest,
    @Res() res: Response,
    @Body() form: { current_password?: string; password?: string; next?: string },
  ): Promise<void> {
    let changedAt: Date;
    try {
      changedAt = await this.accounts.changePassword(req.user!.id, form.password ?? '', form.current_password);
    } catch (error) {
      return this.render(req, res, formErrors(error), 400);
    }
    // regenerate() deletes the old session from the store and starts one under a new id.
    await startSession(req, req.user!.id, Math.max(Date.now(), changedAt.getTime()));
    // The overview's set-a-password form comes back to the overview.
    await this.pages.redirect(req, res, safeNext(form.next) ?? '/account', {
      kind: 'success',
      text: 'Your password is changed. Your other sessions have ended.',
    });
  }

  @Post('verification')
  @SignedIn()
  async resendVerification(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const user = req.user!;
    if (user.emailVerifiedAt) return this.pages.redirect(req, res, '/account', { kind: 'info', text: 'Your email address is already verified.' });
    const token = await this.accounts.issueToken(user.id, 'verify_email');
    await this.verification.send(req, user.email, token);
    await this.pages.redirect(req, res, '/account');
  }

  private async render(req: PageRequest, res: Response, errors: Record<string, string>, status = 200): Promise<void> {
    await this.pages.render(
      req,
      res,
      'account',
      { errors, hasPassword: await this.accounts.hasPassword(req.user!.id), minLength: PASSWORD_MIN_LENGTH },
      status,
    );
  }
}
