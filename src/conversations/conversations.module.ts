import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { AssistantsModule } from '../assistants/assistants.module';
import { ConversationSearch } from './conversation-search';
import { ConversationSearchStore } from './conversation-search-store';
import { ConversationStatsService } from './conversation-stats.service';
import { ConversationStatsStore } from './conversation-stats-store';
import { ConversationStore } from './conversation-store';
import { ConversationTurns } from './conversation-turns';
import { ConversationTurnsStore } from './conversation-turns-store';
import { ConversationsController } from './conversations.controller';
import { ConversationMessage } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';

/**
 * Conversation endpoints. Exports the store (CRUD), search and stats the dashboard, widget
 * and Responses API use, and the turns the chat module reads history from and writes to.
 */
@Module({
  imports: [TypeOrmModule.forFeature([Conversation, ConversationMessage]), AssistantsModule],
  controllers: [ConversationsController],
  providers: [ConversationStore, ConversationSearch, ConversationSearchStore, ConversationStatsService, ConversationStatsStore, ConversationTurns, ConversationTurnsStore],
  exports: [ConversationStore, ConversationSearch, ConversationStatsService, ConversationTurns],
})
export class ConversationsModule {}
