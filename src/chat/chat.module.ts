import { Module } from '@nestjs/common';
import { AssistantsModule } from '../assistants/assistants.module';
import { BillingModule } from '../billing/billing.module';
import { ServerDrainModule } from '../common/http/server-drain.module';
import { ConversationsModule } from '../conversations/conversations.module';
import { LimitsModule } from '../limits/limits.module';
import { MetricsModule } from '../metrics/metrics.module';
import { ModelsModule } from '../models/models.module';
import { ProvidersModule } from '../providers/providers.module';
import { UsageModule } from '../usage/usage.module';
import { WalletModule } from '../wallet/wallet.module';
import { ChatController } from './chat.controller';
import { ChatService } from './chat.service';

@Module({
  imports: [ModelsModule, ProvidersModule, WalletModule, UsageModule, AssistantsModule, ConversationsModule, LimitsModule, MetricsModule, BillingModule, ServerDrainModule],
  controllers: [ChatController],
  providers: [ChatService],
  // The dashboard's playground runs requests through the same service.
  exports: [ChatService],
})
export class ChatModule {}
