import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { ConversationStore } from '../src/conversations/conversation-store';
import { AppendTurnParams, ConversationTurns } from '../src/conversations/conversation-turns';
import type { TurnMessage } from '../src/conversations/stored-messages';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface Conversation {
  id: string;
  object: 'conversation';
  assistant_id: string | null;
  title: string | null;
  source: 'api' | 'dashboard';
  status: 'active' | 'archived';
  user_id: string | null;
  metadata: Record<string, string>;
  message_count: number;
  total_input_tokens: number;
  total_output_tokens: number;
  total_cost_millicents: number;
  created_at: string;
  updated_at: string;
  last_message_at: string | null;
}
interface Message {
  id: string;
  object: 'conversation.message';
  role: string;
  content: string;
  tool_calls: unknown[] | null;
  tool_call_id: string | null;
  tokens: number;
  created_at: string;
}
interface Page<T> {
  data: T[];
  has_more: boolean;
  next_cursor: string | null;
}
interface ConversationWithMessages extends Conversation {
  messages: Page<Message>;
}
interface SearchResult {
  object: 'conversation.search_result';
  score: number;
  snippet: string;
  message: { id: string; role: string; created_at: string } | null;
  conversation: Conversation;
}
interface SearchPage {
  data: SearchResult[];
  has_more: boolean;
  next_offset: number | null;
}
interface Stats {
  totals: {
    conversations: number;
    messages: number;
    input_tokens: number;
    output_tokens: number;
    total_tokens: number;
    cost_millicents: number;
  };
  by_status: { active: number; archived: number };
  by_source: { api: number; dashboard: number; widget: number };
  daily: Array<{ date: string; conversations: number; messages: number }>;
}
interface WireError {
  status: number;
  error: { type: string; code: string; param: string | null; message: string };
}

const ISO = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/;
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

/** A `before` cursor as the search makes them (`<time>~<id>`, base64url), on the day `date`. */
function impossibleCursor(date: string): string {
  return Buffer.from(`${date}T12:00:00.000000Z~9b2f7f4e-3c1d-4e55-8a7b-6f0d2c9e1a33`).toString('base64url');
}

describe('conversations', () => {
  let t: TestApp;
  let store: ConversationStore;
  let turns: ConversationTurns;
  let dataSource: DataSource;

  beforeAll(async () => {
    t = await startTestApp();
    store = t.app.get(ConversationStore);
    turns = t.app.get(ConversationTurns);
    dataSource = t.app.get(DataSource);
  });
  afterAll(() => t.close());

  const create = (workspace: TestWorkspace, body: Record<string, unknown> = {}) =>
    workspace.client.post('/conversations', { body }) as Promise<Conversation>;
  const retrieve = (workspace: TestWorkspace, id: string, query: Record<string, unknown> = {}) =>
    workspace.client.get(`/conversations/${id}`, { query }) as Promise<ConversationWithMessages>;
  const list = (workspace: TestWorkspace, query: Record<string, unknown> = {}) =>
    workspace.client.get('/conversations', { query }) as Promise<Page<Conversation>>;
  const search = (workspace: TestWorkspace, query: Record<string, unknown>) =>
    workspace.client.get('/conversations/search', { query }) as Promise<SearchPage>;
  const stats = async (workspace: TestWorkspace) =>
    ((await workspace.client.get('/conversations/stats')) as { data: Stats }).data;
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error('expected the request to fail');
      },
      (error: unknown) => error as WireError,
    );

  /** A chat turn stored the way the chat settlement will: inside a transaction. */
  const appendTurn = (
    workspace: TestWorkspace,
    conversationId: string,
    messages: TurnMessage[],
    totals: Partial<Pick<AppendTurnParams, 'inputTokens' | 'outputTokens' | 'costMillicents'>> = {},
  ) =>
    dataSource.transaction((manager) =>
      turns.appendTurn(manager, {
        workspaceId: workspace.id,
        conversationId,
        messages,
        inputTokens: totals.inputTokens ?? 0,
        outputTokens: totals.outputTokens ?? 0,
        costMillicents: totals.costMillicents ?? 0,
      }),
    );
  const say = (workspace: TestWorkspace, conversationId: string, ...texts: string[]) =>
    appendTurn(
      workspace,
      conversationId,
      texts.map((content, index) => ({ role: index % 2 === 0 ? 'user' : 'assistant', content, tokens: 1 })),
    );

  describe('create, retrieve, update, delete', () => {
    it('creates a conversation with every field and answers 200 with it', async () => {
      const workspace = await t.createWorkspace();
      const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: 'Support Bot', model: 'gpt-4o-mini' });
      const { data, response } = await workspace.client
        .post('/conversations', {
          body: { title: 'Refund', assistant_id: assistant.id, user_id: 'user_1', metadata: { channel: 'web' } },
        })
        .withResponse();
      expect(response.status).toBe(200);
      expect(data).toEqual({
        id: expect.stringMatching(/^[0-9a-f-]{36}$/),
        object: 'conversation',
        assistant_id: assistant.id,
        title: 'Refund',
        source: 'api',
        status: 'active',
        user_id: 'user_1',
        metadata: { channel: 'web' },
        message_count: 0,
        total_input_tokens: 0,
        total_output_tokens: 0,
        total_cost_millicents: 0,
        created_at: expect.stringMatching(ISO),
        updated_at: expect.stringMatching(ISO),
        last_message_at: null,
      });
      const created = data as Conversation;
      expect(await retrieve(workspace, created.id)).toEqual({
        ...created,
        messages: { data: [], has_more: false, next_cursor: null },
      });
    });

    it('creates one with no field at all, and takes the assistant by slug', async () => {
      const workspace = await t.createWorkspace();
      expect(await create(workspace)).toMatchObject({
        assistant_id: null,
        title: null,
        user_id: null,
        metadata: {},
        source: 'api',
        status: 'active',
      });
      const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: 'Sales', model: 'gpt-4o-mini' });
      expect((await create(workspace, { assistant_id: assistant.slug })).assistant_id).toBe(assistant.id);
    });

    it('refuses an unknown assistant, or another workspace\'s, with 404 assistant_not_found', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const foreign = await t.app.get(AssistantsService).create(other.id, { name: 'Theirs', model: 'gpt-4o-mini' });
      for (const assistantId of [UNKNOWN_ID, 'no-such-slug', foreign.id, foreign.slug]) {
        const error = await failure(create(workspace, { assistant_id: assistantId }));
        expect(error.status).toBe(404);
        expect(error.error).toMatchObject({ type: 'not_found', code: 'assistant_not_found', param: 'assistant_id' });
      }
      expect((await list(workspace)).data).toEqual([]);
    });

    it('keeps the conversation when its assistant is deleted, without the assistant', async () => {
      const workspace = await t.createWorkspace();
      const assistants = t.app.get(AssistantsService);
      const assistant = await assistants.create(workspace.id, { name: 'Short lived', model: 'gpt-4o-mini' });
      const conversation = await create(workspace, { assistant_id: assistant.id });
      await assistants.delete(assistant.id);
      expect((await retrieve(workspace, conversation.id)).assistant_id).toBeNull();
    });

    it('refuses bad fields with 400 naming the field', async () => {
      const workspace = await t.createWorkspace();
      const tooManyKeys = Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']));
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ metadata: tooManyKeys }, 'metadata'],
        [{ metadata: { n: 1 } }, 'metadata'],
        [{ metadata: { long: 'x'.repeat(513) } }, 'metadata'],
        [{ metadata: { ['k'.repeat(65)]: 'v' } }, 'metadata'],
        [{ metadata: ['a'] }, 'metadata'],
        [{ metadata: 'text' }, 'metadata'],
        [{ metadata: null }, 'metadata'],
        [{ title: 'x'.repeat(513) }, 'title'],
        [{ title: 42 }, 'title'],
        [{ user_id: { id: 1 } }, 'user_id'],
        [{ assistant_id: 7 }, 'assistant_id'],
      ];
      for (const [body, param] of cases) {
        const error = await failure(create(workspace, body));
        expect([error.status, error.error.type, error.error.param]).toEqual([400, 'bad_request', param]);
      }
      // At the limits: accepted.
      const atLimits = Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`.padEnd(64, 'x'), 'v'.repeat(512)]));
      expect((await create(workspace, { metadata: atLimits, title: 't'.repeat(512) })).metadata).toEqual(atLimits);
      expect((await list(workspace)).data).toHaveLength(1);
    });

    it('updates title, status and metadata (replaced as a whole), and refuses bad values', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace, { title: 'Draft', metadata: { a: '1', b: '2' } });
      await new Promise((resolve) => setTimeout(resolve, 5));
      const updated = (await workspace.client.patch(`/conversations/${conversation.id}`, {
        body: { title: 'Final', status: 'archived', metadata: { c: '3' } },
      })) as Conversation;
      expect(updated).toMatchObject({ id: conversation.id, title: 'Final', status: 'archived', metadata: { c: '3' } });
      expect(Date.parse(updated.updated_at)).toBeGreaterThan(Date.parse(conversation.updated_at));
      expect(updated.created_at).toBe(conversation.created_at);

      const partial = (await workspace.client.patch(`/conversations/${conversation.id}`, { body: { title: null } })) as Conversation;
      expect(partial).toMatchObject({ title: null, status: 'archived', metadata: { c: '3' } });
      const unchanged = (await workspace.client.patch(`/conversations/${conversation.id}`, { body: {} })) as Conversation;
      expect(unchanged).toEqual(partial);

      const cases: Array<[Record<string, unknown>, string]> = [
        [{ status: 'deleted' }, 'status'],
        [{ status: null }, 'status'],
        [{ metadata: { n: 1 } }, 'metadata'],
        [{ metadata: null }, 'metadata'],
        [{ title: 'x'.repeat(513) }, 'title'],
      ];
      for (const [body, param] of cases) {
        const error = await failure(workspace.client.patch(`/conversations/${conversation.id}`, { body }));
        expect([error.status, error.error.param]).toEqual([400, param]);
      }
      expect(await retrieve(workspace, conversation.id)).toMatchObject({ title: null, status: 'archived', metadata: { c: '3' } });
    });

    it('deletes a conversation with its messages, as OpenAI answers deletions', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace);
      await say(workspace, conversation.id, 'hello', 'hi there');
      expect(await workspace.client.delete(`/conversations/${conversation.id}`)).toEqual({
        id: conversation.id,
        object: 'conversation.deleted',
        deleted: true,
      });
      expect((await failure(retrieve(workspace, conversation.id))).status).toBe(404);
      expect((await failure(workspace.client.delete(`/conversations/${conversation.id}`))).status).toBe(404);
      const [{ count }] = await dataSource.query(
        'SELECT count(*)::int AS count FROM conversation_messages WHERE conversation_id = $1',
        [conversation.id],
      );
      expect(count).toBe(0);
    });

    it('answers 404 conversation_not_found for unknown and malformed ids on every route', async () => {
      const workspace = await t.createWorkspace();
      for (const id of [UNKNOWN_ID, 'not-a-uuid', '12345', 'searchx']) {
        for (const call of [
          () => retrieve(workspace, id),
          () => workspace.client.patch(`/conversations/${id}`, { body: { title: 'x' } }),
          () => workspace.client.patch(`/conversations/${id}`, { body: {} }),
          () => workspace.client.delete(`/conversations/${id}`),
        ]) {
          const error = await failure(call());
          expect([error.status, error.error.type, error.error.code]).toEqual([404, 'not_found', 'conversation_not_found']);
        }
      }
    });

    it('routes /search and /stats to themselves, not to /:id', async () => {
      const workspace = await t.createWorkspace();
      const error = await failure(workspace.client.get('/conversations/search'));
      expect([error.status, error.error.param]).toEqual([400, 'q']);
      expect(await stats(workspace)).toMatchObject({ totals: { conversations: 0 } });
    });
  });

  describe('messages', () => {
    it('shows the stored messages oldest first with their tool calls, and the counters of the turns', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace, { title: 'Weather' });
      const toolCall = { id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Paris"}' } };
      const parts = [
        { type: 'text' as const, text: 'And this picture?' },
        { type: 'image_url' as const, image_url: { url: 'data:image/png;base64,iVBORw0KGgo=' } },
      ];
      const first = await appendTurn(
        workspace,
        conversation.id,
        [
          { role: 'system', content: 'Be brief.', tokens: 3 },
          { role: 'user', content: 'Weather in Paris?', tokens: 5 },
          { role: 'assistant', content: null, tool_calls: [toolCall], tokens: 9 },
          { role: 'tool', content: '{"temp": 21}', tool_call_id: 'call_1', tokens: 6 },
          { role: 'assistant', content: 'Sunny, 21 degrees.', tokens: 7 },
        ],
        { inputTokens: 40, outputTokens: 16, costMillicents: 12.345678 },
      );
      expect(first).toEqual({ messageIds: expect.any(Array), messageCount: 5, lastMessageAt: expect.any(Date) });
      await appendTurn(
        workspace,
        conversation.id,
        [
          { role: 'user', content: parts, tokens: 90 },
          { role: 'assistant', content: 'A cat.', tokens: 3 },
        ],
        { inputTokens: 150, outputTokens: 3, costMillicents: '0.000002' },
      );

      const shown = await retrieve(workspace, conversation.id);
      expect(shown).toMatchObject({
        message_count: 7,
        total_input_tokens: 190,
        total_output_tokens: 19,
        total_cost_millicents: 12.34568,
        last_message_at: expect.stringMatching(ISO),
      });
      expect(shown.messages.has_more).toBe(false);
      expect(shown.messages.data.map(({ role, content, tool_calls, tool_call_id, tokens }) => ({
        role,
        content,
        tool_calls,
        tool_call_id,
        tokens,
      }))).toEqual([
        { role: 'system', content: 'Be brief.', tool_calls: null, tool_call_id: null, tokens: 3 },
        { role: 'user', content: 'Weather in Paris?', tool_calls: null, tool_call_id: null, tokens: 5 },
        { role: 'assistant', content: '', tool_calls: [toolCall], tool_call_id: null, tokens: 9 },
        { role: 'tool', content: '{"temp": 21}', tool_calls: null, tool_call_id: 'call_1', tokens: 6 },
        { role: 'assistant', content: 'Sunny, 21 degrees.', tool_calls: null, tool_call_id: null, tokens: 7 },
        { role: 'user', content: JSON.stringify(parts), tool_calls: null, tool_call_id: null, tokens: 90 },
        { role: 'assistant', content: 'A cat.', tool_calls: null, tool_call_id: null, tokens: 3 },
      ]);
      expect(shown.messages.data[0]).toEqual({
        id: first!.messageIds[0],
        object: 'conversation.message',
        role: 'system',
        content: 'Be brief.',
        tool_calls: null,
        tool_call_id: null,
        tokens: 3,
        annotations: null,
        created_at: expect.stringMatching(ISO),
      });

      // For the chat module: the same messages in OpenAI's format, ready to replay.
      expect(await turns.findForChat(workspace.id, conversation.id)).toMatchObject({ id: conversation.id, title: 'Weather', messageCount: 7 });
      expect(await turns.historyWithin(workspace.id, conversation.id, 1_000_000)).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: 'Weather in Paris?' },
        { role: 'assistant', content: null, tool_calls: [toolCall] },
        { role: 'tool', content: '{"temp": 21}', tool_call_id: 'call_1' },
        { role: 'assistant', content: 'Sunny, 21 degrees.' },
        { role: 'user', content: parts },
        { role: 'assistant', content: 'A cat.' },
      ]);
    });

    it('findForChat refuses unknown, malformed and foreign ids with 404 conversation_not_found', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const theirs = await create(other);
      for (const id of [UNKNOWN_ID, 'nope', theirs.id]) {
        await expect(turns.findForChat(workspace.id, id)).rejects.toMatchObject({
          type: 'not_found',
          status: 404,
          code: 'conversation_not_found',
          param: 'conversation_id',
        });
      }
    });

    it('pages through long conversations with messages_limit and messages_after', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const conversation = await create(workspace);
      const texts = Array.from({ length: 7 }, (_, i) => `message ${i + 1}`);
      await say(workspace, conversation.id, ...texts.slice(0, 4));
      await say(workspace, conversation.id, ...texts.slice(4));

      const seen: string[] = [];
      let page = await retrieve(workspace, conversation.id, { messages_limit: 3 });
      expect(page.message_count).toBe(7);
      seen.push(...page.messages.data.map((message) => message.content));
      while (page.messages.has_more) {
        expect(page.messages.next_cursor).toBe(page.messages.data[page.messages.data.length - 1].id);
        page = await retrieve(workspace, conversation.id, { messages_limit: 3, messages_after: page.messages.next_cursor });
        seen.push(...page.messages.data.map((message) => message.content));
      }
      expect(seen).toEqual(texts);
      expect(page.messages.next_cursor).toBeNull();
      expect((await retrieve(workspace, conversation.id)).messages.data).toHaveLength(7);

      const elsewhere = await create(workspace);
      const [foreignMessage] = (await say(workspace, elsewhere.id, 'elsewhere'))!.messageIds;
      const theirs = await create(other);
      const [theirMessage] = (await say(other, theirs.id, 'theirs'))!.messageIds;
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ messages_after: 'nope' }, 'messages_after'],
        [{ messages_after: UNKNOWN_ID }, 'messages_after'],
        [{ messages_after: foreignMessage }, 'messages_after'],
        [{ messages_after: theirMessage }, 'messages_after'],
        [{ messages_limit: 0 }, 'messages_limit'],
        [{ messages_limit: 1001 }, 'messages_limit'],
      ];
      for (const [query, param] of cases) {
        const error = await failure(retrieve(workspace, conversation.id, query));
        expect([error.status, error.error.param]).toEqual([400, param]);
      }
      expect((await retrieve(workspace, conversation.id, { messages_limit: 1000 })).messages.data).toHaveLength(7);
    });
  });

  describe('list', () => {
    it('lists newest activity first and pages with starting_after', async () => {
      const workspace = await t.createWorkspace();
      const a = await create(workspace, { title: 'A' });
      const b = await create(workspace, { title: 'B' });
      const c = await create(workspace, { title: 'C' });
      const d = await create(workspace, { title: 'D' });
      await say(workspace, b.id, 'B speaks last');
      // Activity: B (a message), then D, C, A by creation.
      const first = await list(workspace, { limit: 3 });
      expect(first.data.map((row) => row.title)).toEqual(['B', 'D', 'C']);
      expect(first).toMatchObject({ has_more: true, next_cursor: c.id });
      const second = await list(workspace, { limit: 3, starting_after: first.next_cursor });
      expect(second).toEqual({ data: [expect.objectContaining({ id: a.id })], has_more: false, next_cursor: null });
      expect((await list(workspace)).data.map((row) => row.id)).toEqual([b.id, d.id, c.id, a.id]);
      const { messages, ...shownB } = await retrieve(workspace, b.id);
      expect(messages.data).toHaveLength(1);
      expect((await list(workspace)).data[0]).toEqual(shownB);
    });

    it('filters by assistant (id or slug), user and status', async () => {
      const workspace = await t.createWorkspace();
      const assistants = t.app.get(AssistantsService);
      const sales = await assistants.create(workspace.id, { name: 'Sales', model: 'gpt-4o-mini' });
      const support = await assistants.create(workspace.id, { name: 'Support', model: 'gpt-4o-mini' });
      const one = await create(workspace, { assistant_id: sales.id, user_id: 'alice' });
      const two = await create(workspace, { assistant_id: support.id, user_id: 'alice' });
      const three = await create(workspace, { assistant_id: sales.id, user_id: 'bob' });
      await create(workspace);
      await workspace.client.patch(`/conversations/${three.id}`, { body: { status: 'archived' } });

      const ids = async (query: Record<string, unknown>) => (await list(workspace, query)).data.map((row) => row.id);
      expect(await ids({ assistant_id: sales.id })).toEqual([three.id, one.id]);
      expect(await ids({ assistant_id: 'sales' })).toEqual([three.id, one.id]);
      expect(await ids({ user_id: 'alice' })).toEqual([two.id, one.id]);
      expect(await ids({ status: 'archived' })).toEqual([three.id]);
      expect(await ids({ status: 'active', assistant_id: 'sales' })).toEqual([one.id]);
      expect(await ids({ user_id: 'carol' })).toEqual([]);
      expect(await ids({ assistant_id: 'sales', user_id: 'alice', limit: 1 })).toEqual([one.id]);

      const unknownAssistant = await failure(list(workspace, { assistant_id: 'nobody' }));
      expect([unknownAssistant.status, unknownAssistant.error.code, unknownAssistant.error.param]).toEqual([
        404,
        'assistant_not_found',
        'assistant_id',
      ]);
    });

    it('refuses bad list parameters with 400 naming them', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const theirs = await create(other);
      const cases: Array<[Record<string, unknown>, string]> = [
        [{ limit: 0 }, 'limit'],
        [{ limit: 101 }, 'limit'],
        [{ limit: 'many' }, 'limit'],
        [{ starting_after: 'nope' }, 'starting_after'],
        [{ starting_after: UNKNOWN_ID }, 'starting_after'],
        [{ starting_after: theirs.id }, 'starting_after'],
        [{ status: 'deleted' }, 'status'],
      ];
      for (const [query, param] of cases) {
        const error = await failure(list(workspace, query));
        expect([error.status, error.error.type, error.error.param]).toEqual([400, 'bad_request', param]);
      }
    });
  });

  describe('search', () => {
    let workspace: TestWorkspace;
    const ids: Record<string, string> = {};

    beforeAll(async () => {
      workspace = await t.createWorkspace();
      const conversation = async (name: string, title: string | null, ...texts: string[]) => {
        ids[name] = (await create(workspace, { title, user_id: name })).id;
        if (texts.length > 0) await say(workspace, ids[name], ...texts);
      };
      await conversation('title', 'Database migration checklist', 'Hello there', 'Hi! How can I help?');
      await conversation(
        'dense',
        'Tonight',
        'We need a database migration plan. The database migration must run tonight.',
        'The database is fine.',
      );
      await conversation('stemmed', null, 'Any advice on migrating databases between servers?');
      await conversation('sparse', null, 'The database is slow. Unrelated sentence here. Later we talk about a migration of birds.');
      await conversation('one word', 'Databases', 'Only the database, nothing else.');
      await conversation('unrelated', 'Holidays', 'Where should we travel this summer?');
    });

    it('ranks the best matching conversation first, one result per conversation, with a highlighted snippet', async () => {
      const page = await search(workspace, { q: 'database migration' });
      expect(page.data.map((hit) => hit.conversation.user_id)).toEqual(['title', 'dense', 'stemmed', 'sparse']);
      expect(page).toMatchObject({ has_more: false, next_offset: null });
      for (const hit of page.data) {
        expect(hit.object).toBe('conversation.search_result');
        expect(hit.score).toBeGreaterThan(0);
        expect(hit.snippet).toMatch(/<mark>[^<]+<\/mark>/);
      }
      expect(page.data[0].score).toBeGreaterThan(page.data[1].score);

      const [title, dense, stemmed] = page.data;
      // The title matched, no message did: the snippet is the highlighted title.
      expect(title.message).toBeNull();
      expect(title.snippet).toBe('<mark>Database</mark> <mark>migration</mark> checklist');
      expect(title.conversation).toMatchObject({ id: ids.title, object: 'conversation', message_count: 2 });
      // The best of the conversation's matching messages.
      const densest = (await retrieve(workspace, ids.dense)).messages.data[0];
      expect(dense.message).toEqual({ id: densest.id, role: 'user', created_at: densest.created_at });
      expect(dense.snippet).toContain('<mark>database</mark> <mark>migration</mark> plan');
      expect(stemmed.snippet).toContain('<mark>migrating</mark> <mark>databases</mark>');
    });

    it('supports web-search syntax: phrases, or, exclusions', async () => {
      const users = async (q: string) => (await search(workspace, { q })).data.map((hit) => hit.conversation.user_id).sort();
      expect(await users('"migration plan"')).toEqual(['dense']);
      expect(await users('summer or checklist')).toEqual(['title', 'unrelated']);
      // A message (or the title) must match the whole query: "The database is fine." does, in "dense".
      expect(await users('database -migration')).toEqual(['dense', 'one word']);
      expect(await users('the of and')).toEqual([]);
      expect(await users('zeppelin')).toEqual([]);
    });

    it('takes the list filters, and pages by offset', async () => {
      const byUser = await search(workspace, { q: 'database', user_id: 'sparse' });
      expect(byUser.data.map((hit) => hit.conversation.id)).toEqual([ids.sparse]);

      await workspace.client.patch(`/conversations/${ids.dense}`, { body: { status: 'archived' } });
      const archived = await search(workspace, { q: 'database', status: 'archived' });
      expect(archived.data.map((hit) => hit.conversation.id)).toEqual([ids.dense]);
      await workspace.client.patch(`/conversations/${ids.dense}`, { body: { status: 'active' } });

      const all = (await search(workspace, { q: 'database' })).data.map((hit) => hit.conversation.id);
      expect(new Set(all).size).toBe(5);
      const first = await search(workspace, { q: 'database', limit: 2 });
      expect(first).toMatchObject({ has_more: true, next_offset: 2 });
      const second = await search(workspace, { q: 'database', limit: 2, offset: 2 });
      const third = await search(workspace, { q: 'database', limit: 2, offset: 4 });
      expect(third).toMatchObject({ has_more: false, next_offset: null });
      expect([...first.data, ...second.data, ...third.data].map((hit) => hit.conversation.id)).toEqual(all);
    });

    it('indexes only the text parts of array content, and follows title changes', async () => {
      const conversation = await create(workspace, { title: 'Pictures' });
      await appendTurn(workspace, conversation.id, [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What breed is this kangaroo?' },
            { type: 'image_url', image_url: { url: 'https://example.com/wombat.png' } },
          ],
          tokens: 10,
        },
      ]);
      const hit = (await search(workspace, { q: 'kangaroo' })).data;
      expect(hit.map((row) => row.conversation.id)).toEqual([conversation.id]);
      expect(hit[0].snippet).toBe('What breed is this <mark>kangaroo</mark>');
      expect((await search(workspace, { q: 'wombat' })).data).toEqual([]);

      await workspace.client.patch(`/conversations/${conversation.id}`, { body: { title: 'Marsupials' } });
      expect((await search(workspace, { q: 'marsupial' })).data.map((row) => row.conversation.id)).toEqual([conversation.id]);
      expect((await search(workspace, { q: 'pictures' })).data).toEqual([]);
      await workspace.client.delete(`/conversations/${conversation.id}`);
    });

    it('requires q, and refuses bad parameters with 400 naming them', async () => {
      const cases: Array<[Record<string, unknown>, string]> = [
        [{}, 'q'],
        [{ q: '' }, 'q'],
        [{ q: '   ' }, 'q'],
        [{ q: 'x'.repeat(501) }, 'q'],
        [{ q: 'database', limit: 0 }, 'limit'],
        [{ q: 'database', offset: -1 }, 'offset'],
        [{ q: 'database', status: 'gone' }, 'status'],
        // Cursors of the search's own shape holding a date that does not exist.
        [{ q: 'database', before: impossibleCursor('2026-02-30') }, 'before'],
        [{ q: 'database', before: impossibleCursor('2026-04-31') }, 'before'],
        [{ q: 'database', before: impossibleCursor('0000-01-01') }, 'before'],
      ];
      for (const [query, param] of cases) {
        const error = await failure(search(workspace, query));
        expect([error.status, error.error.type, error.error.param]).toEqual([400, 'bad_request', param]);
      }
    });
  });

  describe('stats', () => {
    it('counts what the workspace created: totals, statuses, sources and the last 30 days', async () => {
      const workspace = await t.createWorkspace();
      const a = await create(workspace);
      const b = await create(workspace);
      const old = await create(workspace);
      const ancient = await create(workspace);
      await store.create(workspace.id, { title: 'From the dashboard', source: 'dashboard' });
      await workspace.client.patch(`/conversations/${b.id}`, { body: { status: 'archived' } });
      const turn = (id: string, count: number, input: number, output: number, cost: number) =>
        appendTurn(
          workspace,
          id,
          Array.from({ length: count }, () => ({ role: 'user' as const, content: 'hi', tokens: 1 })),
          { inputTokens: input, outputTokens: output, costMillicents: cost },
        );
      await turn(a.id, 2, 100, 20, 10.5);
      await turn(a.id, 2, 150, 30, 0.25);
      await turn(b.id, 3, 10, 5, 1);
      await turn(old.id, 4, 1, 1, 0.125);
      await turn(ancient.id, 1, 0, 0, 0);
      // Three days ago, and forty days ago: outside the 30-day window but in the totals.
      for (const [id, days] of [
        [old.id, 3],
        [ancient.id, 40],
      ] as const) {
        await dataSource.query(`UPDATE conversations SET created_at = created_at - make_interval(days => $2) WHERE id = $1`, [id, days]);
        await dataSource.query(
          `UPDATE conversation_messages SET created_at = created_at - make_interval(days => $2) WHERE conversation_id = $1`,
          [id, days],
        );
      }

      const result = await stats(workspace);
      expect(result.totals).toEqual({
        conversations: 5,
        messages: 12,
        input_tokens: 261,
        output_tokens: 56,
        total_tokens: 317,
        cost_millicents: 11.875,
      });
      expect(result.by_status).toEqual({ active: 4, archived: 1 });
      expect(result.by_source).toEqual({ api: 4, dashboard: 1, widget: 0 });

      expect(result.daily).toHaveLength(30);
      const day = (offset: number) => new Date(Date.now() - offset * 86_400_000).toISOString().slice(0, 10);
      expect(result.daily.map((entry) => entry.date)).toEqual(Array.from({ length: 30 }, (_, i) => day(i)));
      const active = result.daily.filter((entry) => entry.conversations > 0 || entry.messages > 0);
      expect(active).toEqual([
        { date: day(0), conversations: 3, messages: 7 },
        { date: day(3), conversations: 1, messages: 4 },
      ]);
    });
  });

  describe('isolation between workspaces', () => {
    it('never shows another workspace\'s conversation: 404 by id, absent from list, search and stats', async () => {
      const mine = await t.createWorkspace();
      const theirs = await t.createWorkspace();
      const own = await create(mine, { title: 'Quarterly budget review' });
      await say(mine, own.id, 'budget numbers');
      const foreign = await create(theirs, { title: 'Quarterly budget secrets' });
      await appendTurn(theirs, foreign.id, [{ role: 'user', content: 'secret budget', tokens: 5 }], {
        inputTokens: 9,
        outputTokens: 9,
        costMillicents: 99,
      });

      for (const call of [
        () => retrieve(mine, foreign.id),
        () => mine.client.patch(`/conversations/${foreign.id}`, { body: { title: 'hijacked' } }),
        () => mine.client.delete(`/conversations/${foreign.id}`),
      ]) {
        const error = await failure(call());
        expect([error.status, error.error.code]).toEqual([404, 'conversation_not_found']);
      }
      expect(await retrieve(theirs, foreign.id)).toMatchObject({ title: 'Quarterly budget secrets', message_count: 1 });

      expect((await list(mine)).data.map((row) => row.id)).toEqual([own.id]);
      expect((await search(mine, { q: 'budget' })).data.map((hit) => hit.conversation.id)).toEqual([own.id]);
      expect((await search(mine, { q: 'secret' })).data).toEqual([]);
      const myStats = await stats(mine);
      expect(myStats.totals).toMatchObject({ conversations: 1, messages: 1, input_tokens: 0, cost_millicents: 0 });
      expect(myStats.daily[0]).toMatchObject({ conversations: 1, messages: 1 });

      // The service refuses to write into another workspace's conversation.
      expect(await appendTurn(mine, foreign.id, [{ role: 'user', content: 'x', tokens: 1 }], { inputTokens: 1 })).toBeNull();
      expect((await retrieve(theirs, foreign.id)).message_count).toBe(1);
    });
  });

  describe('appendTurn', () => {
    it('writes in the caller\'s transaction: nothing is stored when it rolls back', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace);
      await expect(
        dataSource.transaction(async (manager) => {
          const appended = await turns.appendTurn(manager, {
            workspaceId: workspace.id,
            conversationId: conversation.id,
            messages: [{ role: 'user', content: 'lost', tokens: 1 }],
            inputTokens: 10,
            outputTokens: 10,
            costMillicents: 10,
          });
          expect(appended?.messageCount).toBe(1);
          throw new Error('settlement failed');
        }),
      ).rejects.toThrow('settlement failed');
      expect(await retrieve(workspace, conversation.id)).toMatchObject({
        message_count: 0,
        total_input_tokens: 0,
        total_cost_millicents: 0,
        last_message_at: null,
        messages: { data: [] },
      });
    });

    it('adds up concurrent turns exactly, keeping each turn\'s messages together and in order', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace);
      const turns = 12;
      await Promise.all(
        Array.from({ length: turns }, (_, i) =>
          appendTurn(
            workspace,
            conversation.id,
            [
              { role: 'user', content: `question ${i}`, tokens: 1 },
              { role: 'assistant', content: `answer ${i}`, tokens: 2 },
            ],
            { inputTokens: 100 + i, outputTokens: 10, costMillicents: 0.1 },
          ),
        ),
      );
      const shown = await retrieve(workspace, conversation.id);
      expect(shown).toMatchObject({
        message_count: 2 * turns,
        total_input_tokens: 100 * turns + (turns * (turns - 1)) / 2,
        total_output_tokens: 10 * turns,
        total_cost_millicents: 1.2,
        last_message_at: expect.stringMatching(ISO),
      });
      const contents = shown.messages.data.map((message) => message.content);
      expect(contents).toHaveLength(2 * turns);
      for (let i = 0; i < contents.length; i += 2) {
        const n = contents[i].replace('question ', '');
        expect(contents[i + 1]).toBe(`answer ${n}`);
      }
      expect(new Set(contents).size).toBe(2 * turns);
    });

    it('returns null for a deleted conversation, and refuses malformed turns', async () => {
      const workspace = await t.createWorkspace();
      const conversation = await create(workspace);
      const turn = (overrides: Partial<AppendTurnParams>) =>
        dataSource.transaction((manager) =>
          turns.appendTurn(manager, {
            workspaceId: workspace.id,
            conversationId: conversation.id,
            messages: [{ role: 'user', content: 'hi', tokens: 1 }],
            inputTokens: 1,
            outputTokens: 1,
            costMillicents: 1,
            ...overrides,
          }),
        );
      await expect(turn({ messages: [{ role: 'narrator' as 'user', content: 'x', tokens: 1 }] })).rejects.toThrow(/role/);
      await expect(turn({ messages: [{ role: 'user', content: 'x', tokens: -1 }] })).rejects.toThrow(/tokens/);
      await expect(turn({ inputTokens: 1.5 })).rejects.toThrow(/inputTokens/);
      await expect(turn({ costMillicents: -1 })).rejects.toThrow(/costMillicents/);
      await expect(turn({ costMillicents: '1e3' })).rejects.toThrow(/costMillicents/);
      expect((await retrieve(workspace, conversation.id)).message_count).toBe(0);

      // developer messages are stored as system messages.
      await turn({ messages: [{ role: 'developer', content: 'Answer in French.', tokens: 4 }] });
      expect(await turns.historyWithin(workspace.id, conversation.id, 1_000)).toEqual([
        { role: 'system', content: 'Answer in French.' },
      ]);

      await workspace.client.delete(`/conversations/${conversation.id}`);
      expect(await turn({})).toBeNull();
      expect(await turn({ conversationId: 'not-a-uuid' })).toBeNull();
    });
  });

  describe('OpenAPI', () => {
    it('documents every conversation route, parameter and success response with examples', async () => {
      const document = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as {
        paths: Record<string, Record<string, { parameters?: Array<{ name: string; example?: unknown; schema?: { example?: unknown } }>; responses: Record<string, unknown> }>>;
      };
      const paths = Object.keys(document.paths).filter((path) => path.startsWith('/v1/conversations'));
      expect(paths.sort()).toEqual(['/v1/conversations', '/v1/conversations/search', '/v1/conversations/stats', '/v1/conversations/{id}']);
      expect(Object.keys(document.paths['/v1/conversations']).sort()).toEqual(['get', 'post']);
      expect(Object.keys(document.paths['/v1/conversations/{id}']).sort()).toEqual(['delete', 'get', 'patch']);
      for (const path of paths) {
        for (const operation of Object.values(document.paths[path])) {
          expect(operation.responses).toHaveProperty('200');
          for (const parameter of operation.parameters ?? []) {
            expect([parameter.name, parameter.example ?? parameter.schema?.example]).toEqual([parameter.name, expect.anything()]);
          }
        }
      }
    });
  });
});
