import { Module } from '@nestjs/common';
import { ChatModule } from '../chat/chat.module';
import { ModelsModule } from '../models/models.module';
import { ProvidersModule } from '../providers/providers.module';
import { MessagesErrorFilter } from './messages-error.filter';
import { MessagesController } from './messages.controller';
import { MessagesService } from './messages.service';

/** `POST /v1/messages` and `count_tokens`: the Anthropic Messages API, a translation onto the chat module's ChatService. */
@Module({
  imports: [ChatModule, ModelsModule, ProvidersModule],
  controllers: [MessagesController],
  providers: [MessagesService, MessagesErrorFilter],
})
export class MessagesModule {}
