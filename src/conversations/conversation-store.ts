import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { In, Repository, SelectQueryBuilder } from 'typeorm';
import { AssistantsService } from '../assistants/assistants.service';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import { MESSAGES_PAGE_BYTES } from './conversation-limits';
import { ConversationMessage } from './entities/conversation-message.entity';
import { Conversation, ConversationMetadata, ConversationSource, ConversationStatus } from './entities/conversation.entity';

export interface ConversationFilters {
  /** An assistant of the workspace, by UUID or slug; another workspace's is a 404. */
  assistantId?: string;
  userId?: string;
  status?: ConversationStatus;
}

export interface ConversationListQuery extends ConversationFilters {
  limit: number;
  /** The id of the last conversation of the previous page. */
  startingAfter?: string;
}

export interface NewConversation {
  title?: string | null;
  /** UUID or slug of an assistant of the workspace. */
  assistantId?: string | null;
  userId?: string | null;
  metadata?: ConversationMetadata;
  /** `api` unless created by the dashboard. */
  source?: ConversationSource;
}

export interface ConversationChanges {
  /** `null` removes the title. */
  title?: string | null;
  status?: ConversationStatus;
  /** Replaces the whole object. */
  metadata?: ConversationMetadata;
}

export interface MessagePageQuery {
  limit: number;
  /** The id of the last message of the previous page. */
  after?: string;
  /** Stops the page before the message content (as `content_bytes` counts it) exceeds this; `MESSAGES_PAGE_BYTES` by default. */
  maxBytes?: number;
}

/**
 * Conversations of a workspace and their messages, as the API and the dashboard create,
 * read, change and delete them. Every method is scoped by the workspace: another
 * workspace's conversation is as unknown as a missing one.
 */
@Injectable()
export class ConversationStore {
  constructor(
    @InjectRepository(Conversation) private readonly conversations: Repository<Conversation>,
    @InjectRepository(ConversationMessage) private readonly conversationMessages: Repository<ConversationMessage>,
    private readonly assistants: AssistantsService,
  ) {}

  async create(workspaceId: string, fields: NewConversation): Promise<Conversation> {
    const assistantId = fields.assistantId != null ? (await this.assistants.resolve(workspaceId, fields.assistantId)).id : null;
    const { id } = await this.conversations.save(
      this.conversations.create({
        workspaceId,
        assistantId,
        title: fields.title ?? null,
        userId: fields.userId ?? null,
        metadata: fields.metadata ?? {},
        source: fields.source ?? 'api',
      }),
    );
    return this.get(workspaceId, id);
  }

  /** Newest activity first (the last message, or the creation when none), with an OpenAI-style cursor. */
  async list(workspaceId: string, query: ConversationListQuery): Promise<Page<Conversation>> {
    const builder = this.conversations.createQueryBuilder('c').where('c.workspace_id = :workspaceId', { workspaceId });
    await this.applyFilters(builder, workspaceId, query);
    if (query.startingAfter) {
      const cursor = isUUID(query.startingAfter)
        ? await this.conversations.existsBy({ id: query.startingAfter, workspaceId })
        : false;
      if (!cursor) {
        throw ApiError.badRequest('starting_after does not name a conversation of this workspace.', 'starting_after');
      }
      // Compared in SQL: timestamps have microseconds, JavaScript dates only milliseconds.
      builder.andWhere(
        '(c.last_activity_at, c.id) < (SELECT cursor.last_activity_at, cursor.id FROM conversations cursor WHERE cursor.id = :cursorId)',
        { cursorId: query.startingAfter },
      );
    }
    const rows = await builder
      .orderBy('c.last_activity_at', 'DESC')
      .addOrderBy('c.id', 'DESC')
      .limit(query.limit + 1)
      .getMany();
    return toPage(rows, query.limit);
  }

  /** One conversation; unknown, malformed or another workspace's id: 404 `conversation_not_found`. */
  async get(workspaceId: string, conversationId: string): Promise<Conversation> {
    const conversation = isUUID(conversationId)
      ? await this.conversations.findOneBy({ id: conversationId, workspaceId })
      : null;
    if (!conversation) throw conversationNotFound(conversationId);
    return conversation;
  }

  /**
   * A page of the messages of a conversation of the workspace, oldest first: at most
   * `limit` messages, and no more content than `maxBytes` (a first message larger than that
   * comes alone), so that no response carries a whole large conversation.
   */
  async messages(workspaceId: string, conversationId: string, query: MessagePageQuery): Promise<Page<ConversationMessage>> {
    let afterPosition = 0;
    if (query.after) {
      const cursor = isUUID(query.after)
        ? await this.conversationMessages.findOne({ select: { position: true }, where: { id: query.after, conversationId, workspaceId } })
        : null;
      if (!cursor) throw ApiError.badRequest('messages_after does not name a message of this conversation.', 'messages_after');
      afterPosition = cursor.position;
    }
    // Sizes first, without reading the content (octet_length does not detoast), then the content of the page only.
    const sizes = await queryRows<{ id: string; bytes: string }>(
      this.conversations.manager,
      `SELECT id, octet_length(content) + coalesce(octet_length(tool_calls::text), 0) AS bytes
         FROM conversation_messages
        WHERE conversation_id = $1 AND workspace_id = $2 AND position > $3
        ORDER BY position
        LIMIT $4`,
      [conversationId, workspaceId, afterPosition, query.limit + 1],
    );
    const maxBytes = query.maxBytes ?? MESSAGES_PAGE_BYTES;
    const pageIds: string[] = [];
    let pageBytes = 0;
    for (const { id, bytes } of sizes.slice(0, query.limit)) {
      pageBytes += Number(bytes);
      if (pageIds.length > 0 && pageBytes > maxBytes) break;
      pageIds.push(id);
    }
    const rows = pageIds.length > 0 ? await this.conversationMessages.find({ where: { id: In(pageIds) }, order: { position: 'ASC' } }) : [];
    const hasMore = sizes.length > pageIds.length;
    return { data: rows, has_more: hasMore, next_cursor: hasMore ? pageIds[pageIds.length - 1] : null };
  }

  async update(workspaceId: string, conversationId: string, changes: ConversationChanges): Promise<Conversation> {
    const values: Partial<Conversation> = {};
    if (changes.title !== undefined) values.title = changes.title;
    if (changes.status !== undefined) values.status = changes.status;
    if (changes.metadata !== undefined) values.metadata = changes.metadata;
    if (Object.keys(values).length === 0 || !isUUID(conversationId)) return this.get(workspaceId, conversationId);
    const result = await this.conversations.update({ id: conversationId, workspaceId }, values);
    if (!result.affected) throw conversationNotFound(conversationId);
    return this.get(workspaceId, conversationId);
  }

  /** Deletes the conversation and, by the foreign key's cascade, its messages. */
  async delete(workspaceId: string, conversationId: string): Promise<{ id: string }> {
    const result = isUUID(conversationId)
      ? await this.conversations.delete({ id: conversationId, workspaceId })
      : { affected: 0 };
    if (!result.affected) throw conversationNotFound(conversationId);
    return { id: conversationId };
  }

  /** The list filters as query-builder conditions. */
  private async applyFilters(
    builder: SelectQueryBuilder<Conversation>,
    workspaceId: string,
    filters: ConversationFilters,
  ): Promise<void> {
    if (filters.assistantId !== undefined) {
      const assistant = await this.assistants.resolve(workspaceId, filters.assistantId);
      builder.andWhere('c.assistant_id = :assistantId', { assistantId: assistant.id });
    }
    if (filters.userId !== undefined) builder.andWhere('c.user_id = :userId', { userId: filters.userId });
    if (filters.status !== undefined) builder.andWhere('c.status = :status', { status: filters.status });
  }
}

/** 404 `conversation_not_found`; `param` names the request field that carried the id, if any. */
export function conversationNotFound(conversationId: string, param?: string): ApiError {
  return ApiError.notFound(`No conversation '${conversationId}' in this workspace.`, 'conversation_not_found', param);
}
