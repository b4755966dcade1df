import { Module } from '@nestjs/common';
import { AccountsModule } from '../accounts/accounts.module';
import { AssistantsModule } from '../assistants/assistants.module';
import { ChatModule } from '../chat/chat.module';
import { ConversationsModule } from '../conversations/conversations.module';
import { ModelsModule } from '../models/models.module';
import { ERROR_PAGE_RENDERER } from '../common/errors/error-pages';
import { LimitsModule } from '../limits/limits.module';
import { MailModule } from '../mail/mail.module';
import { UsageModule } from '../usage/usage.module';
import { WalletModule } from '../wallet/wallet.module';
import { WidgetModule } from '../widget/widget.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { AccountController } from './account/account.controller';
import { AssistantPagesModule } from './assistants/assistant-pages.module';
import { AssistantsController } from './assistants/assistants.controller';
import { DocumentsController } from './assistants/documents.controller';
import { WidgetPagesController } from './assistants/widget-pages.controller';
import { AuthController } from './auth/auth.controller';
import { BillingController } from './billing/billing.controller';
import { UsagePagesController } from './usage/usage-pages.controller';
import { VerificationMail } from './auth/verification-mail';
import { DashboardGuard } from './dashboard.guard';
import { ErrorPagesRenderer } from './error-pages.renderer';
import { HomeController } from './home/home.controller';
import { LoginThrottle } from './login-throttle';
import { InvitationsController } from './members/invitations.controller';
import { MembersController } from './members/members.controller';
import { KeysController } from './keys/keys.controller';
import { OverviewController } from './overview/overview.controller';
import { OverviewService } from './overview/overview.service';
import { ConversationPagesController } from './conversations/conversation-pages.controller';
import { OperatorModule } from '../operator/operator.module';
import { OperatorPagesController } from './operator/operator-pages.controller';
import { PagesService } from './pages.service';
import { PlaygroundController } from './playground/playground.controller';
import { LimitsPagesController } from './workspaces/limits.controller';
import { WorkspacesController } from './workspaces/workspaces.controller';

/**
 * The web dashboard: server-rendered pages under `/` (beside `/v1`), calling the same
 * services as the API. Its middleware (sessions, forms, security headers, assets) is set
 * up by useDashboard() in dashboard.setup.ts; its guard checks CSRF, session and role.
 */
@Module({
  imports: [AccountsModule, WorkspacesModule, LimitsModule, MailModule, WalletModule, UsageModule, AssistantsModule, ChatModule, ConversationsModule, ModelsModule, AssistantPagesModule, WidgetModule, OperatorModule],
  controllers: [HomeController, AuthController, AccountController, OverviewController, KeysController, WorkspacesController, MembersController, InvitationsController, PlaygroundController, AssistantsController, DocumentsController, WidgetPagesController, BillingController, ConversationPagesController, UsagePagesController, LimitsPagesController, OperatorPagesController],
  providers: [
    PagesService,
    OverviewService,
    DashboardGuard,
    LoginThrottle,
    VerificationMail,
    ErrorPagesRenderer,
    { provide: ERROR_PAGE_RENDERER, useExisting: ErrorPagesRenderer },
  ],
  exports: [ERROR_PAGE_RENDERER],
})
export class DashboardModule {}
