import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { EntityManager, In, Repository, SelectQueryBuilder } from 'typeorm';
import { AssistantsService } from '../assistants/assistants.service';
import type { ContentPart } from '../providers/provider-adapter';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import type { ChatMessage } from '../providers/provider-adapter';
import {
  formatMegabytes,
  HEADLINE_LEAD_CHARS,
  HEADLINE_WINDOW_CHARS,
  MAX_CONVERSATION_CONTENT_BYTES,
  MAX_CONVERSATION_MESSAGES,
  MESSAGES_PAGE_BYTES,
} from './conversation-limits';
import {
  ConversationMessage,
  STORED_MESSAGE_ROLES,
  StoredContentType,
  StoredMessageRole,
  StoredToolCall,
} from './entities/conversation-message.entity';
import {
  Conversation,
  ConversationMetadata,
  ConversationSource,
  ConversationStatus,
} from './entities/conversation.entity';

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

export interface ConversationSearchQuery extends ConversationFilters {
  /** Web-search syntax (`websearch_to_tsquery('english', q)`). */
  q: string;
  limit: number;
  offset: number;
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

export interface SearchHit {
  conversation: Conversation;
  score: number;
  /** The matching words between `<mark>` and `</mark>`. */
  snippet: string;
  /** The best matching message; null when only the title matched. */
  message: { id: string; role: StoredMessageRole; createdAt: Date } | null;
}

export interface SearchPage {
  data: SearchHit[];
  has_more: boolean;
  next_offset: number | null;
}

export interface ConversationStats {
  totals: {
    conversations: number;
    messages: number;
    input_tokens: number;
    output_tokens: number;
    total_tokens: number;
    cost_millicents: number;
  };
  by_status: Record<ConversationStatus, number>;
  by_source: Record<ConversationSource, number>;
  /** The last 30 UTC days, today first. */
  daily: Array<{ date: string; conversations: number; messages: number }>;
}

/** A message in OpenAI's chat format, ready to be sent to a model. */
export interface ChatHistoryMessage {
  role: StoredMessageRole;
  /** Null only for an assistant message that just called tools. */
  content: string | ContentPart[] | null;
  tool_calls?: StoredToolCall[];
  tool_call_id?: string;
}

/** A message a chat request is about to add to a conversation, in OpenAI's format: only its content and tool calls take room. */
export interface IncomingMessage {
  role?: unknown;
  content?: unknown;
  tool_calls?: unknown;
}

/** A message to store, in OpenAI's chat format plus its token count. */
export interface TurnMessage {
  /** `developer` is stored as `system`, its equivalent for every provider. */
  role: StoredMessageRole | 'developer';
  /** A string is stored as is; any other value but null (an array of parts) as its JSON. */
  content?: string | ContentPart[] | null;
  tool_calls?: StoredToolCall[] | null;
  tool_call_id?: string | null;
  tokens: number;
}

export interface AppendTurnParams {
  workspaceId: string;
  conversationId: string;
  /** In conversation order; appended after the stored ones. */
  messages: TurnMessage[];
  inputTokens: number;
  outputTokens: number;
  /** Millicents, possibly fractional: a number, or an exact decimal string such as `"12.750000"`. */
  costMillicents: number | string;
  /** The server tools the turn ran; kept with the cost on its last message (the reply), for the transcript. */
  toolsUsed?: readonly string[];
}

export interface AppendedTurn {
  /** Ids of the stored messages, in the order given. */
  messageIds: string[];
  /** The conversation's message count after this turn. */
  messageCount: number;
  /** Null only if the conversation has no messages yet (an append without messages). */
  lastMessageAt: Date | null;
}

const HEADLINE_OPTIONS =
  'StartSel=<mark>, StopSel=</mark>, MaxWords=35, MinWords=12, ShortWord=3, MaxFragments=2, FragmentDelimiter=" ... "';
const TITLE_HEADLINE_OPTIONS = 'StartSel=<mark>, StopSel=</mark>, HighlightAll=true';
const DECIMAL = /^\d{1,14}(\.\d+)?$/;

/**
 * Conversations of a workspace and their messages. Every method is scoped by the
 * workspace: another workspace's conversation is as unknown as a missing one.
 */
@Injectable()
export class ConversationsService {
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

  /**
   * Full-text search over titles and message text (English stemming), best match first, one
   * result per conversation: its best matching message with a highlighted snippet, or its
   * title when only the title matched. A word in a title weighs ten times one in a message.
   */
  async search(workspaceId: string, query: ConversationSearchQuery): Promise<SearchPage> {
    const parameters: unknown[] = [workspaceId, query.q, query.limit + 1, query.offset];
    const filters = await this.filterSql(workspaceId, query, parameters);
    const rows = await queryRows<{
      conversation_id: string;
      score: number;
      snippet: string;
      message_id: string | null;
      role: StoredMessageRole | null;
      message_created_at: Date | null;
    }>(
      this.conversations.manager,
      `WITH query AS (
              -- words: the query's lexemes, to find where a long message first matches.
              SELECT websearch_to_tsquery('english', $2) AS q, tsvector_to_array(to_tsvector('english', $2)) AS words),
            best_messages AS (
              SELECT DISTINCT ON (m.conversation_id) m.conversation_id, m.id, ts_rank_cd(m.search_vector, query.q) AS rank
                FROM conversation_messages m CROSS JOIN query
               WHERE m.workspace_id = $1 AND m.search_vector @@ query.q
               ORDER BY m.conversation_id, rank DESC, m.position),
            candidates AS (
              SELECT conversation_id FROM best_messages
              UNION
              SELECT c.id FROM conversations c CROSS JOIN query WHERE c.workspace_id = $1 AND c.title_vector @@ query.q),
            hits AS (
              SELECT c.id, c.title, c.last_activity_at, b.id AS message_id,
                     coalesce(b.rank, 0) + CASE WHEN c.title_vector @@ query.q THEN ts_rank_cd(c.title_vector, query.q) ELSE 0 END AS score
                FROM candidates k
                JOIN conversations c ON c.id = k.conversation_id
                LEFT JOIN best_messages b ON b.conversation_id = c.id
                CROSS JOIN query
               WHERE c.workspace_id = $1 ${filters}
               ORDER BY score DESC, c.last_activity_at DESC, c.id DESC
               LIMIT $3 OFFSET $4)
       SELECT h.id AS conversation_id, h.score::float8 AS score, m.id AS message_id, m.role, m.created_at AS message_created_at,
              CASE WHEN m.id IS NULL
                THEN ts_headline('english', coalesce(h.title, ''), query.q, '${TITLE_HEADLINE_OPTIONS}')
                ELSE ts_headline('english', excerpt.text, query.q, '${HEADLINE_OPTIONS}')
              END AS snippet
         FROM hits h
         CROSS JOIN query
         LEFT JOIN conversation_messages m ON m.id = h.message_id
         -- ts_headline costs about 25 ms per 100,000 characters: in a longer message it only
         -- sees a window that starts a little before an occurrence of a query word (lexemes
         -- are mostly prefixes of the words they stem from), or at the start, without the
         -- words the window cuts in two. OFFSET 0 keeps the planner from copying the text's
         -- expression into each of its uses, which would read the message once per use.
         LEFT JOIN LATERAL (SELECT conversation_message_search_text(m.content_type, m.content) AS text OFFSET 0) message
           ON m.id IS NOT NULL
         LEFT JOIN LATERAL (
           SELECT CASE WHEN length(message.text) <= ${HEADLINE_WINDOW_CHARS} THEN 1
                    ELSE greatest(coalesce(
                      (SELECT min(nullif(strpos(message.text, word), 0)) FROM unnest(query.words) AS word),
                      -- lower() of the whole text costs more than the search: only when the words are not there as they are.
                      (SELECT min(nullif(strpos(lower(message.text), word), 0)) FROM unnest(query.words) AS word),
                      1) - ${HEADLINE_LEAD_CHARS}, 1) END AS start) bounds ON m.id IS NOT NULL
         LEFT JOIN LATERAL (
           SELECT CASE WHEN bounds.start + ${HEADLINE_WINDOW_CHARS} <= length(message.text)
                    THEN regexp_replace(substr(message.text, bounds.start, ${HEADLINE_WINDOW_CHARS}), '\\s\\S*$', '')
                    ELSE substr(message.text, bounds.start, ${HEADLINE_WINDOW_CHARS}) END AS text) cut ON m.id IS NOT NULL
         LEFT JOIN LATERAL (
           SELECT CASE WHEN bounds.start > 1 THEN regexp_replace(cut.text, '^\\S*\\s', '') ELSE cut.text END AS text) excerpt
           ON m.id IS NOT NULL
        ORDER BY h.score DESC, h.last_activity_at DESC, h.id DESC`,
      parameters,
    );
    const page = rows.slice(0, query.limit);
    const conversations = new Map(
      (page.length > 0
        ? await this.conversations.findBy({ id: In(page.map((row) => row.conversation_id)) })
        : []
      ).map((conversation) => [conversation.id, conversation]),
    );
    const hasMore = rows.length > query.limit;
    return {
      data: page
        // A conversation deleted between the two statements is left out.
        .filter((row) => conversations.has(row.conversation_id))
        .map((row) => ({
          conversation: conversations.get(row.conversation_id)!,
          score: Math.round(row.score * 1e6) / 1e6,
          snippet: row.snippet,
          message: row.message_id ? { id: row.message_id, role: row.role!, createdAt: row.message_created_at! } : null,
        })),
      has_more: hasMore,
      next_offset: hasMore ? query.offset + query.limit : null,
    };
  }

  /**
   * For the dashboard's statistics: conversations and their messages per assistant (null:
   * direct mode, or an assistant deleted since), most conversations first. One grouped scan
   * of the workspace's conversations; messages come from their counters, not a count.
   */
  async countsByAssistant(workspaceId: string): Promise<Array<{ assistantId: string | null; conversations: number; messages: number }>> {
    const rows = await queryRows<{ assistant_id: string | null; conversations: string; messages: string }>(
      this.conversations.manager,
      `SELECT assistant_id, count(*) AS conversations, coalesce(sum(message_count), 0) AS messages
         FROM conversations WHERE workspace_id = $1
        GROUP BY assistant_id
        ORDER BY count(*) DESC, assistant_id NULLS LAST`,
      [workspaceId],
    );
    return rows.map((row) => ({ assistantId: row.assistant_id, conversations: Number(row.conversations), messages: Number(row.messages) }));
  }

  /** Totals of the workspace's conversations, by status and source, and the last 30 UTC days. */
  async stats(workspaceId: string): Promise<ConversationStats> {
    const [totals] = await queryRows<Record<string, string>>(
      this.conversations.manager,
      `SELECT count(*) AS conversations,
              count(*) FILTER (WHERE status = 'active') AS active,
              count(*) FILTER (WHERE status = 'archived') AS archived,
              count(*) FILTER (WHERE source = 'api') AS api,
              count(*) FILTER (WHERE source = 'dashboard') AS dashboard,
              count(*) FILTER (WHERE source = 'widget') AS widget,
              coalesce(sum(message_count), 0) AS messages,
              coalesce(sum(total_input_tokens), 0) AS input_tokens,
              coalesce(sum(total_output_tokens), 0) AS output_tokens,
              coalesce(sum(total_cost_millicents), 0) AS cost_millicents
         FROM conversations WHERE workspace_id = $1`,
      [workspaceId],
    );
    const daily = await queryRows<{ date: string; conversations: string; messages: string }>(
      this.conversations.manager,
      `WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day),
            days AS (SELECT (today.day - n) AS day FROM today, generate_series(0, 29) AS n),
            since AS (SELECT (min(day)::timestamp AT TIME ZONE 'UTC') AS at FROM days),
            created AS (
              SELECT (c.created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
                FROM conversations c, since WHERE c.workspace_id = $1 AND c.created_at >= since.at GROUP BY 1),
            stored AS (
              SELECT (m.created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
                FROM conversation_messages m, since WHERE m.workspace_id = $1 AND m.created_at >= since.at GROUP BY 1)
       SELECT to_char(d.day, 'YYYY-MM-DD') AS date, coalesce(created.n, 0) AS conversations, coalesce(stored.n, 0) AS messages
         FROM days d LEFT JOIN created ON created.day = d.day LEFT JOIN stored ON stored.day = d.day
        ORDER BY d.day DESC`,
      [workspaceId],
    );
    const inputTokens = Number(totals.input_tokens);
    const outputTokens = Number(totals.output_tokens);
    return {
      totals: {
        conversations: Number(totals.conversations),
        messages: Number(totals.messages),
        input_tokens: inputTokens,
        output_tokens: outputTokens,
        total_tokens: inputTokens + outputTokens,
        cost_millicents: Number(totals.cost_millicents),
      },
      by_status: { active: Number(totals.active), archived: Number(totals.archived) },
      by_source: { api: Number(totals.api), dashboard: Number(totals.dashboard), widget: Number(totals.widget) },
      daily: daily.map((row) => ({ date: row.date, conversations: Number(row.conversations), messages: Number(row.messages) })),
    };
  }

  /**
   * For the chat module, when a request carries `conversation_id`: the conversation, with
   * the counters `assertRoomFor` checks. Its `assistantId` (null when none) and `status` are
   * the caller's to use: an archived conversation is returned like an active one.
   *
   * @throws ApiError 404 `not_found` (code `conversation_not_found`, param `conversation_id`)
   *   for an unknown or malformed id, or another workspace's conversation.
   */
  async findForChat(workspaceId: string, conversationId: string): Promise<Conversation> {
    const conversation = isUUID(conversationId)
      ? await this.conversations.findOneBy({ id: conversationId, workspaceId })
      : null;
    if (!conversation) throw conversationNotFound(conversationId, 'conversation_id');
    return conversation;
  }

  /**
   * For the chat module: the history to put before a request's own messages, in OpenAI's
   * message format (array content comes back as the parts it was given; an assistant message
   * that only called tools has content null), oldest first. Only the newest messages whose
   * stored `tokens` add up to at most `budgetTokens` are read from the database, and the
   * history never starts with `tool` messages whose assistant call was left out. Nothing for
   * a budget of 0 or less, or a conversation that is not in the workspace.
   */
  async historyWithin(workspaceId: string, conversationId: string, budgetTokens: number): Promise<ChatMessage[]> {
    if (!(budgetTokens >= 1) || !isUUID(conversationId) || !isUUID(workspaceId)) return [];
    const budget = Math.min(Math.floor(budgetTokens), Number.MAX_SAFE_INTEGER);
    // The window sum runs newest first over the stored token counts only; the content is
    // read for the messages that fit. Tokens are never negative, so what fits is a suffix.
    const stored = await this.conversationMessages
      .createQueryBuilder('m')
      .where('m.conversation_id = :conversationId AND m.workspace_id = :workspaceId', { conversationId, workspaceId })
      .andWhere(
        `m.position >= (
           SELECT min(newest.position) FILTER (WHERE newest.role <> 'tool')
             FROM (SELECT position, role,
                          sum(tokens) OVER (ORDER BY position DESC ROWS UNBOUNDED PRECEDING) AS tokens_through
                     FROM conversation_messages
                    WHERE conversation_id = :conversationId AND workspace_id = :workspaceId) newest
            WHERE newest.tokens_through <= :budget)`,
        { budget },
      )
      .orderBy('m.position', 'ASC')
      .getMany();
    // Stored messages were OpenAI chat messages, and come back as such.
    return stored.map((row) => toChatMessage(row) as ChatMessage);
  }

  /**
   * For the chat module, before it holds money: refuses a turn that would take the
   * conversation past `MAX_CONVERSATION_CONTENT_BYTES` (counting the incoming messages) or
   * `MAX_CONVERSATION_MESSAGES` (counting them and the reply). The reply's size is unknown
   * in advance, so a conversation can end up one reply over the byte limit; the next turn is
   * then refused. `appendTurn` itself never refuses on size: the charge must commit.
   *
   * @throws ApiError 400 `bad_request` (code `conversation_too_large`, param `conversation_id`).
   */
  assertRoomFor(conversation: Conversation, incomingMessages: readonly IncomingMessage[]): void {
    const messages = conversation.messageCount + incomingMessages.length + 1;
    if (messages > MAX_CONVERSATION_MESSAGES) {
      throw conversationTooLarge(
        `holds ${conversation.messageCount} messages, and a conversation holds at most ${MAX_CONVERSATION_MESSAGES}`,
      );
    }
    const bytes = incomingMessages.reduce((sum, message) => sum + incomingBytes(message), conversation.contentBytes);
    if (bytes > MAX_CONVERSATION_CONTENT_BYTES) {
      throw conversationTooLarge(
        `would store ${formatMegabytes(bytes)} of message content with this request, and a conversation stores at ` +
          `most ${formatMegabytes(MAX_CONVERSATION_CONTENT_BYTES)}`,
      );
    }
  }

  /**
   * For the chat module's settlement: stores a turn's messages after the conversation's
   * existing ones and adds the turn's tokens and cost to its counters, with the given
   * transaction manager, so that the turn is stored if and only if the request is charged.
   *
   * The counters (`content_bytes` included: a turn is never refused here for its size, the
   * charge must commit), `last_message_at` (when there are messages) and `updated_at` change in one
   * `UPDATE ... SET x = x + $n`, never read-modify-write: concurrent turns of one
   * conversation add up exactly, and wait for each other on the row lock so that their
   * messages keep their order.
   *
   * Returns null, changing nothing, when the conversation does not exist in the workspace
   * (deleted while the request ran), so that a concurrent delete never rolls back the
   * charge. Malformed arguments (an unknown role, negative or fractional token counts, a
   * negative cost) are programming errors and throw a plain `Error`.
   */
  async appendTurn(manager: EntityManager, params: AppendTurnParams): Promise<AppendedTurn | null> {
    const { workspaceId, conversationId, messages } = params;
    const rows = messages.map(storedMessage);
    const cost = costDecimal(params.costMillicents);
    for (const [name, value] of [
      ['inputTokens', params.inputTokens],
      ['outputTokens', params.outputTokens],
    ] as const) {
      if (!Number.isSafeInteger(value) || value < 0) throw new Error(`appendTurn: ${name} must be a whole number >= 0 (got ${value})`);
    }
    if (!isUUID(conversationId) || !isUUID(workspaceId)) return null;

    const [updated] = await queryRows<{ message_count: number; last_message_at: Date | null }>(
      manager,
      `UPDATE conversations SET
         message_count = message_count + $3::integer,
         total_input_tokens = total_input_tokens + $4::bigint,
         total_output_tokens = total_output_tokens + $5::bigint,
         total_cost_millicents = total_cost_millicents + $6::numeric,
         content_bytes = content_bytes + $7::bigint,
         last_message_at = CASE WHEN $3::integer > 0 THEN now() ELSE last_message_at END,
         updated_at = now()
       WHERE id = $1 AND workspace_id = $2
       RETURNING message_count, last_message_at`,
      [
        conversationId,
        workspaceId,
        rows.length,
        params.inputTokens,
        params.outputTokens,
        cost,
        rows.reduce((sum, row) => sum + row.bytes, 0),
      ],
    );
    if (!updated) return null;
    const result: AppendedTurn = { messageIds: [], messageCount: updated.message_count, lastMessageAt: updated.last_message_at };
    if (rows.length === 0) return result;

    // The row lock taken by the UPDATE is held until the transaction ends, so no other turn
    // can take these positions.
    const inserted = await queryRows<{ id: string; position: number }>(
      manager,
      `INSERT INTO conversation_messages
         (conversation_id, workspace_id, position, role, content_type, content, tool_calls, tool_call_id, tokens, cost_millicents, tools_used)
       SELECT $1, $2, $3::integer + m.ord, m.role, m.content_type, m.content, m.tool_calls::jsonb, m.tool_call_id, m.tokens,
              -- The turn's cost and tools go on its last message, the reply.
              CASE WHEN m.ord = cardinality($4::text[]) THEN $10::numeric END,
              CASE WHEN m.ord = cardinality($4::text[]) THEN $11::text[] END
         FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::integer[])
              WITH ORDINALITY AS m(role, content_type, content, tool_calls, tool_call_id, tokens, ord)
        ORDER BY m.ord
       RETURNING id, position`,
      [
        conversationId,
        workspaceId,
        updated.message_count - rows.length,
        rows.map((row) => row.role),
        rows.map((row) => row.contentType),
        rows.map((row) => row.content),
        rows.map((row) => row.toolCallsJson),
        rows.map((row) => row.toolCallId),
        rows.map((row) => row.tokens),
        cost,
        params.toolsUsed ? [...params.toolsUsed] : null,
      ],
    );
    result.messageIds = inserted.sort((a, b) => a.position - b.position).map((row) => row.id);
    return result;
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

  /** The list filters as SQL on alias `c`, their values appended to `parameters`. */
  private async filterSql(workspaceId: string, filters: ConversationFilters, parameters: unknown[]): Promise<string> {
    const conditions: string[] = [];
    if (filters.assistantId !== undefined) {
      const assistant = await this.assistants.resolve(workspaceId, filters.assistantId);
      parameters.push(assistant.id);
      conditions.push(`AND c.assistant_id = $${parameters.length}`);
    }
    if (filters.userId !== undefined) {
      parameters.push(filters.userId);
      conditions.push(`AND c.user_id = $${parameters.length}`);
    }
    if (filters.status !== undefined) {
      parameters.push(filters.status);
      conditions.push(`AND c.status = $${parameters.length}`);
    }
    return conditions.join(' ');
  }
}

function conversationNotFound(conversationId: string, param?: string): ApiError {
  return ApiError.notFound(`No conversation '${conversationId}' in this workspace.`, 'conversation_not_found', param);
}

function conversationTooLarge(why: string): ApiError {
  return ApiError.badRequest(
    `This conversation ${why}. Start a new conversation (create one, or send the request without conversation_id).`,
    'conversation_id',
    'conversation_too_large',
  );
}

interface StoredMessageValues {
  role: StoredMessageRole;
  contentType: StoredContentType;
  content: string;
  toolCallsJson: string | null;
  toolCallId: string | null;
  tokens: number;
  /** What it adds to the conversation's `content_bytes`. */
  bytes: number;
}

function storedMessage(message: TurnMessage, index: number): StoredMessageValues {
  const role = message.role === 'developer' ? 'system' : message.role;
  if (!(STORED_MESSAGE_ROLES as readonly string[]).includes(role)) {
    throw new Error(`appendTurn: messages[${index}].role must be one of ${STORED_MESSAGE_ROLES.join(', ')}, developer (got ${role})`);
  }
  if (!Number.isSafeInteger(message.tokens) || message.tokens < 0) {
    throw new Error(`appendTurn: messages[${index}].tokens must be a whole number >= 0 (got ${message.tokens})`);
  }
  if (message.tool_calls != null && !Array.isArray(message.tool_calls)) {
    throw new Error(`appendTurn: messages[${index}].tool_calls must be an array`);
  }
  const { content, toolCallsJson } = storedContent(message);
  return {
    role,
    contentType: typeof message.content === 'string' || message.content == null ? 'text' : 'json',
    content,
    toolCallsJson,
    toolCallId: message.tool_call_id ?? null,
    tokens: message.tokens,
    bytes: contentBytes(content, toolCallsJson),
  };
}

/** A message's content and tool calls as they are stored: a string as is, anything else as its JSON. */
function storedContent(message: IncomingMessage): { content: string; toolCallsJson: string | null } {
  const { content, tool_calls: toolCalls } = message;
  return {
    content: content === undefined || content === null ? '' : typeof content === 'string' ? content : JSON.stringify(content),
    toolCallsJson: Array.isArray(toolCalls) && toolCalls.length > 0 ? JSON.stringify(toolCalls) : null,
  };
}

function incomingBytes(message: IncomingMessage): number {
  const { content, toolCallsJson } = storedContent(message);
  return contentBytes(content, toolCallsJson);
}

/**
 * UTF-8 bytes of the content plus the tool calls' JSON. The migration's backfill and the
 * message pages count the same in SQL, tool calls as jsonb prints them (a few spaces more).
 */
function contentBytes(content: string, toolCallsJson: string | null): number {
  return Buffer.byteLength(content, 'utf8') + (toolCallsJson === null ? 0 : Buffer.byteLength(toolCallsJson, 'utf8'));
}

function toChatMessage(row: ConversationMessage): ChatHistoryMessage {
  const message: ChatHistoryMessage = {
    role: row.role,
    content:
      row.contentType === 'json'
        ? (JSON.parse(row.content) as ContentPart[])
        : row.content === '' && row.toolCalls
          ? null
          : row.content,
  };
  if (row.toolCalls) message.tool_calls = row.toolCalls;
  if (row.toolCallId !== null) message.tool_call_id = row.toolCallId;
  return message;
}

/** The cost as an exact decimal string for a `numeric` column. */
function costDecimal(cost: number | string): string {
  if (typeof cost === 'number') {
    if (!Number.isFinite(cost) || cost < 0) throw new Error(`appendTurn: costMillicents must be a finite number >= 0 (got ${cost})`);
    // Fixed notation: String(1e-7) would be "1e-7".
    return cost.toFixed(6);
  }
  if (!DECIMAL.test(cost)) throw new Error(`appendTurn: costMillicents must be a decimal string >= 0 (got "${cost}")`);
  return cost;
}
