import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { HEADLINE_LEAD_CHARS, HEADLINE_WINDOW_CHARS, SEARCH_CANDIDATE_LIMIT } from '../src/conversations/conversation-limits';
import { signUp, textOf } from './support/dashboard-client';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface SearchResult {
  score: number;
  snippet: string;
  message: { id: string; role: string; created_at: string } | null;
  conversation: { id: string; title: string | null; last_message_at: string | null; created_at: string };
}
interface SearchPage {
  data: SearchResult[];
  has_more: boolean;
  next_offset: number | null;
  searched_until: string | null;
  next_before: string | null;
}
interface WireError {
  status: number;
  error: { type: string; param: string | null; message: string };
}
/** What the old statement and the endpoint both give for a result. */
interface Ranked {
  conversation_id: string;
  message_id: string | null;
  score: number;
  snippet: string;
}

const HEADLINE_OPTIONS =
  'StartSel=<mark>, StopSel=</mark>, MaxWords=35, MinWords=12, ShortWord=3, MaxFragments=2, FragmentDelimiter=" ... "';
const TITLE_HEADLINE_OPTIONS = 'StartSel=<mark>, StopSel=</mark>, HighlightAll=true';

/**
 * The reference: the search's statement before issue 34, as it was, ranking every match of
 * the workspace ($1) for the query ($2); the page is $3 rows from $4, the filters follow.
 */
const oldSearchSql = (filters: string) => `
  WITH query AS (
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
   SELECT h.id AS conversation_id, h.score::float8 AS score, m.id AS message_id,
          CASE WHEN m.id IS NULL
            THEN ts_headline('english', coalesce(h.title, ''), query.q, '${TITLE_HEADLINE_OPTIONS}')
            ELSE ts_headline('english', excerpt.text, query.q, '${HEADLINE_OPTIONS}')
          END AS snippet
     FROM hits h
     CROSS JOIN query
     LEFT JOIN conversation_messages m ON m.id = h.message_id
     LEFT JOIN LATERAL (SELECT conversation_message_search_text(m.content_type, m.content) AS text OFFSET 0) message
       ON m.id IS NOT NULL
     LEFT JOIN LATERAL (
       SELECT CASE WHEN length(message.text) <= ${HEADLINE_WINDOW_CHARS} THEN 1
                ELSE greatest(coalesce(
                  (SELECT min(nullif(strpos(message.text, word), 0)) FROM unnest(query.words) AS word),
                  (SELECT min(nullif(strpos(lower(message.text), word), 0)) FROM unnest(query.words) AS word),
                  1) - ${HEADLINE_LEAD_CHARS}, 1) END AS start) bounds ON m.id IS NOT NULL
     LEFT JOIN LATERAL (
       SELECT CASE WHEN bounds.start + ${HEADLINE_WINDOW_CHARS} <= length(message.text)
                THEN regexp_replace(substr(message.text, bounds.start, ${HEADLINE_WINDOW_CHARS}), '\\s\\S*$', '')
                ELSE substr(message.text, bounds.start, ${HEADLINE_WINDOW_CHARS}) END AS text) cut ON m.id IS NOT NULL
     LEFT JOIN LATERAL (
       SELECT CASE WHEN bounds.start > 1 THEN regexp_replace(cut.text, '^\\S*\\s', '') ELSE cut.text END AS text) excerpt
       ON m.id IS NOT NULL
    ORDER BY h.score DESC, h.last_activity_at DESC, h.id DESC`;

const VOCABULARY = 'refund invoice shipping battery keyboard printer router password account billing order coupon'.split(' ');

describe('conversation search ranks a bounded window of the newest matches', () => {
  let t: TestApp;
  let db: DataSource;
  /** Under the bound: 1,200 messages, ~700 of them with "refund", and 100 titles that match. */
  let varied: TestWorkspace;
  /** Over the bound: 2,500 messages with "overflow", 4 per conversation, one conversation an hour. */
  let crowded: TestWorkspace;
  let assistantId: string;

  const search = (workspace: TestWorkspace, query: Record<string, unknown>) =>
    workspace.client.get('/conversations/search', { query }) as Promise<SearchPage>;
  const ranked = (page: SearchPage): Ranked[] =>
    page.data.map((hit) => ({
      conversation_id: hit.conversation.id,
      message_id: hit.message?.id ?? null,
      score: hit.score,
      snippet: hit.snippet,
    }));

  /** The old statement's whole answer (every result), with the list filters as the endpoint applies them. */
  const oldSearch = async (workspaceId: string, q: string, filters: { assistantId?: string; userId?: string; status?: string } = {}) => {
    const parameters: unknown[] = [workspaceId, q, 100_000, 0];
    const conditions: string[] = [];
    if (filters.assistantId) conditions.push(`AND c.assistant_id = $${parameters.push(filters.assistantId)}`);
    if (filters.userId) conditions.push(`AND c.user_id = $${parameters.push(filters.userId)}`);
    if (filters.status) conditions.push(`AND c.status = $${parameters.push(filters.status)}`);
    const rows = (await db.query(oldSearchSql(conditions.join(' ')), parameters)) as Ranked[];
    return rows.map((row) => ({ ...row, score: Math.round(row.score * 1e6) / 1e6 }));
  };

  /** Every result of one window, paged by `offset` as a client pages. */
  const wholeWindow = async (workspace: TestWorkspace, query: Record<string, unknown>) => {
    const results: Ranked[] = [];
    let page = await search(workspace, { ...query, limit: 100 });
    const { searched_until, next_before } = page;
    for (;;) {
      results.push(...ranked(page));
      expect(page).toMatchObject({ searched_until, next_before });
      if (page.next_offset === null) return { results, searched_until, next_before };
      page = await search(workspace, { ...query, limit: 100, offset: page.next_offset });
    }
  };

  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get(DataSource);
    varied = await t.createWorkspace({ name: 'Varied' });
    crowded = await t.createWorkspace({ name: 'Crowded' });
    assistantId = (await t.app.get(AssistantsService).create(varied.id, { name: 'Returns desk', model: 'gpt-4o-mini' })).id;

    // Varied: 300 conversations over 30 days, 4 messages each of 6 to 14 words, so that ranks
    // differ; one in three titled about refunds; two end users, two statuses, half with the assistant.
    await db.query(
      `INSERT INTO conversations (id, workspace_id, assistant_id, title, user_id, status, message_count, created_at, last_message_at)
       SELECT md5('varied' || g)::uuid, $1, CASE WHEN g % 2 = 0 THEN $2::uuid END,
              CASE WHEN g % 3 = 0 THEN 'Refund for order ' || g WHEN g % 3 = 1 THEN 'Order ' || g END,
              'user-' || (g % 2), CASE WHEN g % 5 = 0 THEN 'archived' ELSE 'active' END, 4,
              now() - interval '30 days' + interval '1 hour' * (g * 2.4), now() - interval '30 days' + interval '1 hour' * (g * 2.4) + interval '4 minutes'
         FROM generate_series(1, 300) AS g`,
      [varied.id, assistantId],
    );
    await db.query(
      `INSERT INTO conversation_messages (conversation_id, workspace_id, position, role, content, created_at)
       SELECT md5('varied' || g)::uuid, $1, p, CASE WHEN p % 2 = 1 THEN 'user' ELSE 'assistant' END,
              (SELECT string_agg(($2::text[])[1 + abs(hashint4(g * 10 + p * 100 + k)) % 12], ' ')
                 FROM generate_series(1, 6 + abs(hashint4(g + p)) % 9) AS k),
              now() - interval '30 days' + interval '1 hour' * (g * 2.4) + make_interval(mins => p)
         FROM generate_series(1, 300) AS g, generate_series(1, 4) AS p`,
      [varied.id, VOCABULARY],
    );
    // Crowded: 625 conversations, the newest first (one an hour back from now), each with 4
    // messages saying "overflow" the same way (equal ranks: the order is the newest activity).
    await db.query(
      `INSERT INTO conversations (id, workspace_id, title, status, message_count, created_at, last_message_at)
       SELECT md5('crowded' || k)::uuid, $1, 'Ticket ' || k, CASE WHEN k % 2 = 0 THEN 'archived' ELSE 'active' END, 4,
              now() - make_interval(hours => k), now() - make_interval(hours => k) + interval '4 seconds'
         FROM generate_series(1, 625) AS k`,
      [crowded.id],
    );
    await db.query(
      `INSERT INTO conversation_messages (conversation_id, workspace_id, position, role, content, created_at)
       SELECT md5('crowded' || k)::uuid, $1, p, CASE WHEN p % 2 = 1 THEN 'user' ELSE 'assistant' END,
              'The queue had an overflow again', now() - make_interval(hours => k) + make_interval(secs => p)
         FROM generate_series(1, 625) AS k, generate_series(1, 4) AS p`,
      [crowded.id],
    );
    await db.query('ANALYZE conversations');
    await db.query('ANALYZE conversation_messages');
  });
  afterAll(() => t.close());

  it('under the bound: the same results as ranking every match, in the same order, with the same snippets', async () => {
    // Through the API: a conversation that matches by its title only.
    const titled = (await varied.client.post('/conversations', { body: { title: 'Refund of a refund' } })) as { id: string };
    const [{ matches }] = (await db.query(
      `SELECT count(*)::int AS matches FROM conversation_messages WHERE workspace_id = $1 AND search_vector @@ to_tsquery('english', 'refund')`,
      [varied.id],
    )) as { matches: number }[];
    // With the 101 matching titles, under the bound.
    expect(matches).toBeGreaterThan(500);
    expect(matches).toBeLessThan(SEARCH_CANDIDATE_LIMIT - 101);

    const window = await wholeWindow(varied, { q: 'refund' });
    const reference = await oldSearch(varied.id, 'refund');
    expect(reference.length).toBeGreaterThan(250);
    expect(window).toEqual({ results: reference, searched_until: null, next_before: null });
    expect(window.results.every((hit) => /<mark>refund/i.test(hit.snippet))).toBe(true);
    const titleOnly = window.results.find((hit) => hit.conversation_id === titled.id);
    expect(titleOnly).toMatchObject({ message_id: null, snippet: '<mark>Refund</mark> of a <mark>refund</mark>' });
    // Pages of 20 are the same slices.
    expect(ranked(await search(varied, { q: 'refund', limit: 20, offset: 40 }))).toEqual(reference.slice(40, 60));

    // Two words, and a phrase.
    expect((await wholeWindow(varied, { q: 'refund invoice' })).results).toEqual(await oldSearch(varied.id, 'refund invoice'));
    expect((await wholeWindow(varied, { q: '"battery keyboard"' })).results).toEqual(await oldSearch(varied.id, '"battery keyboard"'));
  });

  it('under the bound: the filters give the old results too', async () => {
    const cases: [Record<string, unknown>, { assistantId?: string; userId?: string; status?: string }][] = [
      [{ assistant_id: 'returns-desk' }, { assistantId }],
      [{ user_id: 'user-1' }, { userId: 'user-1' }],
      [{ status: 'archived' }, { status: 'archived' }],
      [{ assistant_id: assistantId, status: 'active', user_id: 'user-0' }, { assistantId, status: 'active', userId: 'user-0' }],
    ];
    for (const [query, filters] of cases) {
      const reference = await oldSearch(varied.id, 'refund', filters);
      expect(reference.length).toBeGreaterThan(10);
      expect((await wholeWindow(varied, { q: 'refund', ...query })).results).toEqual(reference);
    }
  });

  it('over the bound: ranks the newest matches, says so, and continues with the older ones', async () => {
    // 2,500 matching messages: 1,000 + 1,000 + 500, 250 conversations per window.
    const reference = await oldSearch(crowded.id, 'overflow');
    expect(reference).toHaveLength(625);
    const windows = [];
    let before: string | undefined;
    do {
      const window = await wholeWindow(crowded, { q: 'overflow', ...(before && { before }) });
      windows.push(window);
      before = window.next_before ?? undefined;
    } while (before && windows.length < 5);

    expect(windows.map((window) => window.results.length)).toEqual([250, 250, 125]);
    expect(windows.map((window) => window.next_before === null)).toEqual([false, false, true]);
    // Equal ranks: each window is the next slice of the old order (newest activity first).
    expect(windows.flatMap((window) => window.results)).toEqual(reference);
    for (const window of windows) expect(window.results.every((hit) => hit.snippet.includes('<mark>overflow</mark>'))).toBe(true);

    // searched_until is the time of the window's oldest match: the 1,000th newest message.
    const [{ at }] = (await db.query(
      `SELECT created_at AS at FROM conversation_messages WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC OFFSET $2 LIMIT 1`,
      [crowded.id, SEARCH_CANDIDATE_LIMIT - 1],
    )) as { at: Date }[];
    expect(windows[0].searched_until).toBe(at.toISOString());
    const page = await search(crowded, { q: 'overflow', limit: 5 });
    expect(page).toMatchObject({ has_more: true, next_offset: 5, searched_until: at.toISOString() });
    for (const hit of page.data) expect(Date.parse(hit.message!.created_at)).toBeGreaterThanOrEqual(at.getTime());
  });

  it('over the bound, filtered: the bound counts the matches of the filtered conversations', async () => {
    const reference = await oldSearch(crowded.id, 'overflow', { status: 'archived' });
    expect(reference).toHaveLength(312);
    const first = await wholeWindow(crowded, { q: 'overflow', status: 'archived' });
    const second = await wholeWindow(crowded, { q: 'overflow', status: 'archived', before: first.next_before });
    expect([first.results.length, second.results.length, second.next_before]).toEqual([250, 62, null]);
    expect([...first.results, ...second.results]).toEqual(reference);
  });

  it('the dashboard says how far back it ranked, and links to the older matches', async () => {
    const person = await signUp(t.baseUrl, { email: 'searcher@example.com', name: 'Searcher' });
    await db.query(
      `INSERT INTO conversations (id, workspace_id, title, message_count, created_at, last_message_at)
       SELECT md5('dashboard' || k)::uuid, $1, 'Ticket ' || k, 2, now() - make_interval(hours => k), now() - make_interval(hours => k)
         FROM generate_series(1, 600) AS k`,
      [person.workspaceId],
    );
    await db.query(
      `INSERT INTO conversation_messages (conversation_id, workspace_id, position, role, content, created_at)
       SELECT md5('dashboard' || k)::uuid, $1, p, 'user', 'Another overflow', now() - make_interval(hours => k) - make_interval(secs => p)
         FROM generate_series(1, 600) AS k, generate_series(1, 2) AS p`,
      [person.workspaceId],
    );
    const path = `/w/${person.workspaceId}/conversations`;
    const first = await person.client.get(`${path}?q=overflow`);
    expect(first.status).toBe(200);
    expect(textOf(first.html)).toMatch(/Ranked the newest 1,000 matches, back to \d{4}-\d\d-\d\d \d\d:\d\d UTC\. Search older matches/);
    const older = first.html.match(/href="([^"]+)">Search older matches/)?.[1].replaceAll('&amp;', '&');
    expect(older).toMatch(new RegExp(`^${path}\\?q=overflow&before=[\\w-]+$`));
    const second = await person.client.get(older!);
    expect(second.status).toBe(200);
    // 600 conversations of 2 matches: the newest 500 in the first window, the other 100 in the second.
    expect(second.html).not.toContain('Search older matches');
    expect(second.html).toContain('<strong>Ticket 501</strong>');
    expect(second.html).not.toContain('<strong>Ticket 500</strong>');
    // Its pages keep the window.
    expect(second.html).toMatch(/href="[^"]*&amp;before=[\w-]+&amp;offset=20">More results/);
  });

  it('refuses a before that is not a next_before, and finds nothing for stop words', async () => {
    for (const before of ['yesterday', Buffer.from('2026-01-01T00:00:00Z~x').toString('base64url')]) {
      const error = (await search(crowded, { q: 'overflow', before }).then(
        () => null,
        (e: unknown) => e,
      )) as WireError;
      expect(error).toMatchObject({ status: 400, error: { type: 'bad_request', param: 'before' } });
    }
    expect(await search(crowded, { q: 'the of' })).toMatchObject({ data: [], searched_until: null, next_before: null });
  });
});
