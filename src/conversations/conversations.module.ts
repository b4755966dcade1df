import { Module } from '@nestjs/common';
import { AssistantsModule } from '../assistants/assistants.module';
import { ConversationsController } from './conversations.controller';
import { ConversationsService } from './conversations.service';

/** Conversation endpoints; exports the service the chat module uses for `conversation_id`. */
@Module({
  imports: [AssistantsModule],
  controllers: [ConversationsController],
  providers: [ConversationsService],
  exports: [ConversationsService],
})
export class ConversationsModule {}
