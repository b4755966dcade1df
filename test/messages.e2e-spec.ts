import Anthropic from '@anthropic-ai/sdk';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { waitFor } from './support/wait-for';
import { walletInvariants } from './support/wallet-invariants';

/**
 * The Anthropic Messages API as its official SDK uses it, translated onto the chat core: in
 * front of a fake of OpenAI (gpt-4o-mini) and on the built-in simulator (claude-haiku-4-5, whose
 * provider has no key here). One app for the whole file.
 */

type Event = { type: string } & Record<string, any>;
type WithService<T> = T & { x_service: { cost_millicents: number; max_tokens_lowered_to?: number } };

const WEATHER_TOOL = {
  name: 'get_weather',
  description: 'Current weather in a city',
  input_schema: { $schema: 'http://json-schema.org/draft-07/schema#', type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] },
};
/** A 1x1 PNG. */
const PIXEL = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=';

/**
 * Anthropic's event order: message_start (empty content, input_tokens > 0), then blocks with
 * contiguous indices from 0, each start / deltas / stop, no empty text block, tool inputs whose
 * partial_json parses; then message_delta and message_stop last. Pings may come anywhere after the start.
 */
function checkEventOrder(all: Event[]): void {
  expect(all[0].type).toBe('message_start');
  expect(all[0].message.content).toEqual([]);
  expect(all[0].message.usage.input_tokens).toBeGreaterThan(0);
  const events = all.filter((event) => event.type !== 'ping');
  let nextIndex = 0;
  let open: { index: number; type: string; text: string; json: string } | null = null;
  events.slice(1).forEach((event, at) => {
    const last = at === events.length - 2;
    switch (event.type) {
      case 'content_block_start':
        expect(open).toBeNull();
        expect(event.index).toBe(nextIndex);
        expect(['text', 'tool_use']).toContain(event.content_block.type);
        open = { index: event.index, type: event.content_block.type, text: '', json: '' };
        break;
      case 'content_block_delta':
        expect(open?.index).toBe(event.index);
        if (event.delta.type === 'text_delta') {
          expect(open!.type).toBe('text');
          open!.text += event.delta.text;
        } else {
          expect(event.delta.type).toBe('input_json_delta');
          expect(open!.type).toBe('tool_use');
          open!.json += event.delta.partial_json;
        }
        break;
      case 'content_block_stop':
        expect(open?.index).toBe(event.index);
        if (open!.type === 'text') expect(open!.text.length).toBeGreaterThan(0);
        else expect(typeof JSON.parse(open!.json)).toBe('object');
        open = null;
        nextIndex += 1;
        break;
      case 'message_delta':
        expect(open).toBeNull();
        expect(at).toBe(events.length - 3);
        expect(typeof event.delta.stop_reason).toBe('string');
        expect(typeof event.usage.output_tokens).toBe('number');
        break;
      case 'message_stop':
        expect(last).toBe(true);
        break;
      default:
        throw new Error(`Unexpected event ${event.type} at ${at + 1}`);
    }
  });
  expect(events.at(-1)?.type).toBe('message_stop');
}

/** The frames of a raw SSE body: each `event: <type>` and its `data`, checked to agree. */
function framesOf(body: string): Event[] {
  return body
    .split('\n\n')
    .filter((frame) => frame.trim().length > 0)
    .map((frame) => {
      const name = /^event: (.+)$/m.exec(frame)?.[1];
      const data = JSON.parse(/^data: (.+)$/m.exec(frame)![1]) as Event;
      expect(data.type).toBe(name);
      return data;
    });
}

describe('Anthropic Messages API (POST /v1/messages)', () => {
  let t: TestApp;
  let upstream: FakeOpenAi;
  let workspace: TestWorkspace;
  let client: Anthropic;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    // gpt-4o-mini goes to the fake OpenAI; claude-haiku-4-5 (no Anthropic key) to the simulator.
    t = await startTestApp({
      config: { llmSimulator: 'auto', simulatorWordDelayMs: 0, upstreamMaxRetries: 0, providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } } },
    });
    db = t.app.get(DataSource);
    workspace = await t.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    client = anthropicClient(workspace.apiKey);
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  const anthropicClient = (apiKey: string, options: { authToken?: boolean } = {}) =>
    new Anthropic({ baseURL: t.baseUrl, ...(options.authToken ? { authToken: apiKey, apiKey: null } : { apiKey }), maxRetries: 0, timeout: 20_000 });
  const lastUpstreamBody = () => upstream.requests.at(-1)!.body as Record<string, any>;
  const usageRecords = async (workspaceId: string) => {
    await t.settled(workspaceId);
    return db.query(`SELECT source, status, error_code, user_id, model, charged_millicents::int AS charged, stream FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [
      workspaceId,
    ]) as Promise<Array<{ source: string; status: string; error_code: string | null; user_id: string | null; model: string; charged: number; stream: boolean }>>;
  };
  const refusalOf = (promise: Promise<unknown>) => promise.then(() => undefined, (error: unknown) => error as InstanceType<typeof Anthropic.APIError>);

  it('answers a text message through the OpenAI adapter, with the key as x-api-key or Bearer, and records it as source messages', async () => {
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const message = (await anthropicClient(own.apiKey).messages.create({
      model: 'gpt-4o-mini',
      max_tokens: 1024,
      messages: [{ role: 'user', content: 'Hello' }],
    })) as WithService<Anthropic.Message>;
    expect(message).toMatchObject({
      type: 'message',
      role: 'assistant',
      model: 'gpt-4o-mini',
      content: [{ type: 'text', text: 'Hello from the fake upstream.' }],
      stop_reason: 'end_turn',
      stop_sequence: null,
      usage: { input_tokens: 10, output_tokens: 5, cache_read_input_tokens: 0 },
    });
    expect(message.id).toMatch(/^msg_/);
    expect(message.x_service.cost_millicents).toBeGreaterThan(0);
    expect(lastUpstreamBody()).toMatchObject({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 1024 });

    // Claude Code's ANTHROPIC_AUTH_TOKEN is sent as Authorization: Bearer.
    const viaBearer = await anthropicClient(own.apiKey, { authToken: true }).messages.create({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'Hi' }] });
    expect(viaBearer.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
    expect(await usageRecords(own.id)).toEqual([
      expect.objectContaining({ source: 'messages', status: 'success', model: 'gpt-4o-mini', stream: false }),
      expect.objectContaining({ source: 'messages', status: 'success' }),
    ]);
  });

  it("translates Claude Code's request: system blocks, a system message, metadata.user_id; drops thinking and unknown fields; lowers max_tokens", async () => {
    const userId = JSON.stringify({ device_id: 'd'.repeat(300), session_id: 'abc' });
    const message = (await client.messages.create(
      {
        model: 'gpt-4o-mini',
        max_tokens: 32_000,
        system: [
          { type: 'text', text: 'You are terse.', cache_control: { type: 'ephemeral' } },
          { type: 'text', text: 'Answer in French.' },
        ],
        messages: [
          { role: 'user', content: [{ type: 'text', text: 'Bonjour', cache_control: { type: 'ephemeral' } }] },
          { role: 'system', content: 'The user prefers short answers.' } as unknown as Anthropic.MessageParam,
          { role: 'assistant', content: [{ type: 'thinking', thinking: 'hmm', signature: 'sig' }, { type: 'text', text: 'Salut.' }] },
          { role: 'user', content: 'Encore ?' },
        ],
        metadata: { user_id: userId },
        thinking: { type: 'enabled', budget_tokens: 2048 },
        temperature: 0.5,
        top_k: 40,
        stop_sequences: ['\n\nHuman:'],
        context_management: { edits: [{ type: 'clear_tool_uses_20250919' }] },
        output_config: { effort: 'high' },
        service_tier: 'auto',
        container: null,
      } as Anthropic.MessageCreateParamsNonStreaming,
      { headers: { 'anthropic-beta': 'made-up-flag-2099-01-01,claude-code-20250219,context-management-2025-06-27', 'anthropic-version': '2023-06-01' } },
    )) as WithService<Anthropic.Message>;
    expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
    // gpt-4o-mini produces at most 16384 tokens: the request ran with that cap, and says so.
    expect(message.x_service.max_tokens_lowered_to).toBe(16_384);
    const sent = lastUpstreamBody();
    expect(sent.messages).toEqual([
      { role: 'system', content: 'You are terse.\n\nAnswer in French.' },
      { role: 'user', content: 'Bonjour' },
      { role: 'system', content: 'The user prefers short answers.' },
      { role: 'assistant', content: 'Salut.' },
      { role: 'user', content: 'Encore ?' },
    ]);
    expect(sent.max_tokens).toBe(16_384);
    expect(sent.stop).toEqual(['\n\nHuman:']);
    expect(sent.temperature).toBe(0.5);
    // gpt-4o-mini does not reason: thinking becomes no reasoning_effort (OpenAI would refuse one).
    for (const dropped of ['thinking', 'reasoning_effort', 'context_management', 'output_config', 'metadata', 'top_k', 'service_tier', 'container', 'user_id']) {
      expect(sent).not.toHaveProperty(dropped);
    }
    const [record] = (await usageRecords(workspace.id)).slice(-1);
    expect(record.user_id).toBe(userId.slice(0, 256));
  });

  it('maps thinking onto reasoning_effort for a model that reasons (o4-mini), by budget band', async () => {
    const effortFor = async (thinking: Record<string, unknown> | undefined, maxTokens = 32_000) => {
      const message = await client.messages.create({
        model: 'o4-mini',
        max_tokens: maxTokens,
        messages: [{ role: 'user', content: 'Think, then answer.' }],
        ...(thinking ? { thinking } : {}),
      } as Anthropic.MessageCreateParamsNonStreaming);
      expect(message.content).toEqual([{ type: 'text', text: 'Hello from the fake upstream.' }]);
      return lastUpstreamBody().reasoning_effort as unknown;
    };
    expect(await effortFor({ type: 'enabled', budget_tokens: 1024 }, 2048)).toBe('low');
    expect(await effortFor({ type: 'enabled', budget_tokens: 4096 })).toBe('medium');
    expect(await effortFor({ type: 'enabled', budget_tokens: 16_384 })).toBe('high');
    expect(await effortFor({ type: 'adaptive' })).toBe('medium');
    expect(await effortFor({ type: 'disabled' })).toBeUndefined();
    expect(await effortFor(undefined)).toBeUndefined();
    expect(lastUpstreamBody()).not.toHaveProperty('thinking');
  });

  it('runs a tool round trip: tool_use out (tool_choice any, serial), tool_result back in', async () => {
    upstream.script(
      { kind: 'tool_calls', calls: [{ id: 'call_paris', name: 'get_weather', arguments: '{"city":"Paris"}' }], usage: { prompt_tokens: 40, completion_tokens: 12 } },
      { kind: 'text', text: 'It is 18 degrees in Paris.' },
    );
    const ask: Anthropic.MessageParam = { role: 'user', content: 'Weather in Paris?' };
    const first = await client.messages.create({
      model: 'gpt-4o-mini',
      max_tokens: 256,
      tools: [WEATHER_TOOL],
      tool_choice: { type: 'any', disable_parallel_tool_use: true },
      messages: [ask],
    });
    expect(first.stop_reason).toBe('tool_use');
    expect(first.content).toEqual([{ type: 'tool_use', id: 'call_paris', name: 'get_weather', input: { city: 'Paris' } }]);
    const sent = lastUpstreamBody();
    expect(sent.tool_choice).toBe('required');
    expect(sent.parallel_tool_calls).toBe(false);
    expect(sent.tools).toEqual([
      { type: 'function', function: { name: 'get_weather', description: 'Current weather in a city', parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } },
    ]);

    const second = await client.messages.create({
      model: 'gpt-4o-mini',
      max_tokens: 256,
      tools: [WEATHER_TOOL],
      messages: [ask, { role: 'assistant', content: first.content }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'call_paris', content: '18°C' }] }],
    });
    expect(second).toMatchObject({ stop_reason: 'end_turn', content: [{ type: 'text', text: 'It is 18 degrees in Paris.' }] });
    expect(lastUpstreamBody().messages).toEqual([
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_paris', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }] },
      { role: 'tool', tool_call_id: 'call_paris', content: '18°C' },
    ]);
  });

  it('carries two parallel tool_use blocks and their two tool_results (one an error), then the text beside them', async () => {
    upstream.script({
      kind: 'tool_calls',
      text: 'Checking both.',
      calls: [
        { id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { id: 'call_b', name: 'get_weather', arguments: '{"city":"Rome"}' },
      ],
    });
    const ask: Anthropic.MessageParam = { role: 'user', content: 'Paris and Rome?' };
    const first = await client.messages.create({ model: 'gpt-4o-mini', max_tokens: 256, tools: [WEATHER_TOOL], messages: [ask] });
    expect(first.content).toEqual([
      { type: 'text', text: 'Checking both.' },
      { type: 'tool_use', id: 'call_a', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'call_b', name: 'get_weather', input: { city: 'Rome' } },
    ]);
    await client.messages.create({
      model: 'gpt-4o-mini',
      max_tokens: 256,
      tools: [WEATHER_TOOL],
      messages: [
        ask,
        { role: 'assistant', content: first.content },
        {
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_a', content: [{ type: 'text', text: '18°C' }] },
            { type: 'tool_result', tool_use_id: 'call_b', content: 'station offline', is_error: true },
            { type: 'text', text: 'Compare them.' },
          ],
        },
      ],
    });
    expect(lastUpstreamBody().messages.slice(1)).toEqual([
      {
        role: 'assistant',
        content: 'Checking both.',
        tool_calls: [
          { id: 'call_a', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
          { id: 'call_b', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
        ],
      },
      { role: 'tool', tool_call_id: 'call_a', content: '18°C' },
      { role: 'tool', tool_call_id: 'call_b', content: 'Error: station offline' },
      { role: 'user', content: 'Compare them.' },
    ]);
  });

  it('sends images (base64 and url) and a text document as chat content parts', async () => {
    await client.messages.create({
      model: 'gpt-4o-mini',
      max_tokens: 64,
      messages: [
        {
          role: 'user',
          content: [
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PIXEL } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.png' } },
            { type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'The cat is orange.' }, title: 'Notes' },
            { type: 'text', text: 'What is this?' },
          ],
        },
      ],
    });
    expect(lastUpstreamBody().messages).toEqual([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: `data:image/png;base64,${PIXEL}` } },
          { type: 'image_url', image_url: { url: 'https://example.com/cat.png' } },
          { type: 'text', text: 'Notes\n\nThe cat is orange.' },
          { type: 'text', text: 'What is this?' },
        ],
      },
    ]);
  });

  it('streams text and parallel tool calls in Anthropic event order (messages.stream().finalMessage())', async () => {
    const events: Event[] = [];
    const text = await client.messages.stream({ model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user', content: 'Hello' }] }).on('streamEvent', (event) => {
      events.push(structuredClone(event) as Event);
    });
    const message = (await text.finalMessage()) as unknown as WithService<Anthropic.Message>;
    checkEventOrder(events);
    expect(message).toMatchObject({ content: [{ type: 'text', text: 'Hello from the fake upstream.' }], stop_reason: 'end_turn', usage: { input_tokens: 10, output_tokens: 5 } });
    expect((events.find((event) => event.type === 'message_delta') as Event).x_service.cost_millicents).toBeGreaterThan(0);

    upstream.script({
      kind: 'tool_calls',
      calls: [
        { id: 'call_a', name: 'get_weather', arguments: '{"city":"Paris"}' },
        { id: 'call_b', name: 'get_weather', arguments: '{"city":"Rome"}' },
      ],
    });
    const toolEvents: Event[] = [];
    const tools = client.messages.stream({ model: 'gpt-4o-mini', max_tokens: 64, tools: [WEATHER_TOOL], messages: [{ role: 'user', content: 'Paris and Rome?' }] });
    tools.on('streamEvent', (event) => {
      toolEvents.push(structuredClone(event) as Event);
    });
    const calls = await tools.finalMessage();
    checkEventOrder(toolEvents);
    expect(calls.stop_reason).toBe('tool_use');
    expect(calls.content).toEqual([
      { type: 'tool_use', id: 'call_a', name: 'get_weather', input: { city: 'Paris' } },
      { type: 'tool_use', id: 'call_b', name: 'get_weather', input: { city: 'Rome' } },
    ]);
  });

  it('streams on the simulator with named SSE frames, message_start counting the prompt as count_tokens does', async () => {
    const request = { model: 'claude-haiku-4-5', max_tokens: 200, system: 'You are terse.', messages: [{ role: 'user' as const, content: 'Tell me about the sea.' }] };
    const response = await fetch(`${t.baseUrl}/v1/messages`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': workspace.apiKey, 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ ...request, stream: true }),
    });
    expect(response.status).toBe(200);
    expect(response.headers.get('content-type')).toMatch(/^text\/event-stream/);
    expect(response.headers.get('x-ratelimit-limit')).not.toBeNull();
    const events = framesOf(await response.text());
    checkEventOrder(events);
    const delta = events.find((event) => event.type === 'message_delta')!;
    expect(delta.usage.output_tokens).toBeGreaterThan(0);

    const counted = await client.messages.countTokens(request);
    expect(counted.input_tokens).toBe(events[0].message.usage.input_tokens);
  });

  it('charges a conversation sent as a message exactly what it costs as a chat completion, and leaves the ledger equal to the balance', async () => {
    const asChat = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const asMessage = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    for (const model of ['gpt-4o-mini', 'claude-haiku-4-5']) {
      const answer = { kind: 'text' as const, text: 'Same answer.', usage: { prompt_tokens: 37, completion_tokens: 9 } };
      // The simulator answers claude-haiku-4-5 (the same words for the same prompt).
      if (model === 'gpt-4o-mini') upstream.script(answer, answer);
      const chat = (await asChat.client.chat.completions.create({
        model,
        max_tokens: 300,
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'user', content: 'Describe the sea in one line.' },
        ],
      })) as unknown as WithService<{ usage: unknown }>;
      const message = (await anthropicClient(asMessage.apiKey).messages.create({
        model,
        max_tokens: 300,
        system: [{ type: 'text', text: 'You are terse.' }],
        messages: [{ role: 'user', content: 'Describe the sea in one line.' }],
      })) as WithService<Anthropic.Message>;
      expect(message.x_service.cost_millicents).toBe(chat.x_service.cost_millicents);
    }
    await t.quiet(asChat.id);
    await t.quiet(asMessage.id);
    const chatWallet = await walletInvariants(db, asChat.id);
    const messageWallet = await walletInvariants(db, asMessage.id);
    expect(messageWallet.balance).toBe(chatWallet.balance);
    expect(messageWallet.balance).toBeLessThan(1_000_000);
    for (const wallet of [chatWallet, messageWallet]) expect(wallet).toEqual({ balance: wallet.ledger, ledger: wallet.ledger, reserved: 0, holds: 0 });
    expect((await usageRecords(asMessage.id)).map((record) => record.source)).toEqual(['messages', 'messages']);
    expect((await usageRecords(asChat.id)).map((record) => record.charged)).toEqual((await usageRecords(asMessage.id)).map((record) => record.charged));
  });

  it('charges a stream the client cut for what reached it, stops the upstream call, and holds nothing afterwards', async () => {
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    upstream.script({ kind: 'text', text: Array.from({ length: 200 }, (_, i) => `word${i}`).join(' '), chunkDelayMs: 20 });
    const controller = new AbortController();
    const stream = anthropicClient(own.apiKey).messages.stream({ model: 'gpt-4o-mini', max_tokens: 1000, messages: [{ role: 'user', content: 'Talk.' }] }, { signal: controller.signal });
    let deltas = 0;
    await (async () => {
      for await (const event of stream) {
        if (event.type === 'content_block_delta' && ++deltas === 5) controller.abort();
      }
    })().catch(() => undefined);
    const upstreamCall = upstream.requests[upstream.requests.length - 1];
    await waitFor(async () => (await usageRecords(own.id)).length === 1 && upstreamCall.closedEarly);
    const [record] = await usageRecords(own.id);
    expect(record).toMatchObject({ source: 'messages', status: 'error', error_code: 'client_disconnected', stream: true });
    // What reached the client (about five words) is charged, not the 200 words the upstream would have sent.
    const [used] = (await db.query(`SELECT output_tokens::int AS output, llm_cost_millicents::float AS cost FROM usage_records WHERE workspace_id = $1`, [own.id])) as {
      output: number;
      cost: number;
    }[];
    expect(used.output).toBeGreaterThanOrEqual(5);
    expect(used.output).toBeLessThan(150);
    expect(used.cost).toBeGreaterThan(0);
    await t.quiet(own.id);
    const wallet = await walletInvariants(db, own.id);
    expect(wallet).toEqual({ balance: wallet.ledger, ledger: wallet.ledger, reserved: 0, holds: 0 });
  });

  it('counts tokens for free: no hold, no charge, no usage record', async () => {
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const counted = await anthropicClient(own.apiKey).messages.countTokens({
      model: 'gpt-4o-mini',
      system: 'You are terse.',
      tools: [WEATHER_TOOL],
      messages: [{ role: 'user', content: 'Weather in Paris?' }],
    });
    expect(counted.input_tokens).toBeGreaterThan(10);
    expect(await usageRecords(own.id)).toEqual([]);
    expect(await walletInvariants(db, own.id)).toMatchObject({ balance: 1_000_000, reserved: 0 });
    await expect(anthropicClient(own.apiKey).messages.countTokens({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
  });

  it('runs an assistant with model "assistant/<slug>"', async () => {
    await t.app.get(AssistantsService).create(workspace.id, { name: 'Sea Bot', model: 'claude-haiku-4-5', systemPrompt: 'You are Sea Bot.' });
    const message = await client.messages.create({ model: 'assistant/sea-bot', max_tokens: 100, messages: [{ role: 'user', content: 'Who are you?' }] });
    expect(message.model).toBe('claude-haiku-4-5');
    expect(message.content[0]).toMatchObject({ type: 'text' });
  });

  it('replays a non-streaming request sent again with the same Idempotency-Key, charged once', async () => {
    const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const ownClient = anthropicClient(own.apiKey);
    const body = { model: 'gpt-4o-mini', max_tokens: 64, messages: [{ role: 'user' as const, content: 'Once' }] };
    const first = await ownClient.messages.create(body, { headers: { 'Idempotency-Key': 'msg-once-1' } });
    const again = await ownClient.messages.create(body, { headers: { 'Idempotency-Key': 'msg-once-1' } });
    expect(again.id).toBe(first.id);
    expect(await usageRecords(own.id)).toHaveLength(1);
  });

  describe('errors, in Anthropic shape with our code', () => {
    it('refuses a bad request with invalid_request_error naming the field (and records it)', async () => {
      const own = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const ownClient = anthropicClient(own.apiKey);
      const missing = await refusalOf(ownClient.messages.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] } as unknown as Anthropic.MessageCreateParamsNonStreaming));
      expect(missing).toBeInstanceOf(Anthropic.BadRequestError);
      expect(missing!.error).toMatchObject({ type: 'error', error: { type: 'invalid_request_error', param: 'max_tokens' } });
      const block = await refusalOf(
        ownClient.messages.create({
          model: 'gpt-4o-mini',
          max_tokens: 10,
          messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'url', url: 'https://example.com/a.pdf' } }] }],
        }),
      );
      expect(block!.error).toMatchObject({ error: { type: 'invalid_request_error', code: 'unsupported_content', param: 'messages.0.content.0.source.type' } });
      expect(await usageRecords(own.id)).toEqual([expect.objectContaining({ source: 'messages', status: 'error' }), expect.objectContaining({ source: 'messages', status: 'error' })]);
    });

    it('maps 401, 404, 402, 403 and an upstream failure to their Anthropic types', async () => {
      const wrongKey = await refusalOf(anthropicClient('sk-not-a-key').messages.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
      expect(wrongKey).toBeInstanceOf(Anthropic.AuthenticationError);
      expect(wrongKey!.error).toMatchObject({ type: 'error', error: { type: 'authentication_error', code: 'invalid_api_key' } });

      const unknown = await refusalOf(client.messages.create({ model: 'claude-unknown', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
      expect(unknown).toBeInstanceOf(Anthropic.NotFoundError);
      expect(unknown!.error).toMatchObject({ error: { type: 'not_found_error', code: 'model_not_found' } });

      const broke = await t.createWorkspace({ balanceMillicents: 0 });
      const poor = await refusalOf(anthropicClient(broke.apiKey).messages.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
      expect(poor!.status).toBe(402);
      expect(poor!.error).toMatchObject({ error: { type: 'permission_error', code: 'insufficient_balance' } });

      const keys = t.app.get(ApiKeysService);
      const limited = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      await keys.setLimits(limited.apiKeyId, { spendLimitMillicents: 1, spendLimitPeriod: 'daily' });
      const overLimit = await refusalOf(anthropicClient(limited.apiKey).messages.create({ model: 'gpt-4o-mini', max_tokens: 1000, messages: [{ role: 'user', content: 'x' }] }));
      expect(overLimit!.status).toBe(402);
      expect(overLimit!.error).toMatchObject({ type: 'error', error: { type: 'permission_error', code: 'key_limit_exceeded' } });
      await keys.setLimits(limited.apiKeyId, { spendLimitMillicents: null, allowedModels: ['claude-haiku-4-5'] });
      const notAllowed = await refusalOf(anthropicClient(limited.apiKey).messages.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
      expect(notAllowed).toBeInstanceOf(Anthropic.PermissionDeniedError);
      expect(notAllowed!.error).toMatchObject({ error: { type: 'permission_error', code: 'model_not_allowed' } });

      upstream.script({ kind: 'http_error', status: 500 });
      const failed = await refusalOf(client.messages.create({ model: 'gpt-4o-mini', max_tokens: 10, messages: [{ role: 'user', content: 'x' }] }));
      expect(failed).toBeInstanceOf(Anthropic.InternalServerError);
      expect(failed!.error).toMatchObject({ type: 'error', error: { type: 'api_error' } });
    });

    it('ends a stream that fails after its start with an error event', async () => {
      upstream.script({ kind: 'stream_failure', words: ['Half ', 'an '], failure: 'error_event' });
      const response = await fetch(`${t.baseUrl}/v1/messages`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'x-api-key': workspace.apiKey },
        body: JSON.stringify({ model: 'gpt-4o-mini', max_tokens: 64, stream: true, messages: [{ role: 'user', content: 'Hello' }] }),
      });
      const events = framesOf(await response.text());
      expect(events[0].type).toBe('message_start');
      expect(events.at(-1)).toMatchObject({ type: 'error', error: { type: expect.any(String), message: expect.any(String) } });
      expect(events.map((event) => event.type)).not.toContain('message_stop');
    });
  });
});
