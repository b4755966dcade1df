import { Module } from '@nestjs/common';
import { AssistantsModule } from '../assistants/assistants.module';
import { ChatModule } from '../chat/chat.module';
import { ConversationsModule } from '../conversations/conversations.module';
import { ResponsesRefusalFilter } from './responses-refusal.filter';
import { ResponsesController } from './responses.controller';
import { ResponsesService } from './responses.service';
import { ResponsesStore } from './responses-store';

/** `POST /v1/responses` and stored responses: a translation onto the chat module's ChatService. */
@Module({
  imports: [ChatModule, ConversationsModule, AssistantsModule],
  controllers: [ResponsesController],
  providers: [ResponsesService, ResponsesStore, ResponsesRefusalFilter],
})
export class ResponsesModule {}
