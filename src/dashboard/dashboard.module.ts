import { Module } from '@nestjs/common';
import { AccountsModule } from '../accounts/accounts.module';
import { ERROR_PAGE_RENDERER } from '../common/errors/error-pages';
import { LimitsModule } from '../limits/limits.module';
import { MailModule } from '../mail/mail.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { AccountController } from './account/account.controller';
import { AuthController } from './auth/auth.controller';
import { VerificationMail } from './auth/verification-mail';
import { DashboardGuard } from './dashboard.guard';
import { ErrorPagesRenderer } from './error-pages.renderer';
import { HomeController } from './home/home.controller';
import { LoginThrottle } from './login-throttle';
import { InvitationsController } from './members/invitations.controller';
import { MembersController } from './members/members.controller';
import { OverviewController } from './overview/overview.controller';
import { PagesService } from './pages.service';
import { WorkspacesController } from './workspaces/workspaces.controller';

/**
 * The web dashboard: server-rendered pages under `/` (beside `/v1`), calling the same
 * services as the API. Its middleware (sessions, forms, security headers, assets) is set
 * up by useDashboard() in dashboard.setup.ts; its guard checks CSRF, session and role.
 */
@Module({
  imports: [AccountsModule, WorkspacesModule, LimitsModule, MailModule],
  controllers: [HomeController, AuthController, AccountController, OverviewController, WorkspacesController, MembersController, InvitationsController],
  providers: [
    PagesService,
    DashboardGuard,
    LoginThrottle,
    VerificationMail,
    ErrorPagesRenderer,
    { provide: ERROR_PAGE_RENDERER, useExisting: ErrorPagesRenderer },
  ],
  exports: [ERROR_PAGE_RENDERER],
})
export class DashboardModule {}
