import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { AssistantsModule } from '../assistants/assistants.module';
import { ConversationsController } from './conversations.controller';
import { ConversationsService } from './conversations.service';
import { ConversationMessage } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';

/** Conversation endpoints; exports the service the chat module uses for `conversation_id`. */
@Module({
  imports: [TypeOrmModule.forFeature([Conversation, ConversationMessage]), AssistantsModule],
  controllers: [ConversationsController],
  providers: [ConversationsService],
  exports: [ConversationsService],
})
export class ConversationsModule {}
