import { DataSource } from 'typeorm';
import { ConversationLimits1764000900000 } from '../migrations/1764000900000-ConversationLimits';
import { ApiError } from '../src/common/errors/api-error';
import {
  MAX_CONVERSATION_CONTENT_BYTES,
  MAX_CONVERSATION_MESSAGES,
  MESSAGES_PAGE_BYTES,
} from '../src/conversations/conversation-limits';
import { ConversationStore } from '../src/conversations/conversation-store';
import { ConversationTurns } from '../src/conversations/conversation-turns';
import type { TurnMessage } from '../src/conversations/stored-messages';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

const MB = 1024 * 1024;
const UNKNOWN_ID = '00000000-0000-4000-8000-000000000000';

interface WireMessage {
  id: string;
  role: string;
  content: string;
}
interface WireConversation {
  messages: { data: WireMessage[]; has_more: boolean; next_cursor: string | null };
}

/** Words that stem to themselves and to none of the words searched for. */
const FILLER_WORDS = ['apple', 'river', 'stone', 'cloud', 'maple', 'ember', 'field', 'grain', 'harbor', 'lantern'];

/** About `length` characters of filler words, the same for the same seed. */
function filler(seed: number, length: number): string {
  const words: string[] = [];
  let size = 0;
  for (let i = 0; size < length; i++) {
    const word = FILLER_WORDS[(seed * 7 + i * i * 3 + i) % FILLER_WORDS.length];
    words.push(word);
    size += word.length + 1;
  }
  return words.join(' ');
}

const imageParts = (bytes: number) => [
  { type: 'text' as const, text: 'What is in this picture?' },
  { type: 'image_url' as const, image_url: { url: `data:image/png;base64,${'A'.repeat(bytes)}` } },
];

describe('conversations stay bounded', () => {
  let t: TestApp;
  let store: ConversationStore;
  let turns: ConversationTurns;
  let dataSource: DataSource;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    t = await startTestApp();
    store = t.app.get(ConversationStore);
    turns = t.app.get(ConversationTurns);
    dataSource = t.app.get(DataSource);
    workspace = await t.createWorkspace();
  });
  afterAll(() => t.close());

  const newConversation = async (owner: TestWorkspace = workspace) => (await store.create(owner.id, {})).id;
  /** A chat turn stored the way the chat settlement stores it: inside a transaction. */
  const appendTurn = (conversationId: string, messages: TurnMessage[], owner: TestWorkspace = workspace) =>
    dataSource.transaction((manager) =>
      turns.appendTurn(manager, {
        workspaceId: owner.id,
        conversationId,
        messages,
        inputTokens: 0,
        outputTokens: 0,
        costMillicents: 0,
      }),
    );
  const refusal = (check: () => void): ApiError => {
    try {
      check();
    } catch (error) {
      return error as ApiError;
    }
    throw new Error('expected a refusal');
  };

  describe('the history a chat turn reads', () => {
    // Twelve large messages (256 KB each), with two tool-call exchanges, image parts and stored token counts.
    const big = (marker: string) => `${marker}: ${'lorem ipsum '.repeat(256 * 1024 / 12)}`;
    const call = (id: string) => ({ id, type: 'function' as const, function: { name: 'lookup', arguments: '{"q":"x"}' } });
    const seeded: TurnMessage[] = [
      { role: 'system', content: big('m1'), tokens: 50 },
      { role: 'user', content: big('m2'), tokens: 100 },
      { role: 'assistant', content: null, tool_calls: [call('call_a')], tokens: 30 },
      { role: 'tool', content: big('m4'), tool_call_id: 'call_a', tokens: 40 },
      { role: 'tool', content: big('m5'), tool_call_id: 'call_a', tokens: 40 },
      { role: 'assistant', content: big('m6'), tokens: 120 },
      { role: 'user', content: big('m7'), tokens: 80 },
      { role: 'assistant', content: big('m8'), tokens: 200 },
      { role: 'user', content: [{ type: 'text', text: 'm9: and this?' }, ...imageParts(256 * 1024).slice(1)], tokens: 60 },
      { role: 'assistant', content: 'm10: let me look', tool_calls: [call('call_b')], tokens: 25 },
      { role: 'tool', content: big('m11'), tool_call_id: 'call_b', tokens: 35 },
      { role: 'assistant', content: big('m12'), tokens: 90 },
    ];
    const markerOf = (message: { content?: unknown; tool_calls?: unknown }, index: number): string => {
      if (typeof message.content === 'string') return message.content.slice(0, message.content.indexOf(':'));
      if (Array.isArray(message.content)) return (message.content[0] as { text: string }).text.slice(0, 2);
      return `m${index + 1}`; // the assistant message that only called tools
    };
    const seededMarkers = seeded.map(markerOf);

    /** The rule chat applied to the whole history: drop the oldest until it fits, then any leading tool results. */
    const expectedMarkers = (budget: number): string[] => {
      let total = seeded.reduce((sum, message) => sum + message.tokens, 0);
      let start = 0;
      while (start < seeded.length && total > budget) total -= seeded[start++].tokens;
      while (start < seeded.length && seeded[start].role === 'tool') start++;
      return seededMarkers.slice(start);
    };

    let conversationId: string;
    beforeAll(async () => {
      conversationId = await newConversation();
      await appendTurn(conversationId, seeded.slice(0, 6));
      await appendTurn(conversationId, seeded.slice(6));
    });

    it('reads only the newest messages whose stored tokens fit the budget, oldest first', async () => {
      // Every boundary: each suffix's exact token sum, one less, and more than everything.
      const suffixSums = seeded.map((_, start) => seeded.slice(start).reduce((sum, message) => sum + message.tokens, 0));
      const budgets = [...new Set([1, 24, 10_000, ...suffixSums, ...suffixSums.map((sum) => sum - 1)])].sort((a, b) => a - b);
      for (const budget of budgets) {
        const history = await turns.historyWithin(workspace.id, conversationId, budget);
        expect({ budget, markers: history.map((message, i) => markerOf(message, seeded.length - history.length + i)) }).toEqual({
          budget,
          markers: expectedMarkers(budget),
        });
      }
      // 90 + 35 fit, but m11 answers a call that was left out: only m12.
      expect((await turns.historyWithin(workspace.id, conversationId, 125)).map((m) => m.role)).toEqual(['assistant']);
      expect(await turns.historyWithin(workspace.id, conversationId, 0)).toEqual([]);
      expect(await turns.historyWithin(workspace.id, conversationId, -5)).toEqual([]);
      expect(await turns.historyWithin(workspace.id, conversationId, 89.9)).toEqual([]);
    });

    it('gives the messages back in the format they were sent in', async () => {
      const history = await turns.historyWithin(workspace.id, conversationId, 10_000);
      expect(history).toHaveLength(12);
      expect(history[2]).toEqual({ role: 'assistant', content: null, tool_calls: [call('call_a')] });
      expect(history[3]).toEqual({ role: 'tool', content: big('m4'), tool_call_id: 'call_a' });
      expect(history[8]).toEqual({ role: 'user', content: seeded[8].content });
      expect(history[9]).toEqual({ role: 'assistant', content: 'm10: let me look', tool_calls: [call('call_b')] });
    });

    it("reads nothing of another workspace's conversation, and findForChat answers 404 for it", async () => {
      const other = await t.createWorkspace();
      expect(await turns.historyWithin(other.id, conversationId, 10_000)).toEqual([]);
      expect(await turns.historyWithin(workspace.id, 'not-a-uuid', 10_000)).toEqual([]);
      for (const id of [conversationId, UNKNOWN_ID, 'nope']) {
        await expect(turns.findForChat(other.id, id)).rejects.toMatchObject({
          status: 404,
          code: 'conversation_not_found',
          param: 'conversation_id',
        });
      }
      expect(await turns.findForChat(workspace.id, conversationId)).toMatchObject({ id: conversationId, messageCount: 12 });
    });
  });

  describe('what a conversation stores', () => {
    it('counts the bytes of every stored message in content_bytes, turn by turn', async () => {
      const conversationId = await newConversation();
      const toolCalls = [{ id: 'call_1', type: 'function' as const, function: { name: 'get_weather', arguments: '{"city":"Zürich"}' } }];
      const parts = imageParts(1000);
      const turn: TurnMessage[] = [
        { role: 'developer', content: 'Antworte kurz. ✓', tokens: 6 },
        { role: 'user', content: parts, tokens: 90 },
        { role: 'assistant', content: null, tool_calls: toolCalls, tokens: 20 },
        { role: 'tool', content: '{"temp": 21}', tool_call_id: 'call_1', tokens: 8 },
      ];
      await appendTurn(conversationId, turn);
      await appendTurn(conversationId, [{ role: 'assistant', content: 'Sonnig, 21 °C in Zürich.', tokens: 9 }]);
      const bytes = (text: string) => Buffer.byteLength(text, 'utf8');
      const expected =
        bytes('Antworte kurz. ✓') +
        bytes(JSON.stringify(parts)) +
        bytes(JSON.stringify(toolCalls)) +
        bytes('{"temp": 21}') +
        bytes('Sonnig, 21 °C in Zürich.');
      expect((await turns.findForChat(workspace.id, conversationId)).contentBytes).toBe(expected);
    });

    it('is counted for the conversations stored before the migration', async () => {
      const plain = await newConversation();
      await appendTurn(plain, [
        { role: 'user', content: 'Grüße aus Köln', tokens: 5 },
        { role: 'assistant', content: imageParts(5000), tokens: 90 },
      ]);
      const withCalls = await newConversation();
      await appendTurn(withCalls, [
        { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }], tokens: 9 },
      ]);
      const empty = await newConversation();
      const before = (await turns.findForChat(workspace.id, plain)).contentBytes;

      const runner = dataSource.createQueryRunner();
      try {
        await new ConversationLimits1764000900000().down(runner);
        await new ConversationLimits1764000900000().up(runner);
      } finally {
        await runner.release();
      }
      const counted = async (id: string) => (await turns.findForChat(workspace.id, id)).contentBytes;
      expect(await counted(plain)).toBe(before);
      // Tool calls are counted as jsonb prints them: a few spaces more than their JSON as sent.
      const [{ bytes }] = await dataSource.query(`SELECT octet_length(tool_calls::text) AS bytes FROM conversation_messages WHERE conversation_id = $1`, [withCalls]);
      expect(await counted(withCalls)).toBe(Number(bytes));
      expect(await counted(empty)).toBe(0);
    });

    it(`refuses a turn that would take a conversation past ${MAX_CONVERSATION_CONTENT_BYTES / MB} MB, before it is sent`, async () => {
      const conversationId = await newConversation();
      for (let i = 0; i < 3; i++) {
        await appendTurn(conversationId, [
          { role: 'user', content: imageParts(10 * MB), tokens: 765 },
          { role: 'assistant', content: 'A white square.', tokens: 5 },
        ]);
      }
      const conversation = await turns.findForChat(workspace.id, conversationId);
      expect(conversation.contentBytes).toBeGreaterThan(30 * MB);
      const room = MAX_CONVERSATION_CONTENT_BYTES - conversation.contentBytes;
      expect(room).toBeGreaterThan(MB);

      expect(() => turns.assertRoomFor(conversation, [{ role: 'user', content: 'And now a short question.' }])).not.toThrow();
      const tooMuch = [{ role: 'user', content: imageParts(room) }];
      const refused = refusal(() => turns.assertRoomFor(conversation, tooMuch));
      expect(refused).toBeInstanceOf(ApiError);
      expect(refused.toBody()).toEqual({
        error: {
          type: 'bad_request',
          code: 'conversation_too_large',
          param: 'conversation_id',
          message: expect.stringMatching(/at most 32 MB\. Start a new conversation/),
        },
      });
      expect(refused.status).toBe(400);

      // A settlement never fails on size: a turn let through (say, by a concurrent request) is stored, and the next is refused.
      await expect(appendTurn(conversationId, [{ role: 'user', content: imageParts(room), tokens: 765 }])).resolves.toMatchObject({
        messageCount: 7,
      });
      const full = await turns.findForChat(workspace.id, conversationId);
      expect(full.contentBytes).toBeGreaterThan(MAX_CONVERSATION_CONTENT_BYTES);
      expect(refusal(() => turns.assertRoomFor(full, [{ role: 'user', content: 'hi' }])).code).toBe('conversation_too_large');
    });

    it(`refuses a turn that would take a conversation past ${MAX_CONVERSATION_MESSAGES} messages, counting the reply`, async () => {
      const conversationId = await newConversation();
      const stored = MAX_CONVERSATION_MESSAGES - 2;
      await appendTurn(
        conversationId,
        Array.from({ length: stored }, (_, i) => ({ role: i % 2 ? ('assistant' as const) : ('user' as const), content: `${i}`, tokens: 4 })),
      );
      const conversation = await turns.findForChat(workspace.id, conversationId);
      const question = { role: 'user', content: 'one more?' };
      expect(() => turns.assertRoomFor(conversation, [question])).not.toThrow();
      const refused = refusal(() => turns.assertRoomFor(conversation, [question, question]));
      expect([refused.status, refused.code, refused.param]).toEqual([400, 'conversation_too_large', 'conversation_id']);
      expect(refused.message).toMatch(/holds 9998 messages, and a conversation holds at most 10000\. Start a new conversation/);
    });
  });

  describe('GET /v1/conversations/{id}', () => {
    const get = async (id: string, query: Record<string, string>) => {
      const response = await fetch(`${t.baseUrl}/v1/conversations/${id}?${new URLSearchParams(query).toString()}`, {
        headers: { Authorization: `Bearer ${workspace.apiKey}` },
      });
      const text = await response.text();
      expect(response.status).toBe(200);
      return { bytes: Buffer.byteLength(text), body: JSON.parse(text) as WireConversation };
    };

    it(`answers at most ${MESSAGES_PAGE_BYTES / MB} MB of messages at a time, a larger message alone, and pages through the rest`, async () => {
      const conversationId = await newConversation();
      const sizes = [3 * MB, 3 * MB, 3 * MB, 9 * MB, 1024, 1024];
      const contents = sizes.map((size, i) => `m${i + 1}:${'x'.repeat(size - 3)}`);
      await appendTurn(conversationId, contents.slice(0, 3).map((content) => ({ role: 'user', content, tokens: 1 })));
      await appendTurn(conversationId, contents.slice(3).map((content) => ({ role: 'assistant', content, tokens: 1 })));

      const pages: Array<{ bytes: number; markers: string[] }> = [];
      const seen: string[] = [];
      let query: Record<string, string> = { messages_limit: '1000' };
      for (;;) {
        const { bytes, body } = await get(conversationId, query);
        pages.push({ bytes, markers: body.messages.data.map((message) => message.content.slice(0, message.content.indexOf(':'))) });
        seen.push(...body.messages.data.map((message) => message.content));
        if (!body.messages.has_more) break;
        expect(body.messages.next_cursor).toBe(body.messages.data[body.messages.data.length - 1].id);
        query = { messages_limit: '1000', messages_after: body.messages.next_cursor! };
      }
      expect(pages.map((page) => page.markers)).toEqual([['m1', 'm2'], ['m3'], ['m4'], ['m5', 'm6']]);
      expect(seen).toEqual(contents);
      for (const page of pages) {
        if (page.markers[0] !== 'm4') expect(page.bytes).toBeLessThan(MESSAGES_PAGE_BYTES + 64 * 1024);
      }
      // messages_limit still applies within the budget.
      const first = await get(conversationId, { messages_limit: '1' });
      expect(first.body.messages.data.map((message) => message.content)).toEqual([contents[0]]);
      expect(first.body.messages.has_more).toBe(true);
    });
  });

  describe('search snippets in long messages', () => {
    let searcher: TestWorkspace;
    const search = async (q: string) =>
      ((await searcher.client.get('/conversations/search', { query: { q } })) as { data: Array<{ snippet: string }> }).data;
    const say = async (text: string) => {
      const conversationId = await newConversation(searcher);
      await appendTurn(conversationId, [{ role: 'user', content: text, tokens: 1 }], searcher);
    };
    /** The words of a snippet, without the highlight markers and the fragment delimiter. */
    const wordsOf = (snippet: string) =>
      snippet
        .replace(/<\/?mark>/g, '')
        .split(/\s+/)
        .filter((word) => word !== '...' && word !== '');

    beforeAll(async () => {
      searcher = await t.createWorkspace();
      // Where the message first matches, and then a denser match far later: only the first is near the snippet's window.
      await say(`${filler(1, 20_000)} zebra refund ${filler(2, 75_000)} refund refund yak refund refund ${filler(3, 4_000)}`);
      await say(`${filler(4, 90_000)} kumquat ${filler(5, 9_000)}`);
      await say(`${filler(6, 60_000)} SECURITY DEPOSITS ${filler(7, 39_000)}`);
      await say(`${filler(8, 70_000)} migrating ${filler(9, 29_000)}`);
    });

    it('highlights a match deep inside a 100,000-character message, in a snippet of whole words', async () => {
      const [hit] = await search('kumquat');
      expect(hit.snippet).toContain('<mark>kumquat</mark>');
      expect(hit.snippet.length).toBeLessThan(600);
      for (const word of wordsOf(hit.snippet)) expect([...FILLER_WORDS, 'kumquat']).toContain(word);
    });

    it('takes the snippet from around where the message first matches', async () => {
      const [hit] = await search('refund');
      expect(hit.snippet).toContain('zebra <mark>refund</mark>');
      expect(hit.snippet).not.toContain('yak');
      for (const word of wordsOf(hit.snippet)) expect([...FILLER_WORDS, 'zebra', 'refund']).toContain(word);
    });

    it('finds the window of words written in capitals or in another form of the word', async () => {
      expect((await search('deposit')).map((hit) => hit.snippet)).toEqual([expect.stringContaining('<mark>DEPOSITS</mark>')]);
      expect((await search('migration')).map((hit) => hit.snippet)).toEqual([expect.stringContaining('<mark>migrating</mark>')]);
    });
  });
});
