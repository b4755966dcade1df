import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { In, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { HEADLINE_LEAD_CHARS, HEADLINE_WINDOW_CHARS } from './conversation-limits';
import type { StoredMessageRole } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';

/** A match in time order: a message (dated by its creation) or a title (dated by its conversation's last activity). */
export interface Match {
  kind: 'message' | 'title';
  /** The message's id, or the conversation's for a title. */
  id: string;
  conversation_id: string;
  /** ISO 8601 with microseconds, as stored: the continuation must not lose the order of matches a millisecond apart. */
  at: string;
}

export type MatchPosition = Pick<Match, 'at' | 'id'>;

export interface ResolvedFilters {
  assistantId?: string;
  userId?: string;
  status?: string;
}

/** What `rank` ranks: the window's matching messages and candidate conversations, one page of them. */
export interface RankedPage {
  limit: number;
  offset: number;
  messageIds: string[];
  conversationIds: string[];
}

/** A ranked conversation: its score, and its best message with a snippet (or its title's snippet). */
export interface RankedRow {
  conversation_id: string;
  score: number;
  snippet: string;
  message_id: string | null;
  role: StoredMessageRole | null;
  message_created_at: Date | null;
}

const HEADLINE_OPTIONS =
  'StartSel=<mark>, StopSel=</mark>, MaxWords=35, MinWords=12, ShortWord=3, MaxFragments=2, FragmentDelimiter=" ... "';
const TITLE_HEADLINE_OPTIONS = 'StartSel=<mark>, StopSel=</mark>, HighlightAll=true';

/**
 * The statements of full-text search over a workspace's conversations (the `search_vector`
 * and `title_vector` columns). The walk back in time, the window and the cursor are
 * ConversationSearch's.
 */
@Injectable()
export class ConversationSearchStore {
  constructor(@InjectRepository(Conversation) private readonly conversations: Repository<Conversation>) {}

  /** How many nodes the query has (0: stop words only), and the oldest time a match can have. */
  async queryShape(workspaceId: string, q: string): Promise<{ nodes: number; oldest: Date | null }> {
    const [shape] = await queryRows<{ nodes: number; oldest: Date | null }>(
      this.conversations.manager,
      `SELECT numnode(websearch_to_tsquery('english', $2)) AS nodes,
              -- The oldest time a match can have: where the walk back in time ends.
              least((SELECT min(created_at) FROM conversation_messages WHERE workspace_id = $1),
                    (SELECT min(last_activity_at) FROM conversations WHERE workspace_id = $1)) AS oldest`,
      [workspaceId, q],
    );
    return shape;
  }

  /** Ranks the window's matches: one row per conversation, best first, a page of them. */
  rank(workspaceId: string, q: string, filters: ResolvedFilters, page: RankedPage): Promise<RankedRow[]> {
    const parameters: unknown[] = [workspaceId, q, page.limit, page.offset, page.messageIds, page.conversationIds];
    const filterConditions = filterSql(filters, parameters);
    return queryRows<RankedRow>(
      this.conversations.manager,
      // Ranks the window's matches exactly as every match used to be ranked: a conversation's
      // best message in the window, plus its title's rank when the title matches.
      `WITH query AS (
              -- words: the query's lexemes, to find where a long message first matches.
              SELECT websearch_to_tsquery('english', $2) AS q, tsvector_to_array(to_tsvector('english', $2)) AS words),
            best_messages AS (
              SELECT DISTINCT ON (m.conversation_id) m.conversation_id, m.id, ts_rank_cd(m.search_vector, query.q) AS rank
                FROM conversation_messages m CROSS JOIN query
               WHERE m.id = ANY($5::uuid[]) AND m.workspace_id = $1
               ORDER BY m.conversation_id, rank DESC, m.position),
            candidates AS (SELECT DISTINCT unnest($6::uuid[]) AS conversation_id),
            hits AS (
              SELECT c.id, c.title, c.last_activity_at, b.id AS message_id,
                     coalesce(b.rank, 0) + CASE WHEN c.title_vector @@ query.q THEN ts_rank_cd(c.title_vector, query.q) ELSE 0 END AS score
                FROM candidates k
                JOIN conversations c ON c.id = k.conversation_id
                LEFT JOIN best_messages b ON b.conversation_id = c.id
                CROSS JOIN query
               WHERE c.workspace_id = $1 ${filterConditions}
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
  }

  /** Matches with `older` <= time < `newer` (and before `before`), newest first, at most `limit`. */
  matchesInSpan(
    workspaceId: string,
    q: string,
    filters: ResolvedFilters,
    limit: number,
    span: { before: MatchPosition | null; newer: string | null; older: string | null },
  ): Promise<Match[]> {
    const parameters: unknown[] = [workspaceId, q, limit];
    const placeholder = (value: unknown) => `$${parameters.push(value)}`;
    const before = span.before && { at: placeholder(span.before.at), id: placeholder(span.before.id) };
    const newer = span.newer === null ? null : placeholder(span.newer);
    const older = span.older === null ? null : placeholder(span.older);
    const bounds = (at: string, id: string) =>
      [
        before ? `AND (${at}, ${id}) < (${before.at}::timestamptz, ${before.id}::uuid)` : '',
        newer ? `AND ${at} < ${newer}::timestamptz` : '',
        older ? `AND ${at} >= ${older}::timestamptz` : '',
      ].join(' ');
    const messageBounds = bounds('m.created_at', 'm.id');
    const titleBounds = bounds('c.last_activity_at', 'c.id');
    const conditions = filterSql(filters, parameters);
    return queryRows<Match>(
      this.conversations.manager,
      `SELECT kind, id, conversation_id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at
         FROM ((SELECT 'message' AS kind, m.id, m.conversation_id, m.created_at AS at
                  FROM conversation_messages m ${conditions === '' ? '' : 'JOIN conversations c ON c.id = m.conversation_id'}
                 WHERE m.workspace_id = $1 AND m.search_vector @@ websearch_to_tsquery('english', $2) ${messageBounds} ${conditions}
                 ORDER BY m.created_at DESC, m.id DESC
                 LIMIT $3)
               UNION ALL
               (SELECT 'title', c.id, c.id, c.last_activity_at
                  FROM conversations c
                 WHERE c.workspace_id = $1 AND c.title_vector @@ websearch_to_tsquery('english', $2) ${titleBounds} ${conditions}
                 ORDER BY c.last_activity_at DESC, c.id DESC
                 LIMIT $3)) matches
        ORDER BY matches.at DESC, matches.id DESC
        LIMIT $3`,
      parameters,
    );
  }

  conversationsById(ids: string[]): Promise<Conversation[]> {
    return this.conversations.findBy({ id: In(ids) });
  }
}

/** The list filters as SQL on alias `c`, their values appended to `parameters`. */
function filterSql(filters: ResolvedFilters, parameters: unknown[]): string {
  const conditions: string[] = [];
  if (filters.assistantId !== undefined) conditions.push(`AND c.assistant_id = $${parameters.push(filters.assistantId)}`);
  if (filters.userId !== undefined) conditions.push(`AND c.user_id = $${parameters.push(filters.userId)}`);
  if (filters.status !== undefined) conditions.push(`AND c.status = $${parameters.push(filters.status)}`);
  return conditions.join(' ');
}
