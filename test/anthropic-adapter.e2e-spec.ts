import { Cancellation } from '../src/common/cancellation';
import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import { DEFAULT_CATALOG } from '../src/models/model-catalog';
import { AnthropicAdapter } from '../src/providers/anthropic/anthropic.adapter';
import type { ChatCompletionChunk, ProviderRequest } from '../src/providers/provider-adapter';
import { isAbort, isRetryable, toUpstreamApiError } from '../src/providers/upstream-errors';
import { type FakeAnthropic, httpError, rateLimited, startFakeAnthropic, textReply, toolUseReply } from './fakes/fake-anthropic';
import { startTestApp, type TestApp, type TestWorkspace } from './support/test-app';

/** The real AnthropicAdapter (and the real SDK) against a fake Messages API on 127.0.0.1. */

const API_KEY = 'sk-ant-test-key';
// Haiku: the SDK prints a deprecation warning on every claude-sonnet-4-5 call.
const MODEL = DEFAULT_CATALOG.find((m) => m.id === 'claude-haiku-4-5')!;
const PNG = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

let fake: FakeAnthropic;
let adapter: AnthropicAdapter;

beforeAll(async () => {
  fake = await startFakeAnthropic({ apiKey: API_KEY });
  adapter = new AnthropicAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 5_000 });
});
afterAll(() => fake.close());
beforeEach(() => fake.reset());

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return {
    model: MODEL,
    messages: [{ role: 'user', content: 'Hello' }],
    maxTokens: 256,
    extra: {},
    cancellation: new Cancellation(),
    ...overrides,
  };
}

async function collect(stream: AsyncIterable<ChatCompletionChunk>): Promise<{ chunks: ChatCompletionChunk[]; error?: unknown }> {
  const chunks: ChatCompletionChunk[] = [];
  try {
    for await (const chunk of stream) chunks.push(chunk);
    return { chunks };
  } catch (error) {
    return { chunks, error };
  }
}

function failureOf(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => {
      throw new Error('expected a failure');
    },
    (error: unknown) => error,
  );
}

describe('AnthropicAdapter request translation', () => {
  it('sends system prompt, messages, images, tool calls, tool results, tools and tool_choice as Anthropic expects', async () => {
    fake.script(textReply('Demain : 20 °C.'));
    await adapter.complete(
      request({
        messages: [
          { role: 'system', content: 'You are terse.' },
          { role: 'developer', content: [{ type: 'text', text: 'Answer in French.' }] },
          {
            role: 'user',
            content: [
              { type: 'text', text: 'What is in this picture, and what is the weather in Paris?' },
              { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG}` } },
              { type: 'image_url', image_url: { url: 'https://example.com/cat.jpg', detail: 'high' } },
            ],
          },
          {
            role: 'assistant',
            content: 'A cat. Let me check the weather.',
            tool_calls: [
              { id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
              { id: 'call_2', type: 'function', function: { name: 'get_time', arguments: 'not json' } },
            ],
          },
          { role: 'tool', tool_call_id: 'call_1', content: '{"temp_c":18}' },
          { role: 'tool', tool_call_id: 'call_2', content: [{ type: 'text', text: '12:00' }] },
          { role: 'user', content: 'Thanks. And tomorrow?' },
        ],
        tools: [
          {
            type: 'function',
            function: {
              name: 'get_weather',
              description: 'Weather for a city',
              parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
            },
          },
          { type: 'function', function: { name: 'get_time' } },
        ],
        temperature: 1.6,
        maxTokens: 300,
        extra: {
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
          parallel_tool_calls: false,
          top_p: 0.9,
          stop: 'END',
          user: 'user-42',
          seed: 7,
          frequency_penalty: 0.5,
          logprobs: false,
        },
      }),
    );

    expect(fake.requests).toHaveLength(1);
    const [sent] = fake.requests;
    expect(sent.method).toBe('POST');
    expect(sent.path).toBe('/v1/messages');
    expect(sent.headers['x-api-key']).toBe(API_KEY);
    expect(sent.headers['anthropic-version']).toBe('2023-06-01');
    expect(sent.headers.authorization).toBeUndefined();
    expect(sent.body).toEqual({
      model: 'claude-haiku-4-5',
      max_tokens: 300,
      stream: false,
      system: 'You are terse.\n\nAnswer in French.',
      messages: [
        {
          role: 'user',
          content: [
            { type: 'text', text: 'What is in this picture, and what is the weather in Paris?' },
            { type: 'image', source: { type: 'base64', media_type: 'image/png', data: PNG } },
            { type: 'image', source: { type: 'url', url: 'https://example.com/cat.jpg' } },
          ],
        },
        {
          role: 'assistant',
          content: [
            { type: 'text', text: 'A cat. Let me check the weather.' },
            { type: 'tool_use', id: 'call_1', name: 'get_weather', input: { city: 'Paris' } },
            { type: 'tool_use', id: 'call_2', name: 'get_time', input: {} },
          ],
        },
        {
          // Both tool messages and the next user message make one user turn, tool results first.
          role: 'user',
          content: [
            { type: 'tool_result', tool_use_id: 'call_1', content: '{"temp_c":18}' },
            { type: 'tool_result', tool_use_id: 'call_2', content: [{ type: 'text', text: '12:00' }] },
            { type: 'text', text: 'Thanks. And tomorrow?' },
          ],
        },
      ],
      tools: [
        {
          name: 'get_weather',
          description: 'Weather for a city',
          input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
        },
        { name: 'get_time', input_schema: { type: 'object' } },
      ],
      tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true },
      temperature: 1,
      stop_sequences: ['END'],
      metadata: { user_id: 'user-42' },
    });
    // The fake checks the Messages API's rules (alternation, tool_use/tool_result pairing, ...): it answered.
    expect(sent.status).toBe(200);
  });

  it.each([
    ['auto', { type: 'auto' }],
    ['none', { type: 'none' }],
    ['required', { type: 'any' }],
  ])('maps tool_choice %s', async (choice, expected) => {
    fake.script(textReply('ok'));
    await adapter.complete(
      request({ tools: [{ type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {} } } }], extra: { tool_choice: choice } }),
    );
    expect(fake.requests[0].body.tool_choice).toEqual(expected);
  });

  it('names the upstream model to Anthropic and the catalog model to the client', async () => {
    fake.script(textReply('ok'));
    const model = { ...MODEL, id: 'house-claude', upstreamModel: 'claude-haiku-4-5-20251001' };
    const completion = await adapter.complete(request({ model }));
    expect(fake.requests[0].body.model).toBe('claude-haiku-4-5-20251001');
    expect(completion.model).toBe('house-claude');
  });

  it('sends top_p without a temperature, and no tool_choice without tools', async () => {
    fake.script(textReply('ok'));
    await adapter.complete(request({ extra: { top_p: 0.5, tool_choice: 'auto', stop: ['A', 'B'] } }));
    const body = fake.requests[0].body;
    expect(body.top_p).toBe(0.5);
    expect(body.temperature).toBeUndefined();
    expect(body.tool_choice).toBeUndefined();
    expect(body.tools).toBeUndefined();
    expect(body.stop_sequences).toEqual(['A', 'B']);
    expect(body.messages).toEqual([{ role: 'user', content: 'Hello' }]);
  });
});

describe('AnthropicAdapter content parts', () => {
  const PDF = 'JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK';

  it("sends OpenAI's file part (a base64 PDF with a filename) as a document block", async () => {
    fake.script(textReply('A one-page PDF.'));
    const messages: ProviderRequest['messages'] = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'Summarise this.' },
          { type: 'file', file: { file_data: `data:application/pdf;base64,${PDF}`, filename: 'report.pdf' } },
        ],
      },
    ];
    expect(() => adapter.checkRequest({}, messages)).not.toThrow();
    await adapter.complete(request({ messages }));
    expect(fake.requests[0].body.messages[0].content).toEqual([
      { type: 'text', text: 'Summarise this.' },
      { type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: PDF } },
    ]);
  });

  it.each([
    [{ type: 'input_audio', input_audio: { data: 'UklGRg==', format: 'wav' } }, 'messages.0.content.1', /audio/],
    [{ type: 'file', file: { file_id: 'file-abc' } }, 'messages.0.content.1.file.file_id', /stores no files/],
    [{ type: 'file', file: { file_data: 'data:text/plain;base64,SGk=', filename: 'a.txt' } }, 'messages.0.content.1.file.file_data', /PDF/],
  ])('refuses %j at check time with a 400 naming the part, and never calls Claude', async (part, param, message) => {
    const messages = [{ role: 'user', content: [{ type: 'text', text: 'Listen.' }, part] }] as ProviderRequest['messages'];
    const refusal = failureOfSync(() => adapter.checkRequest({}, messages));
    expect(refusal).toMatchObject({ type: 'bad_request', param, code: 'unsupported_content', message: expect.stringMatching(message) });
    // The call refuses it as well, should a caller skip the check.
    expect(toUpstreamApiError(await failureOf(adapter.complete(request({ messages }))), 'anthropic')).toMatchObject({ param, code: 'unsupported_content' });
    expect(fake.requests).toHaveLength(0);
  });

  it('streams usage with cache reads as cached_tokens, and cache writes inside prompt_tokens, detailed as cache_write_tokens', async () => {
    fake.script(textReply('Hi.', { usage: { input_tokens: 10, cache_read_input_tokens: 300, cache_creation_input_tokens: 40, output_tokens: 2 } }));
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(error).toBeUndefined();
    expect(chunks[chunks.length - 1].usage).toEqual({
      prompt_tokens: 350,
      completion_tokens: 2,
      total_tokens: 352,
      prompt_tokens_details: { cached_tokens: 300, cache_write_tokens: 40 },
    });
  });
});

function failureOfSync(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a failure');
}

describe('AnthropicAdapter.complete', () => {
  it('turns a text answer into a chat completion with usage including cached tokens', async () => {
    fake.script(
      textReply('Bonjour !', {
        id: 'msg_01text',
        usage: { input_tokens: 20, cache_read_input_tokens: 100, cache_creation_input_tokens: 5, output_tokens: 7 },
      }),
    );
    const before = Math.floor(Date.now() / 1000);
    const completion = await adapter.complete(request());
    expect(completion).toEqual({
      id: 'msg_01text',
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'claude-haiku-4-5',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Bonjour !', refusal: null }, finish_reason: 'stop', logprobs: null }],
      usage: { prompt_tokens: 125, completion_tokens: 7, total_tokens: 132, prompt_tokens_details: { cached_tokens: 100, cache_write_tokens: 5 } },
    });
    expect(completion.created).toBeGreaterThanOrEqual(before);
  });

  it('accepts a large max_tokens without streaming (the SDK only refuses that without an explicit timeout)', async () => {
    fake.script(textReply('ok'));
    await adapter.complete(request({ maxTokens: MODEL.maxOutputTokens }));
    expect(fake.requests[0].body.max_tokens).toBe(64_000);
  });

  it.each([
    ['max_tokens', 'length'],
    ['stop_sequence', 'stop'],
    ['end_turn', 'stop'],
    ['refusal', 'content_filter'],
  ])('maps stop_reason %s to finish_reason %s', async (stopReason, finishReason) => {
    fake.script(textReply('Some text', { stopReason }));
    const completion = await adapter.complete(request());
    expect(completion.choices[0].finish_reason).toBe(finishReason);
  });

  it('turns tool_use blocks into tool_calls', async () => {
    fake.script(
      toolUseReply(
        [
          { id: 'toolu_1', name: 'get_weather', input: { city: 'Paris', days: 2 } },
          { id: 'toolu_2', name: 'get_time', input: {} },
        ],
        { text: 'Checking.', usage: { input_tokens: 50, output_tokens: 30 } },
      ),
    );
    const completion = await adapter.complete(request());
    expect(completion.choices[0]).toEqual({
      index: 0,
      message: {
        role: 'assistant',
        content: 'Checking.',
        refusal: null,
        tool_calls: [
          { id: 'toolu_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris","days":2}' } },
          { id: 'toolu_2', type: 'function', function: { name: 'get_time', arguments: '{}' } },
        ],
      },
      finish_reason: 'tool_calls',
      logprobs: null,
    });
    expect(completion.usage).toEqual({ prompt_tokens: 50, completion_tokens: 30, total_tokens: 80, prompt_tokens_details: { cached_tokens: 0 } });
  });

  it('answers content null when there are only tool calls', async () => {
    fake.script(toolUseReply([{ name: 'lookup', input: { q: 'x' } }]));
    const completion = await adapter.complete(request());
    expect(completion.choices[0].message.content).toBeNull();
    expect(completion.choices[0].message.tool_calls).toHaveLength(1);
  });
});

describe('AnthropicAdapter.stream', () => {
  it('translates a text stream chunk by chunk, ending with the usage chunk', async () => {
    fake.script(
      textReply('Hello there, my friend!', {
        id: 'msg_01stream',
        usage: { input_tokens: 11, cache_read_input_tokens: 4, output_tokens: 6 },
      }),
    );
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(error).toBeUndefined();
    expect(fake.requests[0].body.stream).toBe(true);

    const [first, ...rest] = chunks;
    expect(first).toEqual({
      id: 'msg_01stream',
      object: 'chat.completion.chunk',
      created: expect.any(Number),
      model: 'claude-haiku-4-5',
      choices: [{ index: 0, delta: { role: 'assistant', content: '' }, finish_reason: null, logprobs: null }],
    });
    const contents = rest.filter((c) => c.choices[0]?.delta.content).map((c) => c.choices[0].delta.content);
    expect(contents).toEqual(['Hello ', 'there, ', 'my ', 'friend!']);
    const finishing = chunks.filter((c) => c.choices[0]?.finish_reason);
    expect(finishing).toHaveLength(1);
    expect(finishing[0].choices[0]).toEqual({ index: 0, delta: {}, finish_reason: 'stop', logprobs: null });
    const last = chunks[chunks.length - 1];
    expect(last.choices).toEqual([]);
    expect(last.usage).toEqual({ prompt_tokens: 15, completion_tokens: 6, total_tokens: 21, prompt_tokens_details: { cached_tokens: 4 } });
    // One id, created and model throughout.
    expect(new Set(chunks.map((c) => `${c.id}|${c.created}|${c.model}`)).size).toBe(1);
    expect(chunks.indexOf(finishing[0])).toBe(chunks.length - 2);
  });

  it('streams tool calls with ids, names and arguments that reassemble to valid JSON', async () => {
    const weatherInput = { city: 'Paris', units: 'metric', days: [1, 2, 3], note: 'quotes " and \\ backslashes' };
    fake.script(
      toolUseReply(
        [
          { id: 'toolu_a', name: 'get_weather', input: weatherInput },
          { id: 'toolu_b', name: 'get_time', input: {} },
        ],
        { text: 'Let me look.', usage: { input_tokens: 40, output_tokens: 25 }, stream: { chunkSize: 7 } },
      ),
    );
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(error).toBeUndefined();

    const deltas = chunks.flatMap((c) => c.choices.flatMap((choice) => choice.delta.tool_calls ?? []));
    const calls = new Map<number, { id?: string; name?: string; arguments: string }>();
    for (const delta of deltas) {
      const call = calls.get(delta.index) ?? { arguments: '' };
      if (delta.id) {
        expect(call.id).toBeUndefined(); // id, type and name come once, in the call's first delta
        expect(delta.type).toBe('function');
        call.id = delta.id;
        call.name = delta.function?.name;
      }
      call.arguments += delta.function?.arguments ?? '';
      calls.set(delta.index, call);
    }
    // Indexes count tool calls (0, 1), not content blocks (the text block is block 0).
    expect([...calls.keys()]).toEqual([0, 1]);
    expect(calls.get(0)).toMatchObject({ id: 'toolu_a', name: 'get_weather' });
    expect(JSON.parse(calls.get(0)!.arguments)).toEqual(weatherInput);
    expect(calls.get(1)).toMatchObject({ id: 'toolu_b', name: 'get_time' });
    expect(JSON.parse(calls.get(1)!.arguments)).toEqual({});
    expect(deltas.filter((d) => d.index === 0).length).toBeGreaterThan(3); // really streamed in pieces

    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('Let me look.');
    expect(chunks.find((c) => c.choices[0]?.finish_reason)!.choices[0].finish_reason).toBe('tool_calls');
    expect(chunks[chunks.length - 1].usage).toMatchObject({ prompt_tokens: 40, completion_tokens: 25, total_tokens: 65 });
  });

  it('throws an error event from the middle of a stream, mapped by its error type', async () => {
    fake.script(textReply('one two three four five six', { stream: { failAfter: 5, failure: 'error_event' } }));
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(chunks[0].choices[0].delta.role).toBe('assistant');
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('one two ');
    expect(error).toBeInstanceOf(Anthropic.APIError);
    expect((error as InstanceType<typeof Anthropic.APIError>).status).toBe(529);
    expect((error as Error).message).toContain('Overloaded');
    const mapped = toUpstreamApiError(error, 'anthropic');
    expect(mapped).toMatchObject({ type: 'upstream_error', code: 'upstream_failed' });
    expect(mapped.message).toContain('HTTP 529');
  });

  it('maps an in-stream rate limit error like the HTTP one', async () => {
    fake.script(textReply('one two three', { stream: { failAfter: 3, failure: 'error_event', error: { type: 'rate_limit_error', message: 'Slow down' } } }));
    const { error } = await collect(adapter.stream(request()));
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'service_unavailable', code: 'upstream_rate_limited' });
  });

  it('throws when the connection breaks mid-stream', async () => {
    fake.script(textReply('one two three four five six', { stream: { failAfter: 5, failure: 'destroy' } }));
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(chunks.length).toBeGreaterThan(1);
    expect(error).toBeDefined();
    expect(chunks.some((c) => c.usage)).toBe(false);
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });

  it('throws when the stream ends without message_stop', async () => {
    fake.script(textReply('one two three four five six', { stream: { failAfter: 5, failure: 'end' } }));
    const { error } = await collect(adapter.stream(request()));
    expect((error as Error).message).toMatch(/ended before message_stop/);
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });

  it('throws on a malformed event', async () => {
    fake.script(textReply('one two three', { stream: { failAfter: 4, failure: 'malformed' } }));
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(chunks.length).toBeGreaterThan(0);
    expect(error).toBeInstanceOf(SyntaxError);
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });

  it('stops a slow stream promptly when the signal aborts, and the upstream connection closes', async () => {
    fake.script(textReply('word '.repeat(100).trim(), { stream: { delayMs: 100 } }));
    const controller = new Cancellation();
    const iterator = adapter.stream(request({ cancellation: controller }))[Symbol.asyncIterator]();
    expect((await iterator.next()).value.choices[0].delta.role).toBe('assistant');
    expect((await iterator.next()).done).toBe(false);

    const abortedAt = Date.now();
    controller.abort();
    const error = await failureOf(iterator.next());
    // Well before the ~10 s the stream would still take: half of it, room for a loaded machine.
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
    expect(isAbort(error)).toBe(true);

    // The fake sees the client go away and stops sending.
    await waitFor(() => fake.requests[0].clientClosedAt !== undefined);
    const sent = fake.requests[0].eventsSent;
    expect(sent).toBeLessThan(10);
    await new Promise((resolve) => setTimeout(resolve, 250));
    expect(fake.requests[0].eventsSent).toBe(sent);
  });

  it('refuses to start with an already aborted signal', async () => {
    const controller = new Cancellation();
    controller.abort();
    const { chunks, error } = await collect(adapter.stream(request({ cancellation: controller })));
    expect(chunks).toEqual([]);
    expect(isAbort(error)).toBe(true);
    expect(fake.requests).toHaveLength(0);
  });
});

describe('AnthropicAdapter errors', () => {
  const cases: Array<[string, () => ReturnType<typeof httpError>, Record<string, unknown>]> = [
    ['400', () => httpError(400, { message: 'messages: text content blocks must be non-empty' }), { type: 'bad_request', code: 'upstream_bad_request' }],
    ['401', () => httpError(401), { type: 'upstream_error', code: 'upstream_auth_failed' }],
    ['429', () => rateLimited(7), { type: 'service_unavailable', code: 'upstream_rate_limited', headers: { 'Retry-After': '7' } }],
    ['500', () => httpError(500), { type: 'upstream_error', code: 'upstream_failed' }],
    ['529', () => httpError(529), { type: 'upstream_error', code: 'upstream_failed' }],
  ];

  it.each(cases)('HTTP %s from complete() maps to the right API error', async (status, scenario, expected) => {
    fake.script(scenario());
    const error = await failureOf(adapter.complete(request()));
    expect((error as { status?: number }).status).toBe(Number(status));
    const mapped = toUpstreamApiError(error, 'anthropic');
    expect(mapped).toMatchObject(expected);
    if (status === '400') expect(mapped.message).toContain('text content blocks must be non-empty');
    expect(isRetryable(error)).toBe(['429', '500', '529'].includes(status));
  });

  it.each(cases)('HTTP %s from stream() fails before the first chunk with the same mapping', async (_status, scenario, expected) => {
    fake.script(scenario());
    const { chunks, error } = await collect(adapter.stream(request()));
    expect(chunks).toEqual([]);
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject(expected);
  });

  it('sends the configured key: a wrong one is refused with 401', async () => {
    const wrong = new AnthropicAdapter({ apiKey: 'sk-ant-wrong', baseUrl: fake.url, timeoutMs: 5_000 });
    const error = await failureOf(wrong.complete(request()));
    expect(fake.requests[0].headers['x-api-key']).toBe('sk-ant-wrong');
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'upstream_error', code: 'upstream_auth_failed' });
  });

  it('times out after timeoutMs as an upstream timeout', async () => {
    const impatient = new AnthropicAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 200 });
    fake.script(textReply('late', { delayMs: 10_000 }));
    const startedAt = Date.now();
    const error = await failureOf(impatient.complete(request()));
    // Before the answer (10 s): half of that, room for a loaded machine.
    expect(Date.now() - startedAt).toBeLessThan(5_000);
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'upstream_timeout' });
  });

  it('aborts a pending complete() promptly', async () => {
    fake.script(textReply('late', { delayMs: 10_000 }));
    const controller = new Cancellation();
    const pending = failureOf(adapter.complete(request({ cancellation: controller })));
    await fake.waitForRequests(1);
    const abortedAt = Date.now();
    controller.abort();
    const error = await pending;
    // Well before the answer's 10 s: half of it, room for a loaded machine.
    expect(Date.now() - abortedAt).toBeLessThan(5_000);
    expect(isAbort(error)).toBe(true);
  });

  it('refuses n > 1 before calling Anthropic', async () => {
    const error = await failureOf(adapter.complete(request({ extra: { n: 2 } })));
    expect(toUpstreamApiError(error, 'anthropic')).toMatchObject({ type: 'bad_request', param: 'n' });
    expect(fake.requests).toHaveLength(0);
  });
});

async function waitFor(condition: () => boolean, timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error('condition not met in time');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe('Claude through the service, with the OpenAI SDK', () => {
  let t: TestApp;
  let workspace: TestWorkspace;
  let app: FakeAnthropic;
  const Place = z.object({ city: z.string(), population: z.number() });

  beforeAll(async () => {
    app = await startFakeAnthropic({ apiKey: API_KEY });
    t = await startTestApp({ config: { providers: { anthropic: { apiKey: API_KEY, baseUrl: app.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 } });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await app.close();
  });
  beforeEach(() => app.reset());

  it('answers a json_schema response_format (.parse) through a forced tool, unwrapped into the content', async () => {
    app.script(toolUseReply([{ name: 'place', input: { city: 'Oslo', population: 709_000 } }], { usage: { input_tokens: 50, output_tokens: 12 } }));
    const completion = await workspace.client.chat.completions.parse({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'The capital of Norway?' }],
      response_format: zodResponseFormat(Place, 'place'),
    });
    const sent = app.requests[0].body;
    expect(sent.tools).toEqual([expect.objectContaining({ name: 'place', input_schema: expect.objectContaining({ type: 'object', required: ['city', 'population'] }) })]);
    expect(sent.tool_choice).toEqual({ type: 'tool', name: 'place', disable_parallel_tool_use: true });
    expect(completion.choices[0].finish_reason).toBe('stop');
    expect(completion.choices[0].message.tool_calls ?? []).toEqual([]);
    expect(completion.choices[0].message.parsed).toEqual({ city: 'Oslo', population: 709_000 });
  });

  it('streams a json_schema answer as content deltas, finishing with stop', async () => {
    app.script(toolUseReply([{ name: 'place', input: { city: 'Oslo', population: 709_000 } }]));
    const stream = await workspace.client.chat.completions.create({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'The capital of Norway?' }],
      response_format: zodResponseFormat(Place, 'place'),
      stream: true,
    });
    let content = '';
    let finish: string | null = null;
    let toolCalls = 0;
    for await (const chunk of stream) {
      content += chunk.choices[0]?.delta?.content ?? '';
      toolCalls += chunk.choices[0]?.delta?.tool_calls?.length ?? 0;
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    expect(JSON.parse(content)).toEqual({ city: 'Oslo', population: 709_000 });
    expect(toolCalls).toBe(0);
    expect(finish).toBe('stop');
  });

  it('answers json_object mode with a JSON object', async () => {
    app.script(toolUseReply([{ name: 'json_answer', input: { answer: 42 } }]));
    const completion = await workspace.client.chat.completions.create({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'Answer in JSON: what is 6 x 7?' }],
      response_format: { type: 'json_object' },
    });
    expect(JSON.parse(completion.choices[0].message.content!)).toEqual({ answer: 42 });
    expect(app.requests[0].body.tool_choice).toMatchObject({ type: 'tool', name: 'json_answer' });
  });

  it('lets Claude call the client tool or answer in the format when both are on offer', async () => {
    app.script(toolUseReply([{ name: 'get_population', input: { city: 'Oslo' }, id: 'toolu_pop' }]));
    const completion = await workspace.client.chat.completions.create({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'How many people live in Oslo?' }],
      tools: [{ type: 'function', function: { name: 'get_population', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      response_format: zodResponseFormat(Place, 'place'),
    });
    expect(app.requests[0].body.tool_choice).toEqual({ type: 'any' });
    expect(completion.choices[0]).toMatchObject({
      finish_reason: 'tool_calls',
      message: { content: null, tool_calls: [{ id: 'toolu_pop', function: { name: 'get_population', arguments: '{"city":"Oslo"}' } }] },
    });
  });

  it('maps reasoning_effort onto a thinking budget (docs/api.md), below max_tokens, and drops the sampling Claude refuses with it', async () => {
    const thinkingFor = async (fields: Record<string, unknown>) => {
      app.reset();
      const completion = await workspace.client.chat.completions.create({
        model: 'claude-haiku-4-5',
        messages: [{ role: 'user', content: 'Think, then answer.' }],
        ...fields,
      } as never);
      expect((completion as { choices: Array<{ message: { content: string } }> }).choices[0].message.content).toBeTruthy();
      return app.requests[0].body;
    };
    expect(await thinkingFor({ reasoning_effort: 'medium', max_tokens: 16_000 })).toMatchObject({ max_tokens: 16_000, thinking: { type: 'enabled', budget_tokens: 8192 } });
    const high = await thinkingFor({ reasoning_effort: 'high', max_tokens: 4000, temperature: 0.2, top_p: 0.5 });
    expect(high.thinking).toEqual({ type: 'enabled', budget_tokens: 3999 });
    expect(high).not.toHaveProperty('temperature');
    expect(high).not.toHaveProperty('top_p');
    // No room for the smallest budget Anthropic takes: no thinking, never a 400.
    expect(await thinkingFor({ reasoning_effort: 'low', max_tokens: 1000 })).not.toHaveProperty('thinking');
    expect(await thinkingFor({ temperature: 0.2 })).not.toHaveProperty('thinking');
  });

  it.each([
    [{ logprobs: true }, 'logprobs'],
    [{ logprobs: true, top_logprobs: 2 }, 'logprobs'],
    [{ n: 2 }, 'n'],
  ])('refuses %j with a 400 naming the parameter, without calling Claude or charging', async (extra, param) => {
    const wallet = async () => (await fetch(`${t.baseUrl}/v1/wallet`, { headers: { authorization: `Bearer ${workspace.apiKey}` } })).json();
    const before = await wallet();
    const error = await failureOf(
      workspace.client.chat.completions.create({ model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'Hi' }], ...extra }),
    );
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ type: 'bad_request', param, code: 'unsupported_parameter' });
    expect(app.requests).toHaveLength(0);
    expect(await wallet()).toEqual(before);
  });

  it('drops seed, which Claude cannot honour and which changes nothing of the answer shape', async () => {
    app.script(textReply('Hi.'));
    const completion = await workspace.client.chat.completions.create({ model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'Hi' }], seed: 7 });
    expect(completion.choices[0].message.content).toBe('Hi.');
    expect(app.requests[0].body.seed).toBeUndefined();
  });
});
