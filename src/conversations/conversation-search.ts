import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { In, Repository } from 'typeorm';
import { AssistantsService } from '../assistants/assistants.service';
import { queryRows } from '../common/database/query-rows';
import { HEADLINE_LEAD_CHARS, HEADLINE_WINDOW_CHARS } from './conversation-limits';
import type { ConversationFilters } from './conversation-store';
import type { StoredMessageRole } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';

export interface ConversationSearchQuery extends ConversationFilters {
  /** Web-search syntax (`websearch_to_tsquery('english', q)`). */
  q: string;
  limit: number;
  offset: number;
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

const HEADLINE_OPTIONS =
  'StartSel=<mark>, StopSel=</mark>, MaxWords=35, MinWords=12, ShortWord=3, MaxFragments=2, FragmentDelimiter=" ... "';
const TITLE_HEADLINE_OPTIONS = 'StartSel=<mark>, StopSel=</mark>, HighlightAll=true';

/** Full-text search over a workspace's conversations (the `search_vector` and `title_vector` columns). */
@Injectable()
export class ConversationSearch {
  constructor(
    @InjectRepository(Conversation) private readonly conversations: Repository<Conversation>,
    private readonly assistants: AssistantsService,
  ) {}

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
