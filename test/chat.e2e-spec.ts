import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { countTextTokens } from '../src/providers/tokens';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/** gpt-4o prices, millicents per million tokens: input, output, cached input. */
const GPT_4O = { input: 250_000, output: 1_000_000, cached: 125_000 };

describe('chat completions in direct mode (OpenAI provider, through the OpenAI SDK)', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream-secret', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 1,
        upstreamTimeoutMs: 1_500,
      },
    });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  const lastUpstream = () => upstream.requests[upstream.requests.length - 1];
  const wallet = (workspace: TestWorkspace) => t.app.get(WalletService).balance(workspace.id);
  // Direct reads of the database wait for the settlements of the answers given so far to commit.
  const usageRecords = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return db.query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [workspace.id]);
  };
  const ledger = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at', [
      workspace.id,
    ]);
  };

  /** The wallet invariants of the architecture: balance is the ledger's sum, nothing stays reserved (once the lease went back). */
  async function expectWalletConsistent(workspace: TestWorkspace) {
    await t.quiet(workspace.id);
    const [{ sum }] = await db.query(
      'SELECT coalesce(sum(amount_millicents), 0)::bigint AS sum FROM wallet_transactions WHERE workspace_id = $1',
      [workspace.id],
    );
    const balance = await wallet(workspace);
    expect(balance.balanceMillicents).toBe(Number(sum));
    expect(balance.reservedMillicents).toBe(0);
    const [{ holds }] = await db.query('SELECT count(*)::int AS holds FROM wallet_holds WHERE workspace_id = $1', [workspace.id]);
    expect(holds).toBe(0);
  }

  describe('plain completions', () => {
    it('answers in the OpenAI shape with x_service, charges the exact cost and records usage', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      upstream.script({ kind: 'text', text: 'Paris.', usage: { prompt_tokens: 1_000, completion_tokens: 3, cached_tokens: 200 } });

      const completion = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [
          { role: 'system', content: 'Answer briefly.' },
          { role: 'user', content: 'Capital of France?' },
        ],
        temperature: 0.2,
        user_id: 'end-user-7',
        subscription_id: 'sub_42',
      } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);

      expect(completion.object).toBe('chat.completion');
      expect(completion.model).toBe('gpt-4o');
      expect(completion.choices[0]).toMatchObject({ index: 0, message: { role: 'assistant', content: 'Paris.' }, finish_reason: 'stop' });
      expect(completion.usage).toMatchObject({ prompt_tokens: 1_000, completion_tokens: 3, total_tokens: 1_003 });
      // 800 input x 250000 + 200 cached x 125000 + 3 output x 1000000, in millionths of a millicent.
      const exact = (800 * GPT_4O.input + 200 * GPT_4O.cached + 3 * GPT_4O.output) / 1e6;
      expect((completion as unknown as { x_service: unknown }).x_service).toEqual({
        cost_millicents: exact,
        iterations: 1,
        tools_used: [],
        generated_files: null,
        provider: 'openai',
        deployment: 'openai',
        attempts: 1,
      });

      const sent = lastUpstream();
      expect(sent.headers.authorization).toBe('Bearer sk-upstream-secret');
      expect(sent.body).toMatchObject({ model: 'gpt-4o', temperature: 0.2, messages: [{ role: 'system' }, { role: 'user' }] });
      expect(sent.body).not.toHaveProperty('user_id');
      expect(sent.body).not.toHaveProperty('subscription_id');

      expect(await wallet(workspace)).toMatchObject({ balanceMillicents: 100_000 - Math.floor(exact) });
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: 100_000 },
        { type: 'usage', amount: -Math.floor(exact) },
      ]);
      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({
        model: 'gpt-4o',
        input_tokens: 1_000,
        output_tokens: 3,
        total_tokens: 1_003,
        cached_tokens: 200,
        llm_cost_millicents: exact.toFixed(6),
        total_cost_millicents: exact.toFixed(6),
        status: 'success',
        error_code: null,
        user_id: 'end-user-7',
        subscription_id: 'sub_42',
        stream: false,
      });
      expect(record.request_id).toMatch(/^req_/);
      expect(record.latency_ms).toBeGreaterThanOrEqual(0);
      await expectWalletConsistent(workspace);
    });

    it('forwards the OpenAI parameters it does not model', async () => {
      const workspace = await t.createWorkspace();
      await workspace.client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'hi' }],
        top_p: 0.9,
        seed: 7,
        stop: ['END'],
        n: 1,
        presence_penalty: 0.5,
        frequency_penalty: 0.1,
        response_format: { type: 'json_object' },
        logprobs: true,
        top_logprobs: 2,
        parallel_tool_calls: false,
        user: 'openai-user-field',
        max_tokens: 50,
      });
      expect(lastUpstream().body).toMatchObject({
        top_p: 0.9,
        seed: 7,
        stop: ['END'],
        n: 1,
        presence_penalty: 0.5,
        frequency_penalty: 0.1,
        response_format: { type: 'json_object' },
        logprobs: true,
        top_logprobs: 2,
        parallel_tool_calls: false,
        user: 'openai-user-field',
        max_tokens: 50,
      });
    });

    it('sends the model output limit upstream when the client gives none, as max_tokens to a compatible server', async () => {
      const workspace = await t.createWorkspace();
      await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'hi' }] });
      expect(lastUpstream().body.max_tokens).toBe(16_384);
      await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'hi' }],
        max_completion_tokens: 64,
      });
      expect(lastUpstream().body.max_completion_tokens).toBe(64);
      expect(lastUpstream().body).not.toHaveProperty('max_tokens');
    });
  });

  describe('tools', () => {
    const tools: OpenAI.Chat.ChatCompletionTool[] = [
      {
        type: 'function',
        function: {
          name: 'get_weather',
          description: 'Weather in a city',
          parameters: { type: 'object', properties: { city: { type: 'string', description: 'City' } }, required: ['city'] },
        },
      },
    ];

    it('returns client tool calls with finish_reason tool_calls, and accepts the tool results', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_1', name: 'get_weather', arguments: '{"city":"Paris"}' }] });
      const first = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'Weather in Paris?' }],
        tools,
        tool_choice: 'auto',
      });
      expect(first.choices[0].finish_reason).toBe('tool_calls');
      expect(first.choices[0].message.tool_calls).toEqual([
        { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      ]);
      expect(lastUpstream().body).toMatchObject({ tools, tool_choice: 'auto' });

      upstream.script({ kind: 'text', text: 'It is sunny in Paris.' });
      const second = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        tools,
        messages: [
          { role: 'user', content: 'Weather in Paris?' },
          first.choices[0].message as OpenAI.Chat.ChatCompletionAssistantMessageParam,
          { role: 'tool', tool_call_id: 'call_1', content: '{"sky":"sunny"}' },
        ],
      });
      expect(second.choices[0].message.content).toBe('It is sunny in Paris.');
      expect((lastUpstream().body.messages as unknown[])[2]).toEqual({ role: 'tool', tool_call_id: 'call_1', content: '{"sky":"sunny"}' });
    });

    it('streams tool calls whose arguments reassemble', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_9', name: 'get_weather', arguments: '{"city":"Oslo"}' }] });
      const stream = workspace.client.chat.completions.stream({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'Weather in Oslo?' }],
        tools,
      });
      const final = await stream.finalChatCompletion();
      expect(final.choices[0].finish_reason).toBe('tool_calls');
      expect(final.choices[0].message.tool_calls?.[0]).toMatchObject({ id: 'call_9', function: { name: 'get_weather', arguments: '{"city":"Oslo"}' } });
    });

    it('accepts images in user content and forwards them', async () => {
      const workspace = await t.createWorkspace();
      await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is this?' },
              { type: 'image_url', image_url: { url: 'data:image/png;base64,iVBORw0KGgo=', detail: 'low' } },
            ],
          },
        ],
      });
      expect((lastUpstream().body.messages as Array<{ content: unknown[] }>)[0].content).toHaveLength(2);
    });
  });

  describe('streaming', () => {
    it('streams role, content, finish_reason, usage and x_service on the last chunk, then [DONE]', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 50_000 });
      upstream.script({ kind: 'text', text: 'one two three', usage: { prompt_tokens: 20, completion_tokens: 3 } });
      const stream = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'count' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      const chunks: Array<OpenAI.Chat.ChatCompletionChunk & { x_service?: Record<string, unknown> }> = [];
      for await (const chunk of stream) chunks.push(chunk);

      expect(chunks[0].choices[0].delta.role).toBe('assistant');
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('one two three');
      const finishing = chunks.find((c) => c.choices[0]?.finish_reason);
      expect(finishing?.choices[0].finish_reason).toBe('stop');
      const last = chunks[chunks.length - 1];
      expect(last.choices).toEqual([]);
      expect(last.usage).toMatchObject({ prompt_tokens: 20, completion_tokens: 3, total_tokens: 23 });
      const cost = (20 * GPT_4O.input + 3 * GPT_4O.output) / 1e6;
      expect(last.x_service).toEqual({ cost_millicents: cost, iterations: 1, tools_used: [], generated_files: null, provider: 'openai', deployment: 'openai', attempts: 1 });
      expect(chunks.every((c) => c.model === 'gpt-4o')).toBe(true);
      expect(lastUpstream().body).toMatchObject({ stream: true, stream_options: { include_usage: true } });
      expect(await wallet(workspace)).toMatchObject({ balanceMillicents: 50_000 - Math.floor(cost) });
      await expectWalletConsistent(workspace);
    });

    it('always asks the upstream for usage, and puts x_service on the finishing chunk when the client did not ask for usage', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'text', text: 'a b', usage: { prompt_tokens: 5, completion_tokens: 2 } });
      const stream = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
      });
      const chunks: Array<OpenAI.Chat.ChatCompletionChunk & { x_service?: unknown }> = [];
      for await (const chunk of stream) chunks.push(chunk);
      expect(lastUpstream().body.stream_options).toEqual({ include_usage: true });
      expect(chunks.every((c) => c.choices.length === 1)).toBe(true);
      const last = chunks[chunks.length - 1];
      expect(last.choices[0].finish_reason).toBe('stop');
      expect(last.x_service).toMatchObject({ cost_millicents: (5 * GPT_4O.input + 2 * GPT_4O.output) / 1e6 });
    });

    it('writes the rate-limit and request-id headers before the first byte, and ends with data: [DONE]', async () => {
      const workspace = await t.createWorkspace();
      const response = await fetch(`${t.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
      });
      expect(response.headers.get('content-type')).toContain('text/event-stream');
      expect(response.headers.get('x-ratelimit-limit')).toBe('60');
      expect(response.headers.get('x-request-id')).toBeTruthy();
      const text = await response.text();
      expect(text.trimEnd().endsWith('data: [DONE]')).toBe(true);
    });

    it('counts the tokens itself when the upstream sends no usage', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'text', text: 'counted by the tokenizer', usage: null });
      const stream = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'hi' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let last: OpenAI.Chat.ChatCompletionChunk | undefined;
      for await (const chunk of stream) last = chunk;
      const expected = countTextTokens('counted by the tokenizer');
      expect(last?.usage?.completion_tokens).toBe(expected);
      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({ output_tokens: expected, status: 'success' });
    });

    it('sends an upstream failure after the first byte as an in-band error event, charges what was delivered, and records it', async () => {
      for (const failure of ['error_event', 'socket', 'malformed'] as const) {
        const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
        upstream.script({ kind: 'stream_failure', words: ['partial ', 'answer '], failure });
        const stream = await workspace.client.chat.completions.create({
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'hi' }],
          stream: true,
        });
        const received: string[] = [];
        const error = await (async () => {
          for await (const chunk of stream) received.push(chunk.choices[0]?.delta?.content ?? '');
        })().catch((e: unknown) => e);
        expect(received.join('')).toBe('partial answer ');
        expect(error).toBeInstanceOf(OpenAI.APIError);
        expect((error as InstanceType<typeof OpenAI.APIError>).error).toMatchObject({ type: 'upstream_error' });
        // The two words reached the client: they are charged (with their prompt), not refunded.
        const [record] = await usageRecords(workspace);
        expect(record).toMatchObject({ status: 'error', error_code: expect.any(String), stream: true });
        expect(record.output_tokens).toBeGreaterThanOrEqual(2);
        const charged = Number(record.charged_millicents);
        expect(charged).toBeGreaterThan(0);
        expect(await wallet(workspace)).toEqual({ balanceMillicents: 10_000 - charged, reservedMillicents: 0, availableMillicents: 10_000 - charged });
        expect((await ledger(workspace)).map((row: { type: string }) => row.type)).toEqual(['topup', 'usage']);
      }
    });

    it('stops the upstream call when the client disconnects, and charges what was generated until then', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const words = Array.from({ length: 200 }, (_, i) => `word${i}`).join(' ');
      upstream.script({ kind: 'text', text: words, chunkDelayMs: 20 });
      const controller = new AbortController();
      const stream = await workspace.client.chat.completions.create(
        { model: 'gpt-4o', messages: [{ role: 'user', content: 'talk' }], stream: true },
        { signal: controller.signal },
      );
      let received = 0;
      await (async () => {
        for await (const chunk of stream) {
          if (chunk.choices[0]?.delta?.content) received++;
          if (received === 5) controller.abort();
        }
      })().catch(() => undefined);

      const upstreamCall = lastUpstream();
      await waitFor(async () => (await usageRecords(workspace)).length === 1);
      await waitFor(async () => upstreamCall.closedEarly);
      const [record] = await usageRecords(workspace);
      expect(record).toMatchObject({ status: 'error', error_code: 'client_disconnected' });
      expect(record.output_tokens).toBeGreaterThanOrEqual(5);
      expect(record.output_tokens).toBeLessThan(150);
      expect(Number(record.llm_cost_millicents)).toBeGreaterThan(0);
      await expectWalletConsistent(workspace);
    });
  });

  describe('errors, through the SDK error classes', () => {
    async function expectError(request: Promise<unknown>, errorClass: abstract new (...args: never[]) => Error, body: Record<string, unknown>) {
      const error = await request.catch((e: unknown) => e);
      expect(error).toBeInstanceOf(errorClass);
      expect((error as InstanceType<typeof OpenAI.APIError>).error).toMatchObject(body);
      return error as InstanceType<typeof OpenAI.APIError>;
    }

    it.each([
      [{ model: 'gpt-4o' }, 'messages'],
      [{ model: 'gpt-4o', messages: [] }, 'messages'],
      [{ model: 'gpt-4o', messages: [{ role: 'robot', content: 'x' }] }, 'messages.0.role'],
      [{ model: 'gpt-4o', messages: [{ role: 'user' }] }, 'messages.0.content'],
      [{ model: 'gpt-4o', messages: [{ role: 'tool', content: 'x' }] }, 'messages.0.tool_call_id'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: [{ type: 'audio' }] }] }, 'messages.0.content'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], temperature: 2.5 }, 'temperature'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, 'max_tokens'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], max_tokens: 1.5 }, 'max_tokens'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], max_tokens: 16_385 }, 'max_tokens'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], stream: 'yes' }, 'stream'],
      [{ messages: [{ role: 'user', content: 'x' }] }, 'model'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools.0.function.name'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'web_search' }] }, 'tools.0'],
      [{ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], tools: [{ type: 'function', function: { name: 'file_search' } }] }, 'tools.0'],
    ])('refuses %j with BadRequestError naming %s', async (body, param) => {
      const workspace = await t.createWorkspace();
      const before = upstream.requests.length;
      await expectError(
        workspace.client.chat.completions.create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming),
        OpenAI.BadRequestError,
        { type: 'bad_request', param },
      );
      expect(upstream.requests.length).toBe(before);
      expect(await usageRecords(workspace)).toEqual([expect.objectContaining({ status: 'error' })]);
    });

    it('says that server tools need an assistant', async () => {
      const workspace = await t.createWorkspace();
      const error = await expectError(
        workspace.client.chat.completions.create({
          model: 'gpt-4o',
          messages: [{ role: 'user', content: 'x' }],
          tools: [{ type: 'web_search' } as unknown as OpenAI.Chat.ChatCompletionTool],
        }),
        OpenAI.BadRequestError,
        { code: 'tool_requires_assistant' },
      );
      expect(error.message).toMatch(/assistant/);
    });

    it('answers an unknown model with NotFoundError model_not_found', async () => {
      const workspace = await t.createWorkspace();
      await expectError(
        workspace.client.chat.completions.create({ model: 'gpt-17', messages: [{ role: 'user', content: 'x' }] }),
        OpenAI.NotFoundError,
        { type: 'not_found', code: 'model_not_found', param: 'model' },
      );
    });

    it.each([
      [{ assistant_id: 'support-bot' }, 'assistant_id', 'assistant_not_found'],
      [{ model: 'gpt-4o', conversation_id: 'conv_123' }, 'conversation_id', 'conversation_not_found'],
    ])('answers an unknown assistant or conversation (%j) with NotFoundError', async (fields, param, code) => {
      const workspace = await t.createWorkspace();
      await expectError(
        workspace.client.chat.completions.create({
          messages: [{ role: 'user', content: 'x' }],
          ...fields,
        } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming),
        OpenAI.NotFoundError,
        { type: 'not_found', code, param },
      );
    });

    it('answers 402 insufficient_balance without calling the upstream when the wallet is empty', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 0 });
      const before = upstream.requests.length;
      const error = await expectError(
        workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] }),
        OpenAI.APIError,
        { type: 'insufficient_balance', code: 'insufficient_balance' },
      );
      expect(error.status).toBe(402);
      expect(upstream.requests.length).toBe(before);
      expect(await usageRecords(workspace)).toEqual([expect.objectContaining({ status: 'error', error_code: 'insufficient_balance' })]);
    });

    it('lowers max_tokens to what a low balance affords', async () => {
      // 100 millicents buy about 100 output tokens of gpt-4o after the prompt.
      const workspace = await t.createWorkspace({ balanceMillicents: 100 });
      await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] });
      const cap = lastUpstream().body.max_tokens as number;
      expect(cap).toBeGreaterThan(50);
      expect(cap).toBeLessThan(100);
      await expectWalletConsistent(workspace);
    });

    it('maps upstream failures: 400 to BadRequestError, 5xx to 502 after a retry, 429 to 503 with Retry-After, 401 to 502, timeouts to 504', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
      const call = () => workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] });

      upstream.script({ kind: 'http_error', status: 400, body: { error: { message: 'Invalid value for stop', type: 'invalid_request_error' } } });
      const badRequest = await expectError(call(), OpenAI.BadRequestError, { type: 'bad_request' });
      expect(badRequest.message).toContain('Invalid value for stop');

      const before = upstream.requests.length;
      upstream.script({ kind: 'http_error', status: 500 }, { kind: 'http_error', status: 502 });
      const bad = await expectError(call(), OpenAI.InternalServerError, { type: 'upstream_error' });
      expect(bad.status).toBe(502);
      expect(upstream.requests.length - before).toBe(2); // one retry

      upstream.script({ kind: 'http_error', status: 429, headers: { 'retry-after': '7' } }, { kind: 'http_error', status: 429, headers: { 'retry-after': '7' } });
      const overloaded = await expectError(call(), OpenAI.InternalServerError, { type: 'service_unavailable' });
      expect(overloaded.status).toBe(503);
      expect(overloaded.headers?.get('retry-after')).toBe('7');

      upstream.script({ kind: 'http_error', status: 401 });
      const auth = await expectError(call(), OpenAI.InternalServerError, { type: 'upstream_error' });
      expect(auth.status).toBe(502);
      expect(auth.message).not.toContain('sk-upstream-secret');

      upstream.script({ kind: 'hang' });
      const slow = await expectError(call(), OpenAI.InternalServerError, { type: 'upstream_timeout' });
      expect(slow.status).toBe(504);

      expect(await wallet(workspace)).toEqual({ balanceMillicents: 10_000, reservedMillicents: 0, availableMillicents: 10_000 });
      const records = await usageRecords(workspace);
      expect(records.map((r: { error_code: string }) => r.error_code)).toEqual([
        'upstream_bad_request',
        'upstream_failed',
        'upstream_rate_limited',
        'upstream_auth_failed',
        'upstream_timeout',
      ]);
    });

    it('answers the sixth chat request of a free workspace in a minute with RateLimitError', async () => {
      const workspace = await t.createWorkspace({ tier: 'free' });
      for (let i = 0; i < 5; i++) {
        await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }] });
      }
      await expectError(
        workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], user_id: 'u-9' } as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming),
        OpenAI.RateLimitError,
        { type: 'rate_limit_exceeded' },
      );
      // Refused before the chat service, yet recorded like every authenticated request.
      let refused: Array<Record<string, unknown>> = [];
      for (let i = 0; i < 40 && refused.length === 0; i++) {
        refused = await db.query(`SELECT model, status, error_code, user_id FROM usage_records WHERE workspace_id = $1 AND status = 'error'`, [workspace.id]);
        if (refused.length === 0) await new Promise((resolve) => setTimeout(resolve, 25));
      }
      expect(refused).toEqual([{ model: 'gpt-4o', status: 'error', error_code: 'rate_limit_exceeded', user_id: 'u-9' }]);
    });
  });

  describe('Idempotency-Key', () => {
    const ask = (workspace: TestWorkspace, key: string, content = 'once please') =>
      workspace.client.chat.completions
        .create({ model: 'gpt-4o', messages: [{ role: 'user', content }] }, { headers: { 'Idempotency-Key': key } })
        .withResponse();

    it('returns the stored response to a retry within 24 hours, without calling or charging again', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
      upstream.script({ kind: 'text', text: 'first and only', usage: { prompt_tokens: 100, completion_tokens: 10 } });
      const before = upstream.requests.length;
      const first = await ask(workspace, 'retry-me-1');
      const balanceAfterFirst = (await wallet(workspace)).balanceMillicents;
      const second = await ask(workspace, 'retry-me-1');

      expect(second.data).toEqual(first.data);
      expect(second.response.headers.get('idempotent-replayed')).toBe('true');
      expect(first.response.headers.get('idempotent-replayed')).toBeNull();
      expect(upstream.requests.length - before).toBe(1);
      expect((await wallet(workspace)).balanceMillicents).toBe(balanceAfterFirst);
      expect(balanceAfterFirst).toBe(10_000 - 35);
      await expectWalletConsistent(workspace);
    });

    it('refuses the same key with another body with 409, and keeps keys apart per workspace', async () => {
      const workspace = await t.createWorkspace();
      await ask(workspace, 'shared-key');
      const error = await ask(workspace, 'shared-key', 'something else').catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.ConflictError);
      expect((error as InstanceType<typeof OpenAI.ConflictError>).error).toMatchObject({ type: 'conflict', code: 'idempotency_key_reused' });
      const other = await t.createWorkspace();
      const theirs = await ask(other, 'shared-key', 'something else');
      expect(theirs.response.headers.get('idempotent-replayed')).toBeNull();
    });

    it('runs a retry for real when the first attempt failed (nothing was charged)', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'http_error', status: 400 });
      await expect(ask(workspace, 'after-failure')).rejects.toBeInstanceOf(OpenAI.BadRequestError);
      upstream.script({ kind: 'text', text: 'second time lucky' });
      const retry = await ask(workspace, 'after-failure');
      expect(retry.data.choices[0].message.content).toBe('second time lucky');
    });

    it('lets only one of two concurrent requests with the same key run', async () => {
      const workspace = await t.createWorkspace();
      upstream.script({ kind: 'text', text: 'slow answer', chunkDelayMs: 0 });
      const before = upstream.requests.length;
      const results = await Promise.allSettled([ask(workspace, 'race'), ask(workspace, 'race')]);
      expect(upstream.requests.length - before).toBe(1);
      const fulfilled = results.filter((r) => r.status === 'fulfilled');
      expect(fulfilled.length).toBeGreaterThanOrEqual(1);
      for (const r of results) {
        if (r.status === 'rejected') expect((r.reason as { error?: { code?: string } }).error?.code).toBe('idempotent_request_in_progress');
      }
    });

    it('refuses a malformed key', async () => {
      const workspace = await t.createWorkspace();
      const error = await ask(workspace, 'x'.repeat(300)).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    });
  });

  describe('money under concurrency', () => {
    it('never holds more than the wallet has, and settles every request exactly once', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 2_000 });
      upstream.setDefault({ kind: 'text', text: 'ok', usage: { prompt_tokens: 100, completion_tokens: 10 } });
      const results = await Promise.allSettled(
        Array.from({ length: 30 }, () =>
          workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'x' }], max_tokens: 400 }),
        ),
      );
      upstream.setDefault({ kind: 'text', text: 'Hello from the fake upstream.' });
      const succeeded = results.filter((r) => r.status === 'fulfilled').length;
      const refused = results.filter((r) => r.status === 'rejected' && (r.reason as { status?: number }).status === 402).length;
      expect(succeeded + refused).toBe(30);
      expect(succeeded).toBeGreaterThan(0);
      // Each success costs 100 x 250000 + 10 x 1000000 micro-millicents = 35 millicents.
      expect((await wallet(workspace)).balanceMillicents).toBe(2_000 - 35 * succeeded);
      await expectWalletConsistent(workspace);
    });

    it('charges whole millicents and carries the fraction, so charges never drift from costs by a millicent', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
      // gpt-4o-mini: 7 x 15000 + 3 x 60000 = 285000 micro-millicents = 0.285 millicents a request.
      upstream.setDefault({ kind: 'text', text: 'ok', usage: { prompt_tokens: 7, completion_tokens: 3 } });
      for (let i = 0; i < 10; i++) {
        await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'x' }] });
      }
      upstream.setDefault({ kind: 'text', text: 'Hello from the fake upstream.' });
      const charged = 10_000 - (await wallet(workspace)).balanceMillicents;
      expect(charged).toBe(Math.floor(10 * 0.285)); // 2.85 -> 2 taken, 0.85 carried
      const [{ carry }] = await db.query('SELECT carry_millicents::text AS carry FROM wallets WHERE workspace_id = $1', [workspace.id]);
      expect(Number(carry)).toBeCloseTo(0.85, 9);
      await expectWalletConsistent(workspace);
    });

    it('gives back the money of holds that expired (a crashed request)', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
      const walletService = t.app.get(WalletService);
      const hold = await walletService.hold(workspace.id, 'req_crashed', 400, 60_000);
      expect(hold).not.toBeNull();
      expect(await wallet(workspace)).toMatchObject({ reservedMillicents: 400, availableMillicents: 600 });
      await db.query(`UPDATE wallet_holds SET expires_at = now() - interval '1 second' WHERE id = $1`, [hold!.id]);
      expect(await walletService.releaseExpiredHolds()).toBeGreaterThanOrEqual(1);
      expect(await wallet(workspace)).toEqual({ balanceMillicents: 1_000, reservedMillicents: 0, availableMillicents: 1_000 });
    });
  });
});

async function waitFor(condition: () => Promise<boolean> | boolean, timeoutMs = 5_000): Promise<void> {
  const started = Date.now();
  while (!(await condition())) {
    if (Date.now() - started > timeoutMs) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

