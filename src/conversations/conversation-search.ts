import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { In, Repository } from 'typeorm';
import { AssistantsService } from '../assistants/assistants.service';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import { HEADLINE_LEAD_CHARS, HEADLINE_WINDOW_CHARS, SEARCH_CANDIDATE_LIMIT } from './conversation-limits';
import type { ConversationFilters } from './conversation-store';
import type { StoredMessageRole } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';

export interface ConversationSearchQuery extends ConversationFilters {
  /** Web-search syntax (`websearch_to_tsquery('english', q)`). */
  q: string;
  limit: number;
  offset: number;
  /** The `next_before` of an earlier search: rank the matches older than its window. */
  before?: string;
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
  /** When more matches than the bound exist: the time of the oldest match ranked. Null when the search reached the oldest match. */
  searched_until: Date | null;
  /** Pass as `before` to rank the next, older matches; null when none are left. */
  next_before: string | null;
}

/** A match in time order: a message (dated by its creation) or a title (dated by its conversation's last activity). */
interface Match {
  kind: 'message' | 'title';
  /** The message's id, or the conversation's for a title. */
  id: string;
  conversation_id: string;
  /** ISO 8601 with microseconds, as stored: the continuation must not lose the order of matches a millisecond apart. */
  at: string;
}

type MatchPosition = Pick<Match, 'at' | 'id'>;

interface ResolvedFilters {
  assistantId?: string;
  userId?: string;
  status?: string;
}

/** The first span of the walk back in time; each next one is sized from the matches found so far (see `nextReach`). */
const FIRST_SPAN_MS = 86_400_000;

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
   *
   * Only the newest SEARCH_CANDIDATE_LIMIT matches are ranked (older than `before` when given):
   * results are ordered by score, then last activity, then id, within that window; `next_before`
   * continues with the next older window. Up to the bound, the results are those of ranking every match.
   */
  async search(workspaceId: string, query: ConversationSearchQuery): Promise<SearchPage> {
    const before = query.before === undefined ? null : decodePosition(query.before);
    const filters = await this.resolveFilters(workspaceId, query);
    const empty: SearchPage = { data: [], has_more: false, next_offset: null, searched_until: null, next_before: null };
    const [{ nodes, oldest }] = await queryRows<{ nodes: number; oldest: Date | null }>(
      this.conversations.manager,
      `SELECT numnode(websearch_to_tsquery('english', $2)) AS nodes,
              -- The oldest time a match can have: where the walk back in time ends.
              least((SELECT min(created_at) FROM conversation_messages WHERE workspace_id = $1),
                    (SELECT min(last_activity_at) FROM conversations WHERE workspace_id = $1)) AS oldest`,
      [workspaceId, query.q],
    );
    // A query of stop words only ("the") matches nothing; walking the index for it would read every message.
    if (nodes === 0 || oldest === null) return empty;

    const matches = await this.newestMatches(workspaceId, query.q, filters, before, oldest.getTime());
    const truncated = matches.length > SEARCH_CANDIDATE_LIMIT;
    const window = matches.slice(0, SEARCH_CANDIDATE_LIMIT);
    if (window.length === 0) return empty;
    const oldestRanked = window[window.length - 1];

    const parameters: unknown[] = [
      workspaceId,
      query.q,
      query.limit + 1,
      query.offset,
      window.filter((match) => match.kind === 'message').map((match) => match.id),
      [...new Set(window.map((match) => match.conversation_id))],
    ];
    const filterConditions = filterSql(filters, parameters);
    const rows = await queryRows<{
      conversation_id: string;
      score: number;
      snippet: string;
      message_id: string | null;
      role: StoredMessageRole | null;
      message_created_at: Date | null;
    }>(
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
      searched_until: truncated ? new Date(oldestRanked.at) : null,
      next_before: truncated ? encodePosition(oldestRanked) : null,
    };
  }

  /**
   * The newest SEARCH_CANDIDATE_LIMIT + 1 matches (older than `before`), newest first. Read back
   * in time a span at a time, each span its own statement, so that PostgreSQL plans each with
   * its bounds: for a common word a backward scan of `(workspace_id, created_at)` that stops
   * at the limit; for a rarer one the GIN index's matches, restricted to the span by the BRIN
   * index on `created_at`, so only the span's rows are read. Never all matches of a common word.
   */
  private async newestMatches(
    workspaceId: string,
    q: string,
    filters: ResolvedFilters,
    before: MatchPosition | null,
    oldestMs: number,
  ): Promise<Match[]> {
    const wanted = SEARCH_CANDIDATE_LIMIT + 1;
    const anchorMs = before ? Date.parse(before.at) : Date.now();
    const history = anchorMs - oldestMs;
    const matches: Match[] = [];
    let newer: string | null = null; // the span's upper bound (exclusive); the first span's is `before` or none
    let reachMs = FIRST_SPAN_MS;
    for (;;) {
      // The last span has no lower bound: it reaches the oldest match.
      const older = reachMs >= history ? null : new Date(anchorMs - reachMs).toISOString();
      matches.push(...(await this.matchesInSpan(workspaceId, q, filters, wanted - matches.length, { before, newer, older })));
      if (matches.length >= wanted || older === null) return matches;
      newer = older;
      before = null;
      reachMs = nextReach(reachMs, matches.length, wanted, history);
    }
  }

  /** Matches with `older` <= time < `newer` (and before `before`), newest first, at most `limit`. */
  private async matchesInSpan(
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

  /** The list filters, with the assistant's slug resolved to its id (a `404` when it is not in the workspace). */
  private async resolveFilters(workspaceId: string, filters: ConversationFilters): Promise<ResolvedFilters> {
    return {
      assistantId: filters.assistantId === undefined ? undefined : (await this.assistants.resolve(workspaceId, filters.assistantId)).id,
      userId: filters.userId,
      status: filters.status,
    };
  }
}

/**
 * How far back (ms from the anchor) the next span reaches: everything, when the matches found
 * so far say the rest of the history holds few (at most twice the bound); else as far as they
 * say the bound lies, with a quarter to spare, at least twice and at most 16 times as far.
 */
function nextReach(reachMs: number, found: number, wanted: number, historyMs: number): number {
  if ((found * historyMs) / reachMs <= 2 * wanted) return historyMs;
  return Math.min(historyMs, Math.ceil(reachMs * Math.min(16, Math.max(2, (1.25 * wanted) / found))));
}

/** The list filters as SQL on alias `c`, their values appended to `parameters`. */
function filterSql(filters: ResolvedFilters, parameters: unknown[]): string {
  const conditions: string[] = [];
  if (filters.assistantId !== undefined) conditions.push(`AND c.assistant_id = $${parameters.push(filters.assistantId)}`);
  if (filters.userId !== undefined) conditions.push(`AND c.user_id = $${parameters.push(filters.userId)}`);
  if (filters.status !== undefined) conditions.push(`AND c.status = $${parameters.push(filters.status)}`);
  return conditions.join(' ');
}

const POSITION = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z)~([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$/;

/** `next_before`: the oldest ranked match's time and id, opaque to clients. */
function encodePosition(position: MatchPosition): string {
  return Buffer.from(`${position.at}~${position.id}`).toString('base64url');
}

function decodePosition(cursor: string): MatchPosition {
  const match = POSITION.exec(Buffer.from(cursor, 'base64url').toString());
  if (!match || !isRealTime(match[1])) {
    throw ApiError.badRequest('before must be the next_before of an earlier search.', 'before');
  }
  return { at: match[1], id: match[2] };
}

/**
 * A time that PostgreSQL takes as it is written. Date.parse rolls `2026-02-30` over to March
 * and takes the year 0000, which PostgreSQL refuses (a 500 once in the query): the time must
 * read back unchanged, from the year 1 on.
 */
function isRealTime(text: string): boolean {
  const time = Date.parse(text);
  return !Number.isNaN(time) && new Date(time).toISOString().slice(0, 23) === text.slice(0, 23) && text.slice(0, 4) !== '0000';
}
