import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { ConversationStore } from '../src/conversations/conversation-store';
import { ConversationTurns } from '../src/conversations/conversation-turns';
import type { TurnMessage } from '../src/conversations/stored-messages';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { startTestApp, TestApp } from './support/test-app';

/**
 * The conversations pages against the database: the list (newest first, a page at a time),
 * search with highlighted snippets, statistics, the transcript with each turn's cost and
 * tools, rename and delete, and who may do what.
 */
describe('dashboard: conversations', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let conversations: ConversationStore;
  let turns: ConversationTurns;
  let db: DataSource;
  let listPath: string;

  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get(DataSource);
    conversations = t.app.get(ConversationStore);
    turns = t.app.get(ConversationTurns);
    owner = await signUp(t.baseUrl, { email: 'cora@example.com', name: 'Cora Owner' });
    listPath = `/w/${owner.workspaceId}/conversations`;
  });
  afterAll(async () => {
    await t?.close();
  });

  /** A stored conversation with one turn, as a chat request's settlement stores it. */
  async function conversationWith(
    workspaceId: string,
    fields: { title?: string; assistantId?: string; user: string; reply: string; costMillicents?: number | string; toolsUsed?: string[] },
  ) {
    const conversation = await conversations.create(workspaceId, { title: fields.title, assistantId: fields.assistantId });
    const messages: TurnMessage[] = [
      { role: 'user', content: fields.user, tokens: 5 },
      { role: 'assistant', content: fields.reply, tokens: 7 },
    ];
    await turns.appendTurn(db.manager, {
      workspaceId,
      conversationId: conversation.id,
      messages,
      inputTokens: 100,
      outputTokens: 20,
      costMillicents: fields.costMillicents ?? 10,
      toolsUsed: fields.toolsUsed,
    });
    return conversation;
  }

  it('says what to do when there are none', async () => {
    const page = await owner.client.get(listPath);
    expect(page.status).toBe(200);
    expect(page.html).toContain('id="no-conversations"');
    expect(textOf(page.html)).toContain('No conversations yet');
    expect(page.html).toContain(`href="/w/${owner.workspaceId}/playground"`);
  });

  it('lists newest activity first, 20 a page, with a link to the older ones', async () => {
    const person = await signUp(t.baseUrl, { email: 'lister@example.com', name: 'Lister' });
    const made: string[] = [];
    for (let i = 0; i < 23; i++) made.push((await conversationWith(person.workspaceId, { title: `Chat ${i}`, user: 'hi', reply: 'hello' })).id);
    const newestFirst = [...made].reverse();

    const first = await person.client.get(`/w/${person.workspaceId}/conversations`);
    const idsIn = (html: string) => [...html.matchAll(/<td><a href="\/w\/[0-9a-f-]+\/conversations\/([0-9a-f-]{36})">/g)].map((m) => m[1]);
    expect(idsIn(first.html)).toEqual(newestFirst.slice(0, 20));
    const next = first.html.match(/href="([^"]+)" id="next-page"/)?.[1];
    expect(next).toBe(`/w/${person.workspaceId}/conversations?after=${newestFirst[19]}`);
    const second = await person.client.get(next!);
    expect(idsIn(second.html)).toEqual(newestFirst.slice(20));
    expect(second.html).not.toContain('id="next-page"');
    expect(textOf(second.html)).toContain('Newest');
    // A cursor that is not one of this workspace's conversations is a readable 400, not a 500.
    const bad = await person.client.get(`/w/${person.workspaceId}/conversations?after=${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}`);
    expect(bad.status).toBe(400);
    expect(textOf(bad.html)).toContain('starting_after does not name a conversation of this workspace.');
  });

  it('searches titles and messages, highlighting the matches and escaping the rest', async () => {
    await conversationWith(owner.workspaceId, {
      title: 'Shipping question',
      user: 'Where do orders ship from?',
      reply: 'Orders ship from our warehouse in Rotterdam when weight < 30 kg & size > 1 m.',
    });
    await conversationWith(owner.workspaceId, { title: 'Unrelated', user: 'What is the weather?', reply: 'Sunny.' });

    const page = await owner.client.get(`${listPath}?q=${encodeURIComponent('rotterdam warehouse')}`);
    expect(page.status).toBe(200);
    const results = page.html.match(/<ol id="search-results"[\s\S]*?<\/ol>/)?.[0] ?? '';
    expect(textOf(results)).toContain('Shipping question');
    expect(textOf(results)).not.toContain('Unrelated');
    expect(results).toContain('<mark>warehouse</mark>');
    expect(results).toContain('<mark>Rotterdam</mark>');
    // PostgreSQL leaves the text as it was: escaped here, only the highlights are markup.
    expect(results).toContain('when weight &lt; 30 kg &amp; size');
    expect(results).toContain('matched in an answer of');

    const none = await owner.client.get(`${listPath}?q=zanzibar`);
    expect(none.html).toContain('id="no-results"');
    expect(textOf(none.html)).toContain('Nothing matches "zanzibar".');
  });

  it('shows a transcript with each turn’s cost and tools, and links to the playground to continue', async () => {
    const bot = await t.app.get(AssistantsService).create(owner.workspaceId, { name: 'Docs bot', model: 'gpt-4o-mini', tools: ['file_search'] });
    const conversation = await conversationWith(owner.workspaceId, {
      title: 'Refunds',
      assistantId: bot.id,
      user: 'Can I return it?',
      reply: 'Yes, within **30 days**.',
      costMillicents: '1234.500000',
      toolsUsed: ['file_search'],
    });
    const page = await owner.client.get(`${listPath}/${conversation.id}`);
    expect(page.status).toBe(200);
    expect(page.html).toContain('<h1>Refunds</h1>');
    const text = textOf(page.html);
    expect(text).toContain('Assistant: Docs bot');
    expect(text).toContain('Cost $0.01235 (1234.5 millicents) · tools used: file_search');
    expect(page.html).toContain('<div class="md" data-markdown>Yes, within **30 days**.</div>');
    expect(page.html).toContain(`href="/w/${owner.workspaceId}/playground?conversation=${conversation.id}"`);

    // Stats count it under its assistant.
    const list = await owner.client.get(listPath);
    const byAssistant = textOf(list.html.match(/<table id="by-assistant">[\s\S]*?<\/table>/)?.[0] ?? '');
    expect(byAssistant).toContain('Docs bot 1 2 2');
    expect(byAssistant).toContain('No assistant (a model directly) 2 4 2');
    expect(list.html).toMatch(/id="stat-conversations">3</);
    expect(list.html).toMatch(/id="stat-messages">6</);
    expect(list.html).toMatch(/id="stat-average">2</);
  });

  it('renames with the CSRF token, refuses a title too long, and an empty title removes it', async () => {
    const conversation = await conversationWith(owner.workspaceId, { title: 'Old name', user: 'a', reply: 'b' });
    const path = `${listPath}/${conversation.id}`;
    await owner.client.get(path);

    expect((await owner.client.post(`${path}/rename`, { title: 'Hijacked' }, { csrf: false })).status).toBe(403);
    const tooLong = await owner.client.post(`${path}/rename`, { title: 'x'.repeat(513) });
    expect(tooLong.status).toBe(400);
    expect(textOf(tooLong.html)).toContain('A title has at most 512 characters.');

    const renamed = await owner.client.post(`${path}/rename`, { title: 'New name' });
    expect(renamed.status).toBe(303);
    const after = await owner.client.follow(renamed);
    expect(after.html).toContain('<h1>New name</h1>');
    expect(textOf(after.html)).toContain('Renamed to "New name".');
    const [row] = await db.query('SELECT title FROM conversations WHERE id = $1', [conversation.id]);
    expect(row.title).toBe('New name');

    await owner.client.post(`${path}/rename`, { title: '  ' });
    const [cleared] = await db.query('SELECT title FROM conversations WHERE id = $1', [conversation.id]);
    expect(cleared.title).toBeNull();
  });

  it('lets admins delete (members may not), and is a 404 for anyone outside the workspace', async () => {
    const conversation = await conversationWith(owner.workspaceId, { title: 'To delete', user: 'a', reply: 'b' });
    const path = `${listPath}/${conversation.id}`;

    const [user] = await db.query('SELECT id FROM users WHERE email = $1', ['cora@example.com']);
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'mel@example.com', 'member', user.id);
    const member = await signUp(t.baseUrl, { email: 'mel@example.com', name: 'Mel Member', invitation: invitation.token });
    const seen = await member.client.get(path);
    expect(seen.status).toBe(200);
    expect(seen.html).not.toContain('id="delete-form"');
    expect((await member.client.post(`${path}/delete`)).status).toBe(403);

    const stranger = await signUp(t.baseUrl, { email: 'sam@example.com', name: 'Sam Stranger' });
    expect((await stranger.client.get(listPath)).status).toBe(404);
    expect((await stranger.client.get(path)).status).toBe(404);
    expect((await stranger.client.post(`${path}/rename`, { title: 'mine now' })).status).toBe(404);
    expect((await owner.client.get(`${listPath}/not-a-uuid`)).status).toBe(404);

    await owner.client.get(path);
    expect(owner.client.lastHtml).toContain('data-confirm="Delete this conversation and its 2 messages? This cannot be undone."');
    const deleted = await owner.client.post(`${path}/delete`);
    expect(deleted.status).toBe(303);
    expect(deleted.location).toBe(listPath);
    const list = await owner.client.follow(deleted);
    expect(textOf(list.html)).toContain('Deleted "To delete" and its 2 messages.');
    expect(await db.query('SELECT id FROM conversations WHERE id = $1', [conversation.id])).toEqual([]);
    expect(await db.query('SELECT id FROM conversation_messages WHERE conversation_id = $1', [conversation.id])).toEqual([]);
    expect((await owner.client.get(path)).status).toBe(404);
  });

  it('refuses a search cursor holding a date that does not exist with 400 naming it', async () => {
    for (const date of ['2026-02-30', '0000-01-01']) {
      const before = Buffer.from(`${date}T12:00:00.000000Z~9b2f7f4e-3c1d-4e55-8a7b-6f0d2c9e1a33`).toString('base64url');
      const page = await owner.client.get(`${listPath}?q=weather&before=${before}`);
      expect({ date, status: page.status }).toEqual({ date, status: 400 });
      expect(textOf(page.html)).toContain('before must be the next_before of an earlier search.');
    }
  });
});
