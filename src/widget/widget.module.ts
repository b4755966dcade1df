import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { ChatModule } from '../chat/chat.module';
import { ConversationsModule } from '../conversations/conversations.module';
import { LimitsModule } from '../limits/limits.module';
import { MailModule } from '../mail/mail.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { WidgetConversation } from './entities/widget-conversation.entity';
import { Widget } from './entities/widget.entity';
import { WidgetScriptController } from './widget-script.controller';
import { WidgetController } from './widget.controller';
import { VisitorTokens } from './visitor-tokens';
import { WidgetSpendingService } from './widget-spending.service';
import { WidgetsService } from './widgets.service';

/**
 * The embeddable chat widget: `GET /widget.js` and the public `/widget/v1/:widgetId/...`
 * endpoints it calls from other websites. Its settings page is the dashboard's (assistants),
 * through WidgetsService.
 */
@Module({
  imports: [TypeOrmModule.forFeature([Widget, WidgetConversation]), ChatModule, ConversationsModule, WorkspacesModule, LimitsModule, MailModule],
  controllers: [WidgetScriptController, WidgetController],
  providers: [WidgetsService, WidgetSpendingService, VisitorTokens],
  exports: [WidgetsService, WidgetSpendingService],
})
export class WidgetModule {}
