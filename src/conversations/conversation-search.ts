import { Injectable } from '@nestjs/common';
import { AssistantsService } from '../assistants/assistants.service';
import { ApiError } from '../common/errors/api-error';
import { SEARCH_CANDIDATE_LIMIT } from './conversation-limits';
import { ConversationSearchStore, Match, MatchPosition, ResolvedFilters } from './conversation-search-store';
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

/** The first span of the walk back in time; each next one is sized from the matches found so far (see `nextReach`). */
const FIRST_SPAN_MS = 86_400_000;

/** Full-text search over a workspace's conversations (the `search_vector` and `title_vector` columns). */
@Injectable()
export class ConversationSearch {
  constructor(
    private readonly store: ConversationSearchStore,
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
    const { nodes, oldest } = await this.store.queryShape(workspaceId, query.q);
    // A query of stop words only ("the") matches nothing; walking the index for it would read every message.
    if (nodes === 0 || oldest === null) return empty;

    const matches = await this.newestMatches(workspaceId, query.q, filters, before, oldest.getTime());
    const truncated = matches.length > SEARCH_CANDIDATE_LIMIT;
    const window = matches.slice(0, SEARCH_CANDIDATE_LIMIT);
    if (window.length === 0) return empty;
    const oldestRanked = window[window.length - 1];

    const rows = await this.store.rank(workspaceId, query.q, filters, {
      limit: query.limit + 1,
      offset: query.offset,
      messageIds: window.filter((match) => match.kind === 'message').map((match) => match.id),
      conversationIds: [...new Set(window.map((match) => match.conversation_id))],
    });
    const page = rows.slice(0, query.limit);
    const conversations = new Map(
      (page.length > 0
        ? await this.store.conversationsById(page.map((row) => row.conversation_id))
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
      matches.push(...(await this.store.matchesInSpan(workspaceId, q, filters, wanted - matches.length, { before, newer, older })));
      if (matches.length >= wanted || older === null) return matches;
      newer = older;
      before = null;
      reachMs = nextReach(reachMs, matches.length, wanted, history);
    }
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
