import { ApiProperty } from '@nestjs/swagger';
import { PageMetaDto } from '../../common/pagination';
import { SEARCH_CANDIDATE_LIMIT } from '../conversation-limits';
import {
  CONVERSATION_SOURCES,
  CONVERSATION_STATUSES,
  Conversation,
  ConversationMetadata,
  ConversationSource,
  ConversationStatus,
} from '../entities/conversation.entity';
import {
  ConversationMessage,
  STORED_MESSAGE_ROLES,
  StoredMessageRole,
  StoredToolCall,
} from '../entities/conversation-message.entity';

const CONVERSATION_ID = '5f0c1a52-8d0e-4a8e-9d51-0c3f4e2b7a10';
const MESSAGE_ID = '9b2f7f4e-3c1d-4e55-8a7b-6f0d2c9e1a33';
const TIMESTAMP = '2026-11-22T10:15:00.000Z';

export class ConversationDto {
  @ApiProperty({ format: 'uuid', example: CONVERSATION_ID })
  id: string;

  @ApiProperty({ enum: ['conversation'], example: 'conversation' })
  object: 'conversation';

  @ApiProperty({
    type: String,
    format: 'uuid',
    nullable: true,
    description: 'The assistant of the conversation; null when none, or when it was deleted since.',
    example: '0b8f6f0e-5c1e-4c47-9d8c-3f1f0b3c2a11',
  })
  assistant_id: string | null;

  @ApiProperty({ type: String, nullable: true, example: 'Refund for order #1042' })
  title: string | null;

  @ApiProperty({
    enum: CONVERSATION_SOURCES,
    description: '`api` when created through the API, `dashboard` when in the web dashboard.',
    example: 'api',
  })
  source: ConversationSource;

  @ApiProperty({ enum: CONVERSATION_STATUSES, example: 'active' })
  status: ConversationStatus;

  @ApiProperty({ type: String, nullable: true, description: 'Your end user\'s identifier.', example: 'user_8412' })
  user_id: string | null;

  @ApiProperty({
    type: 'object',
    additionalProperties: { type: 'string' },
    description: 'Up to 16 string key-value pairs.',
    example: { channel: 'web', ticket: 'T-1042' },
  })
  metadata: ConversationMetadata;

  @ApiProperty({ description: 'Messages stored in the conversation.', example: 4 })
  message_count: number;

  @ApiProperty({ description: 'Input tokens of all the chat requests of the conversation.', example: 1830 })
  total_input_tokens: number;

  @ApiProperty({ description: 'Output tokens of all the chat requests of the conversation.', example: 412 })
  total_output_tokens: number;

  @ApiProperty({ description: 'Cost of all its chat requests in millicents; may be fractional.', example: 52.17 })
  total_cost_millicents: number;

  @ApiProperty({ format: 'date-time', example: TIMESTAMP })
  created_at: string;

  @ApiProperty({ format: 'date-time', description: 'Last change of the conversation or its counters.', example: TIMESTAMP })
  updated_at: string;

  @ApiProperty({ type: String, format: 'date-time', nullable: true, description: 'Null until the first message.', example: TIMESTAMP })
  last_message_at: string | null;

  static from(row: Conversation): ConversationDto {
    return {
      id: row.id,
      object: 'conversation',
      assistant_id: row.assistantId,
      title: row.title,
      source: row.source,
      status: row.status,
      user_id: row.userId,
      metadata: row.metadata,
      message_count: row.messageCount,
      total_input_tokens: row.totalInputTokens,
      total_output_tokens: row.totalOutputTokens,
      total_cost_millicents: row.totalCostMillicents,
      created_at: row.createdAt.toISOString(),
      updated_at: row.updatedAt.toISOString(),
      last_message_at: row.lastMessageAt ? row.lastMessageAt.toISOString() : null,
    };
  }
}

export class ConversationPageDto extends PageMetaDto {
  @ApiProperty({ type: [ConversationDto], description: 'Newest activity first: last message, or creation when none.' })
  data: ConversationDto[];
}

class FunctionCallDto {
  @ApiProperty({ example: 'get_weather' })
  name: string;

  @ApiProperty({ description: 'JSON-encoded arguments.', example: '{"city":"Paris"}' })
  arguments: string;
}

class ToolCallDto {
  @ApiProperty({ example: 'call_abc123' })
  id: string;

  @ApiProperty({ enum: ['function'], example: 'function' })
  type: 'function';

  @ApiProperty({ type: FunctionCallDto })
  function: FunctionCallDto;
}

export class ConversationMessageDto {
  @ApiProperty({ format: 'uuid', example: MESSAGE_ID })
  id: string;

  @ApiProperty({ enum: ['conversation.message'], example: 'conversation.message' })
  object: 'conversation.message';

  @ApiProperty({ enum: STORED_MESSAGE_ROLES, example: 'user' })
  role: StoredMessageRole;

  @ApiProperty({
    description:
      'The text. Content that was not a string (an array of text and image parts) is given as its JSON. ' +
      'An assistant message that only called tools has an empty string.',
    example: 'I was charged twice for order #1042.',
  })
  content: string;

  @ApiProperty({
    type: [ToolCallDto],
    nullable: true,
    description: 'Assistant messages: the tool calls the model made.',
    example: null,
  })
  tool_calls: StoredToolCall[] | null;

  @ApiProperty({ type: String, nullable: true, description: 'Tool messages: the call this message answers.', example: null })
  tool_call_id: string | null;

  @ApiProperty({ description: 'Tokens of this message.', example: 12 })
  tokens: number;

  @ApiProperty({
    type: 'array',
    items: { type: 'object' },
    nullable: true,
    description:
      "A reply's citations of what its server tools found, as the answer's `message.annotations` had them (`url_citation`, " +
      '`file_citation`); null when it had none.',
    example: null,
  })
  annotations: unknown[] | null;

  @ApiProperty({ format: 'date-time', example: TIMESTAMP })
  created_at: string;

  static from(row: ConversationMessage): ConversationMessageDto {
    return {
      id: row.id,
      object: 'conversation.message',
      role: row.role,
      content: row.content,
      tool_calls: row.toolCalls,
      tool_call_id: row.toolCallId,
      tokens: row.tokens,
      annotations: row.annotations,
      created_at: row.createdAt.toISOString(),
    };
  }
}

export class ConversationMessagePageDto extends PageMetaDto {
  @ApiProperty({ type: [ConversationMessageDto], description: 'Oldest first.' })
  data: ConversationMessageDto[];
}

export class ConversationWithMessagesDto extends ConversationDto {
  @ApiProperty({
    type: ConversationMessagePageDto,
    description:
      'A page of the messages, oldest first: `messages_limit` of them (100 by default), after `messages_after`. ' +
      'While `messages.has_more`, pass `messages.next_cursor` as `messages_after` for the next page.',
  })
  messages: ConversationMessagePageDto;
}

export class ConversationDeletedDto {
  @ApiProperty({ format: 'uuid', example: CONVERSATION_ID })
  id: string;

  @ApiProperty({ enum: ['conversation.deleted'], example: 'conversation.deleted' })
  object: 'conversation.deleted';

  @ApiProperty({ enum: [true], example: true })
  deleted: true;
}

export class SearchMatchedMessageDto {
  @ApiProperty({ format: 'uuid', example: MESSAGE_ID })
  id: string;

  @ApiProperty({ enum: STORED_MESSAGE_ROLES, example: 'user' })
  role: StoredMessageRole;

  @ApiProperty({ format: 'date-time', example: TIMESTAMP })
  created_at: string;
}

export class ConversationSearchResultDto {
  @ApiProperty({ enum: ['conversation.search_result'], example: 'conversation.search_result' })
  object: 'conversation.search_result';

  @ApiProperty({
    description:
      'Relevance (`ts_rank_cd`): the best matching message\'s rank plus the title\'s, where a word in the title ' +
      'weighs ten times a word in a message. Higher is better; only comparable within one search.',
    example: 1.2,
  })
  score: number;

  @ApiProperty({
    description:
      'Where it matched, with the matching words between `<mark>` and `</mark>`: up to two fragments of the best ' +
      'message joined by ` ... `, or the title when only the title matched. The rest is the stored text as is, ' +
      'not HTML-escaped: escape it before rendering it as HTML, keeping only the markers.',
    example: 'I was <mark>charged</mark> twice for order #1042 and want a <mark>refund</mark>',
  })
  snippet: string;

  @ApiProperty({
    type: SearchMatchedMessageDto,
    nullable: true,
    description: 'The best matching message of the conversation; null when only the title matched.',
  })
  message: SearchMatchedMessageDto | null;

  @ApiProperty({ type: ConversationDto })
  conversation: ConversationDto;
}

export class ConversationSearchPageDto {
  @ApiProperty({ type: [ConversationSearchResultDto], description: 'Best match first; one result per conversation.' })
  data: ConversationSearchResultDto[];

  @ApiProperty({ description: 'Whether more results follow this page.', example: false })
  has_more: boolean;

  @ApiProperty({
    type: Number,
    nullable: true,
    description: 'Pass as `offset` to get the next page; null on the last page.',
    example: null,
  })
  next_offset: number | null;

  @ApiProperty({
    type: String,
    format: 'date-time',
    nullable: true,
    description:
      `Only the newest ${SEARCH_CANDIDATE_LIMIT.toLocaleString('en-US')} matches (a matching message, by its time; a ` +
      'matching title, by its conversation\'s last activity) are ranked. When more exist, the time of the oldest match ' +
      'ranked: the results come from matches at or after it. Null when the search reached the oldest match.',
    example: null,
  })
  searched_until: string | null;

  @ApiProperty({
    type: String,
    nullable: true,
    description:
      'Pass as `before` (with the same `q` and filters, `offset` 0) to rank the next older matches; null when no older ' +
      'match is left. A conversation may then appear again, for its older messages.',
    example: null,
  })
  next_before: string | null;
}

export class ConversationStatsTotalsDto {
  @ApiProperty({ example: 42 })
  conversations: number;

  @ApiProperty({ description: 'Messages stored in all conversations.', example: 318 })
  messages: number;

  @ApiProperty({ example: 81234 })
  input_tokens: number;

  @ApiProperty({ example: 20417 })
  output_tokens: number;

  @ApiProperty({ description: 'Input plus output tokens.', example: 101651 })
  total_tokens: number;

  @ApiProperty({ description: 'In millicents; may be fractional.', example: 4210.5 })
  cost_millicents: number;
}

export class ConversationStatsByStatusDto {
  @ApiProperty({ example: 37 })
  active: number;

  @ApiProperty({ example: 5 })
  archived: number;
}

export class ConversationStatsBySourceDto {
  @ApiProperty({ example: 40 })
  api: number;

  @ApiProperty({ example: 2, description: "Started in the dashboard's playground." })
  dashboard: number;

  @ApiProperty({ example: 7, description: 'Visitors of an embedded chat widget.' })
  widget: number;
}

export class ConversationDailyActivityDto {
  @ApiProperty({ description: 'A UTC day, YYYY-MM-DD.', example: '2026-11-22' })
  date: string;

  @ApiProperty({ description: 'Conversations created that day.', example: 3 })
  conversations: number;

  @ApiProperty({ description: 'Messages stored that day.', example: 27 })
  messages: number;
}

export class ConversationStatsDto {
  @ApiProperty({ type: ConversationStatsTotalsDto, description: 'All the conversations of the workspace.' })
  totals: ConversationStatsTotalsDto;

  @ApiProperty({ type: ConversationStatsByStatusDto })
  by_status: ConversationStatsByStatusDto;

  @ApiProperty({ type: ConversationStatsBySourceDto })
  by_source: ConversationStatsBySourceDto;

  @ApiProperty({
    type: [ConversationDailyActivityDto],
    description: 'The last 30 UTC days, today included, newest first; days without activity have zeros.',
  })
  daily: ConversationDailyActivityDto[];
}

export class ConversationStatsResponseDto {
  @ApiProperty({ type: ConversationStatsDto })
  data: ConversationStatsDto;
}
