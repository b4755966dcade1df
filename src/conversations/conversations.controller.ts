import { Body, Controller, Delete, Get, HttpCode, Param, Patch, Post, Query } from '@nestjs/common';
import { ApiBody, ApiOperation, ApiParam, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import { Idempotent } from '../common/http/idempotent.decorator';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { formatMegabytes, MESSAGES_PAGE_BYTES, SEARCH_CANDIDATE_LIMIT } from './conversation-limits';
import { ConversationSearch } from './conversation-search';
import { ConversationStatsService } from './conversation-stats.service';
import { ConversationStore } from './conversation-store';
import {
  ConversationDeletedDto,
  ConversationDto,
  ConversationMessageDto,
  ConversationPageDto,
  ConversationSearchPageDto,
  ConversationStatsResponseDto,
  ConversationWithMessagesDto,
} from './dto/conversation.dto';
import {
  CreateConversationDto,
  GetConversationQueryDto,
  ListConversationsQueryDto,
  SearchConversationsQueryDto,
  UpdateConversationDto,
} from './dto/conversation-requests.dto';

const ID_PARAM = {
  name: 'id',
  description:
    'The conversation\'s id. An unknown or malformed id, or another workspace\'s conversation, is a `404` with code ' +
    '`conversation_not_found`.',
  example: '5f0c1a52-8d0e-4a8e-9d51-0c3f4e2b7a10',
};

/**
 * Conversations of the caller's workspace. `search` and `stats` are declared before `:id`,
 * so that they are not taken for ids.
 */
@ApiTags('Conversations')
@Controller('v1/conversations')
export class ConversationsController {
  constructor(
    private readonly conversations: ConversationStore,
    private readonly conversationSearch: ConversationSearch,
    private readonly conversationStats: ConversationStatsService,
  ) {}

  @Get()
  @ApiOperation({
    summary: 'List conversations',
    description:
      'Newest activity first (the last message, or the creation when there is none), paged with `limit` and ' +
      '`starting_after`; filtered by `assistant_id`, `user_id` and `status`. A conversation that gets a message moves ' +
      'to the front, so a listing paged while messages arrive may show it twice or skip it.',
  })
  @ApiStandardResponses({ ok: ConversationPageDto, errors: [400, 404] })
  async list(
    @CurrentPrincipal() principal: Principal,
    @Query() query: ListConversationsQueryDto,
  ): Promise<ConversationPageDto> {
    const page = await this.conversations.list(principal.workspaceId, {
      limit: query.limit ?? 20,
      startingAfter: query.starting_after,
      assistantId: query.assistant_id,
      userId: query.user_id,
      status: query.status,
    });
    return { ...page, data: page.data.map(ConversationDto.from) };
  }

  @Post()
  @HttpCode(200)
  @ApiOperation({
    summary: 'Create a conversation',
    description:
      'Every field is optional. Answers `200` with the conversation, as OpenAI answers creations; its `source` is `api`. ' +
      'Messages are added by chat completions that carry its `conversation_id`.',
  })
  @ApiBody({ type: CreateConversationDto })
  @Idempotent({ scope: 'conversations.create' })
  @ApiStandardResponses({ ok: ConversationDto, errors: [400, 404, 409, 415] })
  async create(@CurrentPrincipal() principal: Principal, @Body() body: CreateConversationDto): Promise<ConversationDto> {
    const conversation = await this.conversations.create(principal.workspaceId, {
      title: body.title,
      assistantId: body.assistant_id,
      userId: body.user_id,
      metadata: body.metadata,
      source: 'api',
    });
    return ConversationDto.from(conversation);
  }

  @Get('search')
  @ApiOperation({
    summary: 'Search conversations',
    description:
      'Full-text search (PostgreSQL, English stemming) over titles and message text. One result per conversation, best ' +
      'match first, with its best matching message and a snippet where the matching words are between `<mark>` and ' +
      '`</mark>`. Takes the filters of the list; paged with `limit` and `offset`. `q` is required. Ranks the newest ' +
      `${SEARCH_CANDIDATE_LIMIT.toLocaleString('en-US')} matches only, ordered by score, then last activity (newest ` +
      'first), then id; when more exist, `searched_until` says how far back it looked and `before: next_before` ranks ' +
      'the next older ones.',
  })
  @ApiStandardResponses({ ok: ConversationSearchPageDto, errors: [400, 404] })
  async search(
    @CurrentPrincipal() principal: Principal,
    @Query() query: SearchConversationsQueryDto,
  ): Promise<ConversationSearchPageDto> {
    const page = await this.conversationSearch.search(principal.workspaceId, {
      q: query.q,
      limit: query.limit ?? 20,
      offset: query.offset ?? 0,
      before: query.before,
      assistantId: query.assistant_id,
      userId: query.user_id,
      status: query.status,
    });
    return {
      data: page.data.map((hit) => ({
        object: 'conversation.search_result',
        score: hit.score,
        snippet: hit.snippet,
        message: hit.message
          ? { id: hit.message.id, role: hit.message.role, created_at: hit.message.createdAt.toISOString() }
          : null,
        conversation: ConversationDto.from(hit.conversation),
      })),
      has_more: page.has_more,
      next_offset: page.next_offset,
      searched_until: page.searched_until?.toISOString() ?? null,
      next_before: page.next_before,
    };
  }

  @Get('stats')
  @ApiOperation({
    summary: 'Conversation statistics',
    description:
      'Totals of the workspace\'s conversations (count, messages, tokens, cost), counts by status and by source, and ' +
      'the last 30 UTC days (conversations created, messages stored), newest first.',
  })
  @ApiStandardResponses({ ok: ConversationStatsResponseDto })
  async stats(@CurrentPrincipal() principal: Principal): Promise<ConversationStatsResponseDto> {
    return { data: await this.conversationStats.stats(principal.workspaceId) };
  }

  @Get(':id')
  @ApiOperation({
    summary: 'Retrieve a conversation with its messages',
    description:
      'The conversation and a page of its messages, oldest first, under `messages`: `{data, has_more, next_cursor}`. ' +
      'A page holds at most `messages_limit` messages (100 by default, at most 1000) and stops before their content ' +
      `passes ${formatMegabytes(MESSAGES_PAGE_BYTES)} (UTF-8 bytes of the content and tool calls), so it can hold fewer ` +
      'messages than asked for; a single message larger than that comes alone. While `messages.has_more`, ask again ' +
      'with `messages_after` set to `messages.next_cursor`.',
  })
  @ApiParam(ID_PARAM)
  @ApiStandardResponses({ ok: ConversationWithMessagesDto, errors: [400, 404] })
  async retrieve(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Query() query: GetConversationQueryDto,
  ): Promise<ConversationWithMessagesDto> {
    const conversation = await this.conversations.get(principal.workspaceId, id);
    const messages = await this.conversations.messages(principal.workspaceId, conversation.id, {
      limit: query.messages_limit ?? 100,
      after: query.messages_after,
    });
    return {
      ...ConversationDto.from(conversation),
      messages: { ...messages, data: messages.data.map(ConversationMessageDto.from) },
    };
  }

  @Patch(':id')
  @ApiOperation({
    summary: 'Update a conversation',
    description:
      'Changes the given fields: `title` (`null` removes it), `status` (`active` or `archived`) and `metadata` ' +
      '(replaced as a whole). Answers the conversation.',
  })
  @ApiParam(ID_PARAM)
  @ApiBody({ type: UpdateConversationDto })
  @ApiStandardResponses({ ok: ConversationDto, errors: [400, 404, 415] })
  async update(
    @CurrentPrincipal() principal: Principal,
    @Param('id') id: string,
    @Body() body: UpdateConversationDto,
  ): Promise<ConversationDto> {
    const conversation = await this.conversations.update(principal.workspaceId, id, {
      title: body.title,
      status: body.status,
      metadata: body.metadata,
    });
    return ConversationDto.from(conversation);
  }

  @Delete(':id')
  @ApiOperation({ summary: 'Delete a conversation', description: 'Deletes the conversation and its messages, for good.' })
  @ApiParam(ID_PARAM)
  @ApiStandardResponses({ ok: ConversationDeletedDto, errors: [404] })
  async delete(@CurrentPrincipal() principal: Principal, @Param('id') id: string): Promise<ConversationDeletedDto> {
    const { id: deleted } = await this.conversations.delete(principal.workspaceId, id);
    return { id: deleted, object: 'conversation.deleted', deleted: true };
  }
}
