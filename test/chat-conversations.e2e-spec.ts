import OpenAI from 'openai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { MAX_CONVERSATION_CONTENT_BYTES, MAX_CONVERSATION_MESSAGES } from '../src/conversations/conversation-limits';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface Conversation {
  id: string;
  assistant_id: string | null;
  message_count: number;
  total_input_tokens: number;
  total_output_tokens: number;
  total_cost_millicents: number;
  messages: { data: Array<{ role: string; content: string; tokens: number }> };
}
type Completion = OpenAI.Chat.ChatCompletion & { x_service: { cost_millicents: number } };

/** A catalog with a small-context model, to see old history dropped. */
function catalogWithSmallModel(): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'catalog-')), 'models.json');
  writeFileSync(
    file,
    JSON.stringify({
      models: [
        { id: 'gpt-4o-mini', provider: 'openai', context_length: 128_000, max_output_tokens: 16_384, input_price: 15_000, output_price: 60_000 },
        { id: 'tiny', provider: 'openai', context_length: 1_000, max_output_tokens: 200, input_price: 15_000, output_price: 60_000 },
      ],
    }),
  );
  return file;
}

describe('chat completions with conversation_id', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        modelCatalogFile: catalogWithSmallModel(),
      },
    });
    workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const lastUpstream = () => upstream.requests[upstream.requests.length - 1];
  const newConversation = async (fields: Record<string, unknown> = {}) =>
    (await workspace.client.post('/conversations', { body: { title: 'Test chat', ...fields } })) as Conversation;
  const getConversation = async (id: string) => (await workspace.client.get(`/conversations/${id}`)) as Conversation;
  const chat = (body: Record<string, unknown>) =>
    workspace.client.chat.completions.create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming) as unknown as Promise<Completion>;

  it('sends the stored history before the new messages, stores each turn, and adds up the counters', async () => {
    const conversation = await newConversation();
    upstream.script(
      { kind: 'text', text: 'Hi Ada!', usage: { prompt_tokens: 10, completion_tokens: 3 } },
      { kind: 'text', text: 'Your name is Ada.', usage: { prompt_tokens: 30, completion_tokens: 5 } },
    );
    const first = await chat({ model: 'gpt-4o-mini', conversation_id: conversation.id, messages: [{ role: 'user', content: 'I am Ada.' }] });
    const second = await chat({ model: 'gpt-4o-mini', conversation_id: conversation.id, messages: [{ role: 'user', content: 'What is my name?' }] });
    expect(second.choices[0].message.content).toBe('Your name is Ada.');
    expect(lastUpstream().body.messages).toEqual([
      { role: 'user', content: 'I am Ada.' },
      { role: 'assistant', content: 'Hi Ada!' },
      { role: 'user', content: 'What is my name?' },
    ]);

    const stored = await getConversation(conversation.id);
    expect(stored.messages.data.map((m) => [m.role, m.content])).toEqual([
      ['user', 'I am Ada.'],
      ['assistant', 'Hi Ada!'],
      ['user', 'What is my name?'],
      ['assistant', 'Your name is Ada.'],
    ]);
    expect(stored.messages.data.every((m) => m.tokens > 0)).toBe(true);
    expect(stored).toMatchObject({ message_count: 4, total_input_tokens: 40, total_output_tokens: 8 });
    expect(stored.total_cost_millicents).toBeCloseTo(first.x_service.cost_millicents + second.x_service.cost_millicents, 6);
  });

  it('stores a streamed turn too', async () => {
    const conversation = await newConversation();
    upstream.script({ kind: 'text', text: 'streamed reply', usage: { prompt_tokens: 5, completion_tokens: 2 } });
    const stream = await workspace.client.chat.completions.create({
      model: 'gpt-4o-mini',
      conversation_id: conversation.id,
      stream: true,
      messages: [{ role: 'user', content: 'stream please' }],
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    for await (const _chunk of stream) void _chunk;
    const stored = await getConversation(conversation.id);
    expect(stored.messages.data.map((m) => m.content)).toEqual(['stream please', 'streamed reply']);
    expect(stored.message_count).toBe(2);
  });

  it('drops the oldest messages first when the history would overflow the context', async () => {
    const conversation = await newConversation();
    const long = (n: number) => `message ${n}: ${'lorem ipsum dolor sit amet '.repeat(40)}`;
    for (let n = 1; n <= 6; n++) {
      upstream.script({ kind: 'text', text: `ok ${n}` });
      await chat({ model: 'gpt-4o-mini', conversation_id: conversation.id, messages: [{ role: 'user', content: long(n) }] });
    }
    await chat({ model: 'tiny', conversation_id: conversation.id, messages: [{ role: 'user', content: 'and now?' }] });
    const sent = lastUpstream().body.messages as Array<{ role: string; content: string }>;
    expect(sent[sent.length - 1].content).toBe('and now?');
    expect(sent.length).toBeLessThan(13);
    expect(sent.length).toBeGreaterThan(1);
    expect(sent.some((m) => m.content.startsWith('message 1:'))).toBe(false);
    expect(sent.some((m) => m.content.startsWith('message 6:'))).toBe(true);
  });

  it("goes on with the conversation's assistant when the request names none", async () => {
    const bot = await t.app.get(AssistantsService).create(workspace.id, { name: 'Remembering', model: 'gpt-4o-mini', systemPrompt: 'You remember.' });
    const conversation = await newConversation({ assistant_id: bot.id });
    await chat({ conversation_id: conversation.id, messages: [{ role: 'user', content: 'hello' }] });
    expect(lastUpstream().body.messages).toEqual([
      { role: 'system', content: 'You remember.' },
      { role: 'user', content: 'hello' },
    ]);
  });

  it('stores nothing for a failed request', async () => {
    const conversation = await newConversation();
    upstream.script({ kind: 'http_error', status: 400 });
    await expect(chat({ model: 'gpt-4o-mini', conversation_id: conversation.id, messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(
      OpenAI.BadRequestError,
    );
    expect((await getConversation(conversation.id)).message_count).toBe(0);
  });

  it("answers an unknown, deleted or another workspace's conversation with 404", async () => {
    const other = await t.createWorkspace();
    const theirs = (await other.client.post('/conversations', { body: {} })) as Conversation;
    const mine = await newConversation();
    await workspace.client.delete(`/conversations/${mine.id}`);
    for (const id of [theirs.id, mine.id, 'not-a-uuid']) {
      const error = await chat({ model: 'gpt-4o-mini', conversation_id: id, messages: [{ role: 'user', content: 'x' }] }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.NotFoundError);
      expect((error as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ code: 'conversation_not_found', param: 'conversation_id' });
    }
  });

  it.each([
    ['content', `content_bytes = ${MAX_CONVERSATION_CONTENT_BYTES} - 10`],
    ['messages', `message_count = ${MAX_CONVERSATION_MESSAGES} - 1`],
  ])('refuses a turn that would take a conversation past its %s limit, before anything is held or sent', async (_limit, nearlyFull) => {
    const conversation = await newConversation();
    await t.app.get(DataSource).query(`UPDATE conversations SET ${nearlyFull} WHERE id = $1`, [conversation.id]);
    const sent = upstream.requests.length;
    const before = await workspace.client.get('/wallet');
    const error = await chat({ model: 'gpt-4o-mini', conversation_id: conversation.id, messages: [{ role: 'user', content: 'One more thing' }] }).catch(
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ code: 'conversation_too_large', param: 'conversation_id' });
    expect(upstream.requests.length).toBe(sent);
    expect(await workspace.client.get('/wallet')).toEqual(before);
  });

  it("fits an assistant's first call to what its context leaves, where a direct request keeps the provider's refusal", async () => {
    // About 900 tokens of system prompt on a model of 1,000: with max_tokens 200, the call would not fit.
    const systemPrompt = Array.from({ length: 900 }, () => 'rule').join(' ');
    await t.app.get(AssistantsService).create(workspace.id, { name: 'Wordy', slug: 'wordy', model: 'tiny', systemPrompt, maxTokens: 200 });
    const messages = [{ role: 'user', content: 'Hello there' }];
    const capOf = (body: Record<string, unknown>) => (body.max_completion_tokens ?? body.max_tokens) as number;

    upstream.script({ kind: 'text', text: 'Short.', usage: { prompt_tokens: 910, completion_tokens: 2 } });
    await chat({ model: 'assistant/wordy', messages, max_tokens: 200 });
    const fitted = capOf(lastUpstream().body);
    expect(fitted).toBeLessThan(200);
    expect(fitted).toBeGreaterThan(0);
    expect(fitted + 900).toBeLessThanOrEqual(1_000);

    // The same messages sent by the client itself: sent as asked, for the provider to refuse as OpenAI does.
    upstream.script({ kind: 'text', text: 'Short.', usage: { prompt_tokens: 910, completion_tokens: 2 } });
    await chat({ model: 'tiny', messages: [{ role: 'system', content: systemPrompt }, ...messages], max_tokens: 200 });
    expect(capOf(lastUpstream().body)).toBe(200);
  });

  it('refuses a request too long for the context window before anything is held or sent, whatever its history', async () => {
    const conversation = await newConversation();
    const sent = upstream.requests.length;
    const before = await workspace.client.get('/wallet');
    for (const [words, says] of [
      [5_000, 'longer than the context window of tiny'],
      [980, 'leave no room for an answer in the context window of tiny'],
    ] as const) {
      const error = await chat({
        model: 'tiny',
        conversation_id: conversation.id,
        messages: [{ role: 'user', content: Array.from({ length: words }, () => 'word').join(' ') }],
      }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ code: 'context_length_exceeded', param: 'messages' });
      expect((error as Error).message).toContain(says);
    }
    expect(upstream.requests.length).toBe(sent);
    expect(await workspace.client.get('/wallet')).toEqual(before);
  });
});
