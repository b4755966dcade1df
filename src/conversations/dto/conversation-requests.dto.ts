import { applyDecorators } from '@nestjs/common';
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsIn, IsNotEmpty, IsOptional, IsString, Matches, MaxLength, ValidateIf } from 'class-validator';
import { IsStringOfAtMost, OptionalEnum, OptionalInt, OptionalUuid } from '../../common/validation/decorators';
import {
  CONVERSATION_STATUSES,
  ConversationMetadata,
  ConversationStatus,
} from '../entities/conversation.entity';
import { SEARCH_CANDIDATE_LIMIT } from '../conversation-limits';
import { IsMetadata } from './metadata.validator';

export const MAX_TITLE_LENGTH = 512;
export const MAX_USER_ID_LENGTH = 256;
export const MAX_QUERY_LENGTH = 500;

const METADATA_EXAMPLE = { channel: 'web', ticket: 'T-1042' };

const METADATA_DOC = {
  type: 'object',
  additionalProperties: { type: 'string', maxLength: 512 },
  maxProperties: 16,
  description:
    'Up to 16 key-value pairs, as OpenAI\'s `metadata`: keys up to 64 characters, string values up to 512 characters. ' +
    '`null` is refused; send `{}` to clear it.',
  example: METADATA_EXAMPLE,
} as const;

/** `q` of the search, checked in this order (applyDecorators keeps it): a missing `q` is told it is missing. */
function IsSearchText() {
  return applyDecorators(
    IsString({ message: 'q must be a string: the text to search for' }),
    IsNotEmpty({ message: 'q must not be empty' }),
    Matches(/\S/, { message: 'q must not be blank' }),
    MaxLength(MAX_QUERY_LENGTH, { message: `q must be at most ${MAX_QUERY_LENGTH} characters` }),
  );
}

/** Filters shared by the list and the search. */
export class ConversationFiltersDto {
  @ApiPropertyOptional({
    description:
      'Only conversations of this assistant: its UUID or slug. An assistant that is not in this workspace is a `404` ' +
      '(code `assistant_not_found`, param `assistant_id`).',
    example: 'support-bot',
  })
  @IsOptional()
  @IsStringOfAtMost(200)
  assistant_id?: string;

  @ApiPropertyOptional({ description: 'Only conversations of this end user (exact match).', example: 'user_8412' })
  @IsOptional()
  @IsStringOfAtMost(MAX_USER_ID_LENGTH)
  user_id?: string;

  @ApiPropertyOptional({ example: 'active' })
  @OptionalEnum(CONVERSATION_STATUSES, 'Only conversations with this status; both when absent.')
  status?: ConversationStatus;
}

export class ListConversationsQueryDto extends ConversationFiltersDto {
  @ApiPropertyOptional({ example: 20 })
  @OptionalInt({ min: 1, max: 100, default: 20, description: 'Number of conversations to return, 1 to 100.' })
  limit?: number;

  @ApiPropertyOptional({ example: '5f0c1a52-8d0e-4a8e-9d51-0c3f4e2b7a10' })
  @OptionalUuid(
    'Return the conversations after this one (the `next_cursor` of the previous page). A conversation that is not ' +
      'in this workspace is a `400` naming `starting_after`.',
  )
  starting_after?: string;
}

export class SearchConversationsQueryDto extends ConversationFiltersDto {
  @ApiProperty({
    description:
      'What to look for, in web-search syntax (`websearch_to_tsquery`, English stemming): words must all occur, ' +
      '`"quoted phrases"` in order, `or` between alternatives, `-word` excludes. A conversation matches when its ' +
      'title or one of its messages matches the whole query.',
    example: 'refund "credit card" -paypal',
    maxLength: MAX_QUERY_LENGTH,
  })
  @IsSearchText()
  q: string;

  @ApiPropertyOptional({ example: 10 })
  @OptionalInt({ min: 1, max: 100, default: 20, description: 'Number of results to return, 1 to 100.' })
  limit?: number;

  @ApiPropertyOptional({ example: 0 })
  @OptionalInt({
    min: 0,
    max: 10_000,
    default: 0,
    description: 'Results are ranked, so they are paged by position: skip this many (the `next_offset` of the previous page).',
  })
  offset?: number;

  @ApiPropertyOptional({
    description:
      'Search the matches older than the previous window: the `next_before` of an earlier search (opaque). Only the ' +
      `newest ${SEARCH_CANDIDATE_LIMIT.toLocaleString('en-US')} matches are ranked in one search; \`offset\` pages ` +
      'within them. Another value is a `400` naming `before`.',
    example: 'MjAyNi0xMS0yN1QxNjo0MjowNy4xMjM0NTZafjliMmY3ZjRlLTNjMWQtNGU1NS04YTdiLTZmMGQyYzllMWEzMw',
  })
  @IsOptional()
  @IsStringOfAtMost(200)
  before?: string;
}

export class GetConversationQueryDto {
  @ApiPropertyOptional({ example: 100 })
  @OptionalInt({ min: 1, max: 1000, default: 100, description: 'Number of messages to return, 1 to 1000, oldest first.' })
  messages_limit?: number;

  @ApiPropertyOptional({ example: '9b2f7f4e-3c1d-4e55-8a7b-6f0d2c9e1a33' })
  @OptionalUuid(
    'Return the messages after this one (the `messages.next_cursor` of the previous page). A message that is not in ' +
      'this conversation is a `400` naming `messages_after`.',
  )
  messages_after?: string;
}

export class CreateConversationDto {
  @ApiPropertyOptional({
    type: String,
    nullable: true,
    maxLength: MAX_TITLE_LENGTH,
    description: 'A title; searchable.',
    example: 'Refund for order #1042',
  })
  @IsOptional()
  @IsStringOfAtMost(MAX_TITLE_LENGTH)
  title?: string | null;

  @ApiPropertyOptional({
    type: String,
    nullable: true,
    description:
      'The assistant of the conversation: its UUID or slug, in this workspace. Unknown, or another workspace\'s: `404` ' +
      '(code `assistant_not_found`, param `assistant_id`). Stored as the UUID.',
    example: 'support-bot',
  })
  @IsOptional()
  @IsStringOfAtMost(200)
  assistant_id?: string | null;

  @ApiPropertyOptional({
    type: String,
    nullable: true,
    maxLength: MAX_USER_ID_LENGTH,
    description: 'Your end user\'s identifier.',
    example: 'user_8412',
  })
  @IsOptional()
  @IsStringOfAtMost(MAX_USER_ID_LENGTH)
  user_id?: string | null;

  @ApiPropertyOptional(METADATA_DOC)
  @ValidateIf((dto: CreateConversationDto) => dto.metadata !== undefined)
  @IsMetadata()
  metadata?: ConversationMetadata;
}

export class UpdateConversationDto {
  @ApiPropertyOptional({
    type: String,
    nullable: true,
    maxLength: MAX_TITLE_LENGTH,
    description: 'A new title; `null` removes it.',
    example: 'Refund for order #1042 (resolved)',
  })
  @IsOptional()
  @IsStringOfAtMost(MAX_TITLE_LENGTH)
  title?: string | null;

  @ApiPropertyOptional({ enum: CONVERSATION_STATUSES, example: 'archived' })
  @ValidateIf((dto: UpdateConversationDto) => dto.status !== undefined)
  @IsIn(CONVERSATION_STATUSES as unknown as string[], {
    message: `status must be one of ${CONVERSATION_STATUSES.join(', ')}`,
  })
  status?: ConversationStatus;

  @ApiPropertyOptional({ ...METADATA_DOC, description: `${METADATA_DOC.description} Replaces the whole object, as OpenAI does.` })
  @ValidateIf((dto: UpdateConversationDto) => dto.metadata !== undefined)
  @IsMetadata()
  metadata?: ConversationMetadata;
}
