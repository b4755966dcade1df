import OpenAI, { APIError } from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { NerfingRulesService } from '../src/limits/nerfing/nerfing-rules.service';
import { NerfingService } from '../src/limits/nerfing/nerfing.service';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, resultsScenario, startFakeSearch } from './fakes/fake-search';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/**
 * `POST /v1/responses` with the official openai SDK, in front of a fake OpenAI: the request
 * translated onto the chat core (what reaches the upstream), the Responses object and event
 * stream, stored responses (`previous_response_id`, GET, DELETE, input items), an
 * assistant's server tools in the loop, and the money path (exact charge equal to chat
 * completions', idempotency, 402).
 */

type XService = { cost_millicents: number; iterations: number; tools_used: string[] };
type WithService<T> = T & { x_service: XService; conversation: { id: string } | null };

const weatherTool = {
  type: 'function' as const,
  name: 'get_weather',
  description: 'Current weather in a city',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  strict: true,
};

/** Polls until `check` holds (writes that follow an answer or a disconnect land a moment later). */
async function waitFor(check: () => Promise<boolean>, timeoutMs = 3_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe('Responses API (openai SDK, fake OpenAI upstream)', () => {
  let upstream: FakeOpenAi;
  let search: FakeSearch;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    search = await startFakeSearch({ apiKey: 'tvly-test' });
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        webSearch: { provider: 'tavily', apiKey: 'tvly-test', baseUrl: search.url },
      },
    });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t?.close();
    await search?.close();
    await upstream?.close();
  });

  const lastUpstream = () => upstream.requests[upstream.requests.length - 1].body;
  const usageRecords = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return db.query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [workspace.id]);
  };
  const wallet = (workspace: TestWorkspace) => t.app.get(WalletService).balance(workspace.id);
  const create = async (workspace: TestWorkspace, body: Record<string, unknown>) =>
    (await workspace.client.responses.create(body as unknown as OpenAI.Responses.ResponseCreateParamsNonStreaming)) as WithService<OpenAI.Responses.Response>;
  /** The status and error body of a request the service refuses. */
  const refusal = async (workspace: TestWorkspace, body: Record<string, unknown>) => {
    const error = (await create(workspace, body).then(
      () => {
        throw new Error('expected the request to be refused');
      },
      (e: unknown) => e,
    )) as APIError;
    expect(error).toBeInstanceOf(APIError);
    return { status: error.status, error: (error.error ?? {}) as { code?: string; param?: string; message?: string; type?: string } };
  };

  describe('plain', () => {
    it('answers a string input as a Responses object with output_text, usage and x_service; instructions go upstream as the system message', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Paris.', usage: { prompt_tokens: 1_000, completion_tokens: 3, cached_tokens: 200 } });
      const response = await create(workspace, {
        model: 'gpt-4o-mini',
        instructions: 'Be brief.',
        input: 'Capital of France?',
        max_output_tokens: 50,
        temperature: 0.2,
        metadata: { ticket: 'T-1' },
      });

      expect(response.id).toMatch(/^resp_/);
      expect(response.object).toBe('response');
      expect(response.status).toBe('completed');
      expect(response.model).toBe('gpt-4o-mini');
      // The SDK computes output_text from the output items.
      expect(response.output_text).toBe('Paris.');
      expect(response.output).toEqual([
        expect.objectContaining({ type: 'message', role: 'assistant', status: 'completed', content: [expect.objectContaining({ type: 'output_text', text: 'Paris.', annotations: [] })] }),
      ]);
      expect(response.usage).toEqual({
        input_tokens: 1_000,
        input_tokens_details: { cached_tokens: 200 },
        output_tokens: 3,
        output_tokens_details: { reasoning_tokens: 0 },
        total_tokens: 1_003,
      });
      expect(response).toMatchObject({ instructions: 'Be brief.', max_output_tokens: 50, temperature: 0.2, metadata: { ticket: 'T-1' }, store: true });

      const sent = lastUpstream();
      expect(sent.messages).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Capital of France?' }] },
      ]);
      expect(sent.max_completion_tokens).toBe(50);
      expect(sent.temperature).toBe(0.2);

      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({ status: 'success', model: 'gpt-4o-mini', input_tokens: 1_000, output_tokens: 3 });
      expect(Number(record.charged_millicents)).toBeGreaterThan(0);
      expect(response.x_service.cost_millicents).toBe(Number(record.total_cost_millicents));
      expect((await wallet(workspace)).balanceMillicents).toBe(1_000_000 - Number(record.charged_millicents));
    });

    it('keeps the response: GET answers it as created, input_items lists the input with ids, DELETE removes it and its conversation', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Hello there.' });
      const response = await create(workspace, { model: 'gpt-4o-mini', input: [{ role: 'user', content: 'Hi' }, { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Anyone?' }] }] });
      expect(response.conversation?.id).toEqual(expect.any(String));

      const fetched = (await workspace.client.responses.retrieve(response.id)) as WithService<OpenAI.Responses.Response>;
      expect(fetched.id).toBe(response.id);
      expect(fetched.output).toEqual(response.output);
      expect(fetched.x_service).toEqual(response.x_service);
      expect(fetched.output_text).toBe('Hello there.');

      const items = await workspace.client.responses.inputItems.list(response.id, { order: 'asc' });
      expect(items.data.map((item) => (item as { role?: string }).role)).toEqual(['user', 'user']);
      expect(items.data.every((item) => typeof item.id === 'string' && item.id.startsWith('msg_'))).toBe(true);
      // Newest first by default, paged with limit and after.
      const page = (await workspace.client.get(`/responses/${response.id}/input_items`, { query: { limit: 1 } })) as { data: Array<{ id: string }>; has_more: boolean; last_id: string };
      expect(page).toMatchObject({ data: [{ id: items.data[1].id }], has_more: true, last_id: items.data[1].id });
      const rest = (await workspace.client.get(`/responses/${response.id}/input_items`, { query: { limit: 1, after: page.last_id } })) as typeof page;
      expect(rest).toMatchObject({ data: [{ id: items.data[0].id }], has_more: false });
      await expect(workspace.client.get(`/responses/${response.id}/input_items`, { query: { limit: 0 } })).rejects.toMatchObject({ status: 400 });

      // The conversation holds the turn, as any chat completion with conversation_id.
      const conversation = (await workspace.client.get(`/conversations/${response.conversation!.id}`)) as { messages: { data: Array<{ role: string; content: unknown }> } };
      expect(conversation.messages.data.map((message) => message.role)).toEqual(['user', 'user', 'assistant']);

      // Another workspace does not see it.
      const other = await t.createWorkspace();
      await expect(other.client.responses.retrieve(response.id)).rejects.toMatchObject({ status: 404, error: expect.objectContaining({ code: 'response_not_found' }) });
      await expect(other.client.responses.delete(response.id)).rejects.toMatchObject({ status: 404 });

      await workspace.client.responses.delete(response.id);
      await expect(workspace.client.responses.retrieve(response.id)).rejects.toMatchObject({ status: 404 });
      await expect(workspace.client.get(`/conversations/${response.conversation!.id}`)).rejects.toMatchObject({ status: 404 });
      await expect(workspace.client.responses.retrieve('resp_nope')).rejects.toMatchObject({ status: 404 });
      await expect(workspace.client.responses.retrieve('not-an-id')).rejects.toMatchObject({ status: 404 });
    });

    it('an answer with text jsonb cannot hold (NUL) is answered and stored with U+FFFD in its place', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'bad\u0000byte' });
      const response = await create(workspace, { model: 'gpt-4o-mini', input: 'Hi' });
      expect(response.output_text).toBe('bad\u0000byte');
      expect((await workspace.client.responses.retrieve(response.id)).output_text).toBe('bad\ufffdbyte');
    });

    it('store: false keeps nothing: no conversation, and GET is a 404', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Ok.' });
      const response = await create(workspace, { model: 'gpt-4o-mini', input: 'Hi', store: false });
      expect((response as unknown as { store: boolean }).store).toBe(false);
      expect(response.conversation).toBeNull();
      await expect(workspace.client.responses.retrieve(response.id)).rejects.toMatchObject({ status: 404 });
      const [{ count }] = await db.query('SELECT count(*)::int AS count FROM conversations WHERE workspace_id = $1', [workspace.id]);
      expect(count).toBe(0);
    });

    it('previous_response_id continues the stored conversation: the history reaches the upstream; a response already continued is refused', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      // No usage from the upstream: the service counts the prompt it sent, history included.
      upstream.script({ kind: 'text', text: 'Nice to meet you, Ada.', usage: null }, { kind: 'text', text: 'Your name is Ada.', usage: null });
      const first = await create(workspace, { model: 'gpt-4o-mini', input: 'My name is Ada.' });
      const second = await create(workspace, { model: 'gpt-4o-mini', input: 'What is my name?', previous_response_id: first.id });

      expect(second.previous_response_id).toBe(first.id);
      expect(second.conversation?.id).toBe(first.conversation?.id);
      expect(lastUpstream().messages).toEqual([
        { role: 'user', content: [{ type: 'text', text: 'My name is Ada.' }] },
        { role: 'assistant', content: 'Nice to meet you, Ada.' },
        { role: 'user', content: [{ type: 'text', text: 'What is my name?' }] },
      ]);
      // The second turn's input counts its history: more input tokens are billed than for the first.
      const records = await usageRecords(workspace);
      expect(records).toHaveLength(2);
      expect(records[1].input_tokens).toBeGreaterThan(records[0].input_tokens + 5);

      const branched = await refusal(workspace, { model: 'gpt-4o-mini', input: 'And my age?', previous_response_id: first.id });
      expect(branched).toMatchObject({ status: 400, error: { code: 'previous_response_not_latest', param: 'previous_response_id' } });
      const unknown = await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', previous_response_id: 'resp_unknown' });
      expect(unknown).toMatchObject({ status: 404, error: { code: 'response_not_found', param: 'previous_response_id' } });
      const other = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      expect(await refusal(other, { model: 'gpt-4o-mini', input: 'Hi', previous_response_id: second.id })).toMatchObject({ status: 404 });
    });

    it('conversation names one of our conversations: its history goes first, the turn is added to it', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const conversation = (await workspace.client.post('/conversations', { body: { title: 'Trip' } })) as { id: string };
      upstream.script({ kind: 'text', text: 'Rome it is.' }, { kind: 'text', text: 'You chose Rome.' });
      const first = await create(workspace, { model: 'gpt-4o-mini', input: 'Let us go to Rome.', conversation: conversation.id });
      expect(first.conversation).toEqual({ id: conversation.id });
      const second = await create(workspace, { model: 'gpt-4o-mini', input: 'Where did I choose?', conversation: { id: conversation.id } });
      expect(lastUpstream().messages).toEqual([
        { role: 'user', content: [{ type: 'text', text: 'Let us go to Rome.' }] },
        { role: 'assistant', content: 'Rome it is.' },
        { role: 'user', content: [{ type: 'text', text: 'Where did I choose?' }] },
      ]);
      const unknown = await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', conversation: '00000000-0000-0000-0000-000000000000' });
      expect(unknown).toMatchObject({ status: 404, error: { code: 'conversation_not_found', param: 'conversation' } });
      const both = await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', conversation: conversation.id, previous_response_id: first.id });
      expect(both).toMatchObject({ status: 400, error: { param: 'conversation' } });

      // The client's conversation is not the Responses API's to delete: deleting its responses leaves its turns.
      await workspace.client.responses.delete(first.id);
      await workspace.client.responses.delete(second.id);
      const kept = (await workspace.client.get(`/conversations/${conversation.id}`)) as { messages: { data: Array<{ role: string }> } };
      expect(kept.messages.data.map((message) => message.role)).toEqual(['user', 'assistant', 'user', 'assistant']);
    });

    it('structured output: text.format json_schema arrives upstream as response_format', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: '{"city":"Paris"}' });
      const schema = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
      const response = await workspace.client.responses.parse({
        model: 'gpt-4o-mini',
        input: 'Which city?',
        text: { format: { type: 'json_schema', name: 'city', schema, strict: true } },
      });
      expect(lastUpstream().response_format).toEqual({ type: 'json_schema', json_schema: { name: 'city', schema, strict: true } });
      expect(response.output_parsed).toEqual({ city: 'Paris' });
      expect(response.text?.format).toMatchObject({ type: 'json_schema', name: 'city' });
    });

    it('is charged exactly what the same request through chat completions is (the service counts the tokens itself)', async () => {
      const viaChat = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const viaResponses = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      // No usage from the upstream: the service counts prompt and answer, so the translated prompt must be the same.
      const answer = { kind: 'text' as const, text: 'The capital of France is Paris, a city on the Seine.', usage: null };
      upstream.script(answer, answer);
      const completion = (await viaChat.client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [
          { role: 'system', content: 'Be brief.' },
          { role: 'user', content: 'What is the capital of France?' },
        ],
        max_completion_tokens: 100,
        tools: [{ type: 'function', function: { name: weatherTool.name, description: weatherTool.description, parameters: weatherTool.parameters, strict: true } }],
      })) as OpenAI.Chat.ChatCompletion & { x_service: XService };
      const response = await create(viaResponses, {
        model: 'gpt-4o-mini',
        instructions: 'Be brief.',
        input: 'What is the capital of France?',
        max_output_tokens: 100,
        tools: [weatherTool],
      });
      const [chatRecord] = await usageRecords(viaChat);
      const [responsesRecord] = await usageRecords(viaResponses);
      expect(responsesRecord.input_tokens).toBe(chatRecord.input_tokens);
      expect(responsesRecord.output_tokens).toBe(chatRecord.output_tokens);
      expect(Number(responsesRecord.charged_millicents)).toBe(Number(chatRecord.charged_millicents));
      expect(Number(responsesRecord.charged_millicents)).toBeGreaterThan(0);
      expect(response.x_service.cost_millicents).toBe(completion.x_service.cost_millicents);
      expect(response.usage?.input_tokens).toBe(completion.usage?.prompt_tokens);
      expect((await wallet(viaResponses)).balanceMillicents).toBe((await wallet(viaChat)).balanceMillicents);
    });
  });

  describe('function tools', () => {
    it('round trip: a function_call item with call_id, then its function_call_output after previous_response_id', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}' }] },
        { kind: 'text', text: 'It is sunny in Paris.' },
      );
      const first = await create(workspace, { model: 'gpt-4o-mini', input: 'Weather in Paris?', tools: [weatherTool], tool_choice: 'required' });
      expect(lastUpstream().tools).toEqual([
        { type: 'function', function: { name: 'get_weather', description: weatherTool.description, parameters: weatherTool.parameters, strict: true } },
      ]);
      expect(lastUpstream().tool_choice).toBe('required');
      expect(first.output).toEqual([
        expect.objectContaining({ type: 'function_call', call_id: 'call_w1', name: 'get_weather', arguments: '{"city":"Paris"}', status: 'completed' }),
      ]);
      expect(first.output[0].id).toMatch(/^fc_/);

      const second = await create(workspace, {
        model: 'gpt-4o-mini',
        previous_response_id: first.id,
        input: [{ type: 'function_call_output', call_id: 'call_w1', output: '{"temperature_c":21,"conditions":"sunny"}' }],
        tools: [weatherTool],
        tool_choice: { type: 'function', name: 'get_weather' },
      });
      expect(second.output_text).toBe('It is sunny in Paris.');
      expect(lastUpstream().tool_choice).toEqual({ type: 'function', function: { name: 'get_weather' } });
      expect(lastUpstream().messages).toEqual([
        { role: 'user', content: [{ type: 'text', text: 'Weather in Paris?' }] },
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_w1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
        { role: 'tool', tool_call_id: 'call_w1', content: '{"temperature_c":21,"conditions":"sunny"}' },
      ]);
    });

    it('without storing: the whole exchange as input items (function_call, function_call_output, item_reference to a stored item)', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Noted.' }, { kind: 'text', text: 'Sunny.' });
      const stored = await create(workspace, { model: 'gpt-4o-mini', input: 'Remember Paris.' });
      await create(workspace, {
        model: 'gpt-4o-mini',
        store: false,
        input: [
          { role: 'user', content: 'Remember Paris.' },
          { type: 'item_reference', id: stored.output[0].id },
          { role: 'user', content: 'Weather there?' },
          { type: 'function_call', call_id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
          { type: 'function_call', call_id: 'call_b', name: 'get_weather', arguments: '{"city":"Lyon"}' },
          { type: 'function_call_output', call_id: 'call_a', output: 'sunny' },
          { type: 'function_call_output', call_id: 'call_b', output: [{ type: 'input_text', text: 'rain' }] },
        ],
        tools: [weatherTool],
      });
      expect(lastUpstream().messages).toEqual([
        { role: 'user', content: 'Remember Paris.' },
        { role: 'assistant', content: 'Noted.' },
        { role: 'user', content: 'Weather there?' },
        {
          role: 'assistant',
          content: null,
          tool_calls: [
            { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
            { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Lyon"}' } },
          ],
        },
        { role: 'tool', tool_call_id: 'call_a', content: 'sunny' },
        { role: 'tool', tool_call_id: 'call_b', content: 'rain' },
      ]);
      const missing = await refusal(workspace, { model: 'gpt-4o-mini', input: [{ type: 'item_reference', id: 'msg_missing' }] });
      expect(missing).toMatchObject({ status: 404, error: { code: 'item_not_found', param: 'input.0.id' } });
    });
  });

  describe('streamed', () => {
    it('stream: true answers the Responses event stream, in order, with sequence numbers, ending in response.completed with usage and x_service', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'One two three.', usage: { prompt_tokens: 40, completion_tokens: 4 } });
      const stream = await workspace.client.responses.create({ model: 'gpt-4o-mini', input: 'Count', stream: true });
      const events: OpenAI.Responses.ResponseStreamEvent[] = [];
      for await (const event of stream) events.push(event);

      const types = events.map((event) => event.type);
      expect(types.slice(0, 4)).toEqual(['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
      expect(types.slice(-4)).toEqual(['response.output_text.done', 'response.content_part.done', 'response.output_item.done', 'response.completed']);
      expect(events.map((event) => event.sequence_number)).toEqual(events.map((_, index) => index));
      const deltas = events.filter((event): event is OpenAI.Responses.ResponseTextDeltaEvent => event.type === 'response.output_text.delta');
      expect(deltas.map((event) => event.delta).join('')).toBe('One two three.');
      const done = events.find((event) => event.type === 'response.output_text.done') as OpenAI.Responses.ResponseTextDoneEvent;
      expect(done.text).toBe('One two three.');
      const completed = events[events.length - 1] as OpenAI.Responses.ResponseCompletedEvent;
      const final = completed.response as WithService<OpenAI.Responses.Response>;
      expect(final.status).toBe('completed');
      expect(final.usage).toMatchObject({ input_tokens: 40, output_tokens: 4, total_tokens: 44 });
      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({ status: 'success', stream: true });
      expect(final.x_service.cost_millicents).toBe(Number(record.total_cost_millicents));
      // Stored once the stream ended.
      const fetched = await workspace.client.responses.retrieve(final.id);
      expect(fetched.output_text).toBe('One two three.');
      expect(upstream.requests[upstream.requests.length - 1].body.stream_options).toEqual({ include_usage: true });
    });

    it('a client that goes away mid-stream leaves no stored response and no empty conversation', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'one two three four five six seven eight', chunkDelayMs: 100 });
      const stream = await workspace.client.responses.create({ model: 'gpt-4o-mini', input: 'Count slowly', stream: true });
      let deltas = 0;
      for await (const event of stream) {
        if (event.type !== 'response.output_text.delta') continue;
        deltas += 1;
        stream.controller.abort();
        break;
      }
      expect(deltas).toBe(1);
      // The request settles (charged for what was generated), and the conversation made for it goes.
      await waitFor(async () => (await usageRecords(workspace)).length === 1);
      await waitFor(async () => (await db.query('SELECT id FROM conversations WHERE workspace_id = $1', [workspace.id])).length === 0);
      const [{ count }] = await db.query('SELECT count(*)::int AS count FROM responses WHERE workspace_id = $1', [workspace.id]);
      expect(count).toBe(0);
      expect((await wallet(workspace)).reservedMillicents).toBe(0);
    });

    it('client.responses.stream(): text events and finalResponse(), and streamed function calls', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Streaming works fine.' });
      const runner = workspace.client.responses.stream({ model: 'gpt-4o-mini', input: 'Say it' });
      let text = '';
      runner.on('response.output_text.delta', (event) => {
        text += event.delta;
      });
      const final = await runner.finalResponse();
      expect(text).toBe('Streaming works fine.');
      expect(final.output_text).toBe('Streaming works fine.');

      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_s1', name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
      const calls = workspace.client.responses.stream({ model: 'gpt-4o-mini', input: 'Weather in Oslo?', tools: [weatherTool] });
      const argumentDeltas: string[] = [];
      calls.on('response.function_call_arguments.delta', (event) => argumentDeltas.push(event.delta));
      const withCall = await calls.finalResponse();
      expect(argumentDeltas.join('')).toBe('{"city":"Oslo"}');
      expect(withCall.output).toEqual([expect.objectContaining({ type: 'function_call', call_id: 'call_s1', name: 'get_weather', arguments: '{"city":"Oslo"}', status: 'completed' })]);
    });

    it('a failure before the first event is an HTTP error (402); a failure after it is response.failed then an error event', async () => {
      const broke = await t.createWorkspace({ balanceMillicents: 0 });
      await expect(broke.client.responses.create({ model: 'gpt-4o-mini', input: 'Hi', stream: true })).rejects.toMatchObject({ status: 402 });

      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'stream_failure', words: ['Half ', 'an '], failure: 'error_event' });
      const res = await fetch(`${t.baseUrl}/v1/responses`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', input: 'Hi', stream: true }),
      });
      expect(res.status).toBe(200);
      const events = (await res.text())
        .split('\n\n')
        .filter((frame) => frame.startsWith('data: {'))
        .map((frame) => JSON.parse(frame.slice(6)) as { type: string; response?: { status: string; error: unknown }; code?: string });
      const types = events.map((event) => event.type);
      expect(types).toContain('response.output_text.delta');
      expect(types.slice(-2)).toEqual(['response.failed', 'error']);
      expect(events[events.length - 2].response).toMatchObject({ status: 'failed', error: { code: expect.any(String), message: expect.any(String) } });
      expect(events[events.length - 1].code).toEqual(expect.any(String));
      // Nothing stored for a failed response, and no empty conversation left behind.
      const [{ count }] = await db.query('SELECT count(*)::int AS count FROM responses WHERE workspace_id = $1', [workspace.id]);
      expect(count).toBe(0);
      await waitFor(async () => (await db.query('SELECT id FROM conversations WHERE workspace_id = $1', [workspace.id])).length === 0);
    });
  });

  describe('assistants and server tools', () => {
    it('an assistant with web_search runs it in the server-side loop; web_search_preview names it', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const assistants = t.app.get(AssistantsService);
      await assistants.create(workspace.id, { name: 'Searcher', model: 'gpt-4o-mini', systemPrompt: 'You search.', tools: ['web_search'] });
      search.script(resultsScenario([{ title: 'Paris weather', url: 'https://weather.example/paris', snippet: 'Sunny, 21 C' }]));
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_ws', name: 'web_search', arguments: '{"query":"Paris weather"}' }] },
        { kind: 'text', text: 'Sunny, 21 C.' },
      );
      const response = await create(workspace, { model: 'assistant/searcher', input: 'Weather in Paris?', tools: [{ type: 'web_search_preview' }] });
      expect(response.output_text).toBe('Sunny, 21 C.');
      expect(response.x_service).toMatchObject({ iterations: 2, tools_used: ['web_search'] });
      // The tool call ran on the server, shown as a web_search_call item; the model saw the search result.
      expect(response.output.map((item) => item.type)).toEqual(['web_search_call', 'message']);
      expect(response.output[0]).toMatchObject({ type: 'web_search_call', status: 'completed', action: { type: 'search', query: 'Paris weather' } });
      const messages = lastUpstream().messages as Array<{ role: string; content: unknown }>;
      expect(messages[0]).toEqual({ role: 'system', content: 'You search.' });
      expect(JSON.stringify(messages[messages.length - 1])).toContain('Sunny, 21 C');

      // Streamed: the search runs between two model calls, the client sees one message.
      search.script(resultsScenario([{ title: 'Oslo weather', url: 'https://weather.example/oslo', snippet: 'Snow, -3 C' }]));
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_ws2', name: 'web_search', arguments: '{"query":"Oslo weather"}' }] },
        { kind: 'text', text: 'Snow, -3 C.' },
      );
      const streamed = (await workspace.client.responses
        .stream({ model: 'assistant/searcher', input: 'Weather in Oslo?' })
        .finalResponse()) as unknown as WithService<OpenAI.Responses.Response>;
      expect(streamed.output_text).toBe('Snow, -3 C.');
      expect(streamed.output.map((item) => item.type)).toEqual(['web_search_call', 'message']);
      expect(streamed.x_service).toMatchObject({ iterations: 2, tools_used: ['web_search'] });

      // A function tool after a hosted one is named by its place in the request.
      expect(await refusal(workspace, { model: 'assistant/searcher', input: 'Hi', tools: [{ type: 'web_search' }, { type: 'function', name: 'bad name!' }] })).toMatchObject({
        status: 400,
        error: { param: 'tools.1.name' },
      });

      // An assistant without the tool, and direct mode, refuse it.
      await assistants.create(workspace.id, { name: 'Plain', model: 'gpt-4o-mini' });
      expect(await refusal(workspace, { assistant_id: 'plain', input: 'Hi', tools: [{ type: 'web_search' }] })).toMatchObject({
        status: 400,
        error: { code: 'tool_not_enabled', param: 'tools.0' },
      });
      expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', tools: [{ type: 'web_search_preview' }] })).toMatchObject({
        status: 400,
        error: { code: 'tool_requires_assistant', param: 'tools.0' },
      });
    });
  });

  describe('citations and file_search options', () => {
    type FileSearchCall = OpenAI.Responses.ResponseFileSearchToolCall;
    type Annotation = OpenAI.Responses.ResponseOutputText['annotations'][number];
    const returnsDoc = 'Returns are accepted within 30 days of delivery. Refunds reach your card within five days.';
    const shippingDoc = 'Orders ship from Rotterdam within two days. Returns of large items need a pickup.';
    const fileSearch = (query = 'returns') => ({ kind: 'tool_calls' as const, calls: [{ id: 'call_fs', name: 'file_search', arguments: JSON.stringify({ query }) }] });

    async function librarian(name: string) {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000, tier: 'team' });
      const assistant = await t.app.get(AssistantsService).create(workspace.id, { name, model: 'gpt-4o-mini', tools: ['file_search', 'web_search'] });
      const documents = t.app.get(DocumentsService);
      const returns = await documents.add({ workspaceId: workspace.id, assistantId: assistant.id, fileName: 'returns.md', data: Buffer.from(returnsDoc) });
      const shipping = await documents.add({ workspaceId: workspace.id, assistantId: assistant.id, fileName: 'shipping.txt', data: Buffer.from(shippingDoc) });
      return { workspace, model: `assistant/${assistant.slug}`, returns, shipping };
    }

    /** Every annotation names a result of this response (a file of its file_search_call, a page of the search) and lies inside its text. */
    function expectCitations(response: OpenAI.Responses.Response, urls: string[] = []) {
      const files = response.output.filter((item): item is FileSearchCall => item.type === 'file_search_call').flatMap((item) => item.results ?? []);
      const messages = response.output.filter((item): item is OpenAI.Responses.ResponseOutputMessage => item.type === 'message');
      const annotations: Annotation[] = [];
      for (const part of messages.flatMap((message) => message.content)) {
        if (part.type !== 'output_text') continue;
        for (const annotation of part.annotations) {
          annotations.push(annotation);
          if (annotation.type === 'file_citation') {
            expect(files.map((file) => file.file_id)).toContain(annotation.file_id);
            expect(annotation.index).toBeGreaterThanOrEqual(0);
            expect(annotation.index).toBeLessThanOrEqual(part.text.length);
            expect(part.text.slice(annotation.index)).toMatch(/^\[\d\]/);
          } else if (annotation.type === 'url_citation') {
            expect(urls).toContain(annotation.url);
            expect(part.text.slice(annotation.start_index, annotation.end_index)).toMatch(/^\[\d\]$/);
          } else {
            throw new Error(`unexpected annotation ${annotation.type}`);
          }
        }
      }
      return annotations;
    }

    it('plain: file_search_call with its results (include), web_search_call, and output_text annotations pointing at them', async () => {
      const { workspace, model, returns, shipping } = await librarian('Librarian');
      search.script(resultsScenario([{ title: 'Return law', url: 'https://law.example/returns', snippet: '14 days minimum.' }]));
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_ws', name: 'web_search', arguments: '{"query":"return law"}' }] },
        fileSearch(),
        { kind: 'text', text: 'The law says 14 days [1]; we accept 30 [2] and large items need a pickup [3]. Not [7].' },
      );
      const response = await create(workspace, {
        model,
        input: 'How long for returns?',
        tools: [{ type: 'file_search', vector_store_ids: [] }, { type: 'web_search_preview' }],
        include: ['file_search_call.results', 'web_search_call.action.sources'],
      });
      expect(response.output.map((item) => item.type)).toEqual(['web_search_call', 'file_search_call', 'message']);
      expect(response.output[0]).toMatchObject({ status: 'completed', action: { type: 'search', query: 'return law', sources: [{ type: 'url', url: 'https://law.example/returns' }] } });
      const call = response.output[1] as FileSearchCall;
      expect(call).toMatchObject({ status: 'completed', queries: ['returns'] });
      expect(call.results!.map((result) => result.file_id).sort()).toEqual([returns.id, shipping.id].sort());
      for (const result of call.results!) {
        expect(result).toMatchObject({ filename: expect.any(String), text: expect.any(String), score: expect.any(Number) });
        expect(result.attributes).toMatchObject({ filename: result.filename, type: expect.any(String), uploaded_at: expect.any(Number) });
      }
      const annotations = expectCitations(response, ['https://law.example/returns']);
      expect(annotations.map((annotation) => annotation.type)).toEqual(['url_citation', 'file_citation', 'file_citation']);

      // Without include, the call is there without its results; the annotations stay.
      upstream.script(fileSearch(), { kind: 'text', text: 'Thirty days [1].' });
      const plain = await create(workspace, { model, input: 'Returns?', tools: [{ type: 'file_search' }] });
      expect((plain.output[0] as FileSearchCall).results).toBeNull();
      expect((plain.output[1] as OpenAI.Responses.ResponseOutputMessage).content[0]).toMatchObject({ annotations: [{ type: 'file_citation', index: 12 }] });
    });

    it('streamed: response.output_text.annotation.added events, and the final response carries the same annotations', async () => {
      const { workspace, model } = await librarian('Streaming librarian');
      upstream.script(fileSearch(), { kind: 'text', text: 'Thirty days [1], pickups for large items [2].' });
      const stream = workspace.client.responses.stream({
        model,
        input: 'Returns?',
        tools: [{ type: 'file_search', vector_store_ids: [] }],
        include: ['file_search_call.results'],
      });
      const events: Array<{ type: string; annotation?: Annotation; annotation_index?: number; item_id?: string }> = [];
      for await (const event of stream) events.push(event as (typeof events)[number]);
      const response = await stream.finalResponse();
      const annotations = expectCitations(response);
      expect(annotations).toHaveLength(2);
      const added = events.filter((event) => event.type === 'response.output_text.annotation.added');
      expect(added.map((event) => event.annotation)).toEqual(annotations);
      expect(added.map((event) => event.annotation_index)).toEqual([0, 1]);
      const types = events.map((event) => event.type);
      expect(types.indexOf('response.file_search_call.completed')).toBeLessThan(types.indexOf('response.output_text.annotation.added'));
      expect(types.indexOf('response.output_text.annotation.added')).toBeLessThan(types.indexOf('response.output_text.done'));
    });

    it('max_num_results, ranking_options.score_threshold and filters change what file_search finds', async () => {
      const { workspace, model, returns, shipping } = await librarian('Filtered librarian');
      const found = async (options: Record<string, unknown>) => {
        upstream.script(fileSearch(), { kind: 'text', text: 'Done.' });
        const response = await create(workspace, { model, input: 'Returns?', tools: [{ type: 'file_search', ...options }], include: ['file_search_call.results'] });
        return (response.output[0] as FileSearchCall).results!;
      };
      const all = await found({});
      expect(all).toHaveLength(2);
      expect(await found({ max_num_results: 1 })).toHaveLength(1);
      // Scores are shown rounded to 4 decimals: the threshold sits just under the best one.
      const [low, high] = all.map((result) => result.score!).sort((a, b) => a - b);
      const threshold = low < high ? (low + high) / 2 : high - 0.001;
      const above = await found({ ranking_options: { score_threshold: threshold } });
      expect(above.length).toBe(low < high ? 1 : 2);
      expect(above.every((result) => result.score! >= threshold)).toBe(true);
      expect((await found({ filters: { type: 'eq', key: 'type', value: 'md' } })).map((result) => result.file_id)).toEqual([returns.id]);
      expect((await found({ filters: { type: 'in', key: 'filename', value: ['shipping.txt'] } })).map((result) => result.file_id)).toEqual([shipping.id]);
      const later = Math.floor(Date.now() / 1000) + 3_600;
      expect(await found({ filters: { type: 'gt', key: 'uploaded_at', value: later } })).toEqual([]);
      const either = { type: 'or', filters: [{ type: 'eq', key: 'filename', value: 'returns.md' }, { type: 'lt', key: 'uploaded_at', value: later }] };
      expect(await found({ filters: either })).toHaveLength(2);
    });

    it('bad file_search options are 400s naming the field', async () => {
      const { workspace, model } = await librarian('Strict librarian');
      const refused = (options: Record<string, unknown>) => refusal(workspace, { model, input: 'Returns?', tools: [{ type: 'web_search' }, { type: 'file_search', ...options }] });
      expect(await refused({ max_num_results: 0 })).toMatchObject({ status: 400, error: { param: 'tools.1.max_num_results' } });
      expect(await refused({ max_num_results: 51 })).toMatchObject({ status: 400, error: { param: 'tools.1.max_num_results' } });
      expect(await refused({ ranking_options: { score_threshold: 1.5 } })).toMatchObject({ status: 400, error: { param: 'tools.1.ranking_options.score_threshold' } });
      expect(await refused({ filters: { type: 'eq', key: 'colour', value: 'red' } })).toMatchObject({ status: 400, error: { param: 'tools.1.filters.key' } });
      expect(await refused({ filters: { type: 'gt', key: 'filename', value: 'a' } })).toMatchObject({ status: 400, error: { param: 'tools.1.filters.type' } });
      expect(await refused({ filters: { type: 'and', filters: [{ type: 'eq', key: 'uploaded_at', value: 'yesterday' }] } })).toMatchObject({
        status: 400,
        error: { param: 'tools.1.filters.filters.0.value' },
      });
      let deep: Record<string, unknown> = { type: 'eq', key: 'type', value: 'md' };
      for (let i = 0; i < 5; i++) deep = { type: 'and', filters: [deep] };
      expect(await refused({ filters: deep })).toMatchObject({ status: 400, error: { param: 'tools.1.filters.filters.0.filters.0.filters.0.filters.0' } });
      const wide = { type: 'or', filters: Array.from({ length: 33 }, () => ({ type: 'eq', key: 'type', value: 'md' })) };
      expect(await refused({ filters: wide })).toMatchObject({ status: 400, error: { param: 'tools.1.filters.filters.32' } });
    });
  });

  describe('refusals', () => {
    it.each([
      ['code_interpreter', { type: 'code_interpreter', container: { type: 'auto' } }, 'tools.0.type', 'unsupported_tool'],
      ['computer_use_preview', { type: 'computer_use_preview', display_width: 1024, display_height: 768, environment: 'browser' }, 'tools.0.type', 'unsupported_tool'],
      ['image_generation', { type: 'image_generation' }, 'tools.0.type', 'unsupported_tool'],
      ['mcp', { type: 'mcp', server_label: 'x', server_url: 'https://mcp.example' }, 'tools.0.type', 'unsupported_tool'],
    ])('the hosted tool %s is a clear 400', async (_name, tool, param, code) => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const before = upstream.requests.length;
      expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', tools: [tool] })).toMatchObject({ status: 400, error: { param, code } });
      expect(upstream.requests.length).toBe(before);
    });

    it.each([
      [{ background: true }, 'background', 'unsupported_parameter'],
      [{ prompt: { id: 'pmpt_1' } }, 'prompt', 'unsupported_parameter'],
      [{ include: ['message.output_text.logprobs'] }, 'include.0', 'unsupported_parameter'],
      [{ reasoning: { summary: 'auto' } }, 'reasoning.summary', 'unsupported_parameter'],
      [{ frequency_penalty: 1 }, 'frequency_penalty', 'unknown_parameter'],
      [{ input: [{ type: 'message', role: 'user', content: [{ type: 'input_image', file_id: 'file_1' }] }] }, 'input.0.content.0.file_id', 'unsupported_content'],
      [{ input: [{ type: 'reasoning', summary: [] }] }, 'input.0.type', 'unsupported_input_item'],
      [{ store: false, previous_response_id: 'resp_x' }, 'store', 'unsupported_parameter'],
      [{ max_output_tokens: 10_000_000 }, 'max_output_tokens', undefined],
      [{ temperature: 5 }, 'temperature', undefined],
      [{ top_p: 2 }, 'top_p', undefined],
      [{ parallel_tool_calls: 'yes' }, 'parallel_tool_calls', undefined],
      [{ tool_choice: { type: 'file_search' } }, 'tool_choice', 'unsupported_parameter'],
      [{ input: [{ type: 'message', role: 'assistant', content: [{ type: 'input_image', image_url: 'https://x.example/a.png' }] }] }, 'input.0.content.0', undefined],
      [{ input: [{ type: 'function_call_output', output: 'x' }] }, 'input.0.call_id', undefined],
      [{ tools: [{ type: 'file_search', vector_store_ids: ['vs_1'] }], assistant_id: 'any' }, 'tools.0.vector_store_ids', 'unsupported_parameter'],
      // Checked by the chat core, named as the request has it.
      [{ tools: [weatherTool, { type: 'function', name: 'bad name!' }] }, 'tools.1.name', undefined],
      [{ tools: [weatherTool, { type: 'function', name: 'web_search' }] }, 'tools.1', 'tool_requires_assistant'],
      [{ text: { format: { type: 'json_schema' } } }, 'text.format', undefined],
      // Checked before a stored response's conversation is created with it (it was a 500).
      [{ user: 'u'.repeat(257) }, 'user', undefined],
      [{ user_id: 42 }, 'user_id', undefined],
    ])('%j is a 400 naming %s', async (fields, param, code) => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const { status, error } = await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', ...fields });
      expect(status).toBe(400);
      expect(error.param).toBe(param);
      if (code) expect(error.code).toBe(code);
      expect(error.message).toEqual(expect.any(String));
    });

    it('a request refused by validation or by the rate limit still gets its usage record, never a charge', async () => {
      const workspace = await t.createWorkspace({ tier: 'free', balanceMillicents: 1_000_000 });
      // The free tier allows 5 requests a minute: five refused by validation, the sixth by the rate limit.
      for (let i = 0; i < 5; i += 1) {
        expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi', background: true, user: 'end-user-7' })).toMatchObject({ status: 400 });
      }
      expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi' })).toMatchObject({ status: 429 });
      // The rate limit's record is written beside the answer.
      let records: Array<{ status: string; error_code: string; model: string; user_id: string | null; charged_millicents: string }> = [];
      for (let attempt = 0; attempt < 50 && records.length < 6; attempt += 1) {
        records = await usageRecords(workspace);
        if (records.length < 6) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      expect(records.map((record) => record.error_code).sort()).toEqual([...Array(5).fill('unsupported_parameter'), 'rate_limit_exceeded'].sort());
      expect(records.every((record) => record.status === 'error' && record.model === 'gpt-4o-mini' && Number(record.charged_millicents) === 0)).toBe(true);
      expect(records.filter((record) => record.user_id === 'end-user-7')).toHaveLength(5);
      expect((await wallet(workspace)).balanceMillicents).toBe(1_000_000);
    });

    it('402 on an empty wallet, with no conversation left behind', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 0 });
      expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi' })).toMatchObject({ status: 402, error: { type: 'insufficient_balance' } });
      const [{ count }] = await db.query('SELECT count(*)::int AS count FROM conversations WHERE workspace_id = $1', [workspace.id]);
      expect(count).toBe(0);
      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({ status: 'error', error_code: 'insufficient_balance' });
      expect(Number(record.charged_millicents)).toBe(0);
    });
  });

  describe('nerfing rules', () => {
    it("apply to /v1/responses as to chat completions, counted per end user (the request's user)", async () => {
      const nerfing = t.app.get(NerfingService);
      const clock = nerfing.clock;
      // Ten seconds into a minute, held still: the rule's window cannot roll over during the test.
      nerfing.clock = () => Date.parse('2026-11-23T12:00:10.000Z');
      try {
        const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
        await t.app.get(NerfingRulesService).add(workspace.id, { scope: 'all', window: 'minute', metric: 'requests', threshold: '1', action: 'block' });
        upstream.script({ kind: 'text', text: 'First.' }, { kind: 'text', text: 'Bob.' });
        await create(workspace, { model: 'gpt-4o-mini', input: 'Hi', user: 'alice' });
        expect(await refusal(workspace, { model: 'gpt-4o-mini', input: 'Hi again', user: 'alice' })).toMatchObject({ status: 429, error: { type: 'rate_limit_exceeded' } });
        expect((await create(workspace, { model: 'gpt-4o-mini', input: 'Hi', user: 'bob' })).output_text).toBe('Bob.');
        const records = (await usageRecords(workspace)) as Array<{ user_id: string; status: string }>;
        expect(records.map((record) => [record.user_id, record.status])).toEqual([
          ['alice', 'success'],
          ['alice', 'error'],
          ['bob', 'success'],
        ]);
      } finally {
        nerfing.clock = clock;
      }
    });
  });

  describe('idempotency', () => {
    it('a retry with the same Idempotency-Key returns the stored response and is not charged twice', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Once.' }, { kind: 'text', text: 'Twice?' });
      const body = { model: 'gpt-4o-mini', input: 'Say once' };
      const { data: first, response: firstHttp } = await workspace.client.responses.create(body, { headers: { 'Idempotency-Key': 'resp-key-1' } }).withResponse();
      // The rate limit counts it as any API request, with its headers.
      expect(Number(firstHttp.headers.get('x-ratelimit-limit'))).toBeGreaterThan(0);
      expect(firstHttp.headers.get('x-ratelimit-remaining')).toEqual(expect.any(String));
      const before = upstream.requests.length;
      const retry = await workspace.client.responses.create(body, { headers: { 'Idempotency-Key': 'resp-key-1' } }).withResponse();
      expect(retry.response.headers.get('idempotent-replayed')).toBe('true');
      expect(retry.data.id).toBe(first.id);
      expect(retry.data.output_text).toBe('Once.');
      expect(upstream.requests.length).toBe(before);
      const records = await usageRecords(workspace);
      expect(records).toHaveLength(1);
      expect((await wallet(workspace)).balanceMillicents).toBe(1_000_000 - Number(records[0].charged_millicents));
    });
  });
});
