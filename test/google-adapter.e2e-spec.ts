import Anthropic from '@anthropic-ai/sdk';
import { Cancellation } from '../src/common/cancellation';
import { ApiError } from '../src/common/errors/api-error';
import { DEFAULT_CATALOG, type ModelDefinition } from '../src/models/model-catalog';
import { GoogleAdapter } from '../src/providers/google/google.adapter';
import type { ChatCompletionChunk, ChatMessage, ProviderRequest } from '../src/providers/provider-adapter';
import { isAbort, isRetryable, toUpstreamApiError } from '../src/providers/upstream-errors';
import { startFakeGemini, type FakeGemini } from './fakes/fake-gemini';
import { DataSource } from 'typeorm';
import { startTestApp, type TestApp, type TestWorkspace } from './support/test-app';

/**
 * The Google adapter with the real @google/genai SDK, over HTTP, against a fake Gemini API:
 * what goes out on the wire, what comes back in OpenAI shapes, and how failures surface.
 */
const API_KEY = 'test-gemini-key';
const flash = DEFAULT_CATALOG.find((m) => m.id === 'gemini-2.5-flash')!;
const gemini3: ModelDefinition = { ...flash, id: 'gemini-3-pro', upstreamModel: 'gemini-3-pro-preview' };

const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==';

let fake: FakeGemini;
let adapter: GoogleAdapter;

beforeAll(async () => {
  fake = await startFakeGemini({ apiKey: API_KEY });
  adapter = new GoogleAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 5_000 });
});
afterEach(() => fake.reset());
afterAll(() => fake.close());

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return {
    model: flash,
    messages: [{ role: 'user', content: 'Hello' }],
    maxTokens: 256,
    extra: {},
    cancellation: new Cancellation(),
    ...overrides,
  };
}

async function collect(stream: AsyncIterable<ChatCompletionChunk>): Promise<ChatCompletionChunk[]> {
  const chunks: ChatCompletionChunk[] = [];
  for await (const chunk of stream) chunks.push(chunk);
  return chunks;
}

/** Chunks received before the stream failed, and the failure. */
async function collectUntilError(stream: AsyncIterable<ChatCompletionChunk>): Promise<{ chunks: ChatCompletionChunk[]; error: unknown }> {
  const chunks: ChatCompletionChunk[] = [];
  try {
    for await (const chunk of stream) chunks.push(chunk);
  } catch (error) {
    return { chunks, error };
  }
  throw new Error(`The stream did not fail (${chunks.length} chunks)`);
}

const conversation: ChatMessage[] = [
  { role: 'system', content: 'You are terse.' },
  { role: 'developer', content: [{ type: 'text', text: 'Answer in English.' }] },
  {
    role: 'user',
    content: [
      { type: 'text', text: 'What is in these pictures?' },
      { type: 'image_url', image_url: { url: `data:image/png;base64,${PNG_BASE64}` } },
      { type: 'image_url', image_url: { url: 'https://example.com/photos/cat.PNG?size=large' } },
      { type: 'image_url', image_url: { url: 'https://example.com/render/12345' } },
    ],
  },
  {
    role: 'assistant',
    content: 'Let me look them up.',
    tool_calls: [
      { id: 'call_weather1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { id: 'call_lookup1', type: 'function', function: { name: 'lookup_image', arguments: '{not json' } },
    ],
  },
  { role: 'tool', tool_call_id: 'call_lookup1', content: 'A cat on a sofa.' },
  { role: 'tool', tool_call_id: 'call_weather1', content: [{ type: 'text', text: '{"temperature":21,"sky":"clear"}' }] },
  { role: 'user', content: 'Thanks. Summarise.' },
];

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Current weather of a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  },
};
const lookupTool = { type: 'function' as const, function: { name: 'lookup_image', parameters: { type: 'object', properties: {} } } };

describe('GoogleAdapter request translation (recorded on the wire)', () => {
  it('sends system instruction, roles, images, tool calls and tool results with the right names', async () => {
    fake.script({ answer: { text: 'Summary.' } });
    await adapter.complete(request({ messages: conversation, tools: [weatherTool, lookupTool], maxTokens: 321 }));

    expect(fake.requests).toHaveLength(1);
    const [sent] = fake.requests;
    expect(sent.method).toBe('POST');
    expect(sent.path).toBe('/v1beta/models/gemini-2.5-flash:generateContent');
    expect(sent.apiKey).toBe(API_KEY);
    expect(sent.headers['content-type']).toContain('application/json');
    expect(sent.body!.systemInstruction?.parts).toEqual([{ text: 'You are terse.' }, { text: 'Answer in English.' }]);
    expect(sent.body!.contents).toEqual([
      {
        role: 'user',
        parts: [
          { text: 'What is in these pictures?' },
          { inlineData: { mimeType: 'image/png', data: PNG_BASE64 } },
          { fileData: { fileUri: 'https://example.com/photos/cat.PNG?size=large', mimeType: 'image/png' } },
          { fileData: { fileUri: 'https://example.com/render/12345', mimeType: 'image/jpeg' } },
        ],
      },
      {
        role: 'model',
        parts: [
          { text: 'Let me look them up.' },
          { functionCall: { name: 'get_weather', args: { city: 'Paris' } } },
          { functionCall: { name: 'lookup_image', args: {} } },
        ],
      },
      {
        // Both tool results and the next user message: one user turn.
        role: 'user',
        parts: [
          { functionResponse: { name: 'lookup_image', response: { content: 'A cat on a sofa.' } } },
          { functionResponse: { name: 'get_weather', response: { temperature: 21, sky: 'clear' } } },
          { text: 'Thanks. Summarise.' },
        ],
      },
    ]);
    expect(sent.body!.tools).toEqual([
      {
        functionDeclarations: [
          { name: 'get_weather', description: 'Current weather of a city', parametersJsonSchema: weatherTool.function.parameters },
          { name: 'lookup_image', parametersJsonSchema: { type: 'object', properties: {} } },
        ],
      },
    ]);
    expect(sent.body!.generationConfig).toEqual({ maxOutputTokens: 321 });
    expect(sent.body!.toolConfig).toBeUndefined();
  });

  it('translates tool_choice and the sampling and format extras, and drops OpenAI-only ones', async () => {
    fake.script({ answer: { text: '{}' } });
    const schema = { type: 'object', properties: { answer: { type: 'string' } }, required: ['answer'] };
    await adapter.complete(
      request({
        tools: [weatherTool, lookupTool],
        temperature: 0.3,
        maxTokens: 100,
        extra: {
          tool_choice: { type: 'function', function: { name: 'get_weather' } },
          top_p: 0.9,
          stop: ['END', 'STOP'],
          seed: 42,
          presence_penalty: 0.5,
          frequency_penalty: 0, // OpenAI's default: not sent (several Gemini models refuse penalties)
          response_format: { type: 'json_schema', json_schema: { name: 'answer', schema, strict: true } },
          user: 'end-user-7',
          logit_bias: { 50256: -100 },
          parallel_tool_calls: false,
          store: true,
          metadata: { a: 'b' },
        },
      }),
    );
    const body = fake.requests[0].body!;
    expect(body.toolConfig).toEqual({ functionCallingConfig: { mode: 'ANY', allowedFunctionNames: ['get_weather'] } });
    expect(body.generationConfig).toEqual({
      maxOutputTokens: 100,
      temperature: 0.3,
      topP: 0.9,
      stopSequences: ['END', 'STOP'],
      seed: 42,
      presencePenalty: 0.5,
      responseMimeType: 'application/json',
      responseJsonSchema: schema,
    });
    const sentKeys = Object.keys(body).sort();
    expect(sentKeys).toEqual(['contents', 'generationConfig', 'toolConfig', 'tools']);
  });

  it.each([
    ['auto', { mode: 'AUTO' }],
    ['none', { mode: 'NONE' }],
    ['required', { mode: 'ANY' }],
  ])('maps tool_choice %s', async (toolChoice, expected) => {
    fake.script({ answer: { text: 'ok' } });
    await adapter.complete(request({ tools: [weatherTool], extra: { tool_choice: toolChoice, stop: 'END', response_format: { type: 'json_object' } } }));
    const body = fake.requests[0].body!;
    expect(body.toolConfig).toEqual({ functionCallingConfig: expected });
    expect(body.generationConfig).toMatchObject({ stopSequences: ['END'], responseMimeType: 'application/json' });
  });

  it('gives replayed function calls the documented signature placeholder on Gemini 3, on the first call of a turn only', async () => {
    fake.script({ answer: { text: 'ok' } });
    await adapter.complete(request({ model: gemini3, messages: conversation.slice(3, 6), tools: [weatherTool, lookupTool] }));
    expect(fake.requests[0].path).toBe('/v1beta/models/gemini-3-pro-preview:generateContent');
    const modelTurn = fake.requests[0].body!.contents![0];
    expect(modelTurn.parts).toEqual([
      { text: 'Let me look them up.' },
      { functionCall: { name: 'get_weather', args: { city: 'Paris' } }, thoughtSignature: 'skip_thought_signature_validator' },
      { functionCall: { name: 'lookup_image', args: {} } },
    ]);
  });

  it('refuses a tool message that answers no earlier tool call, without calling Gemini', async () => {
    const error = await adapter
      .complete(request({ messages: [{ role: 'user', content: 'hi' }, { role: 'tool', tool_call_id: 'call_nowhere', content: 'x' }] }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'bad_request', param: 'messages.1.tool_call_id' });
    expect(fake.requests).toHaveLength(0);
  });
});

describe('GoogleAdapter content parts, logprobs and usage details', () => {
  const PDF = 'JVBERi0xLjQKJcfsj6IKMSAwIG9iago8PD4+CmVuZG9iagp0cmFpbGVyCjw8Pj4KJSVFT0YK';

  it("sends OpenAI's file (PDF) and input_audio parts inline, with their MIME types", async () => {
    fake.script({ answer: { text: 'A report and a greeting.' } });
    const messages = [
      {
        role: 'user',
        content: [
          { type: 'text', text: 'What is in these?' },
          { type: 'file', file: { file_data: `data:application/pdf;base64,${PDF}`, filename: 'report.pdf' } },
          { type: 'input_audio', input_audio: { data: 'UklGRiQAAABXQVZF', format: 'wav' } },
          { type: 'input_audio', input_audio: { data: 'SUQzBAAAAAAA', format: 'mp3' } },
        ],
      },
    ] as ChatMessage[];
    expect(() => adapter.checkRequest({}, messages)).not.toThrow();
    await adapter.complete(request({ messages }));
    expect(fake.requests[0].body!.contents).toEqual([
      {
        role: 'user',
        parts: [
          { text: 'What is in these?' },
          { inlineData: { mimeType: 'application/pdf', data: PDF } },
          { inlineData: { mimeType: 'audio/wav', data: 'UklGRiQAAABXQVZF' } },
          { inlineData: { mimeType: 'audio/mp3', data: 'SUQzBAAAAAAA' } },
        ],
      },
    ]);
  });

  it.each([
    [{ type: 'file', file: { file_id: 'file-abc' } }, 'messages.0.content.0.file.file_id'],
    [{ type: 'file', file: { file_data: 'https://example.com/a.pdf' } }, 'messages.0.content.0.file.file_data'],
  ])('refuses %j at check time with a 400 naming the part, and never calls Gemini', async (part, param) => {
    const messages = [{ role: 'user', content: [part] }] as ChatMessage[];
    let refusal: unknown;
    try {
      adapter.checkRequest({}, messages);
    } catch (error) {
      refusal = error;
    }
    expect(refusal).toMatchObject({ type: 'bad_request', param, code: 'unsupported_content' });
    const error = await adapter.complete(request({ messages })).catch((e: unknown) => e);
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ param, code: 'unsupported_content' });
    expect(fake.requests).toHaveLength(0);
  });

  it('refuses audio output before calling Gemini', () => {
    expect(() => adapter.checkRequest({ modalities: ['text', 'audio'] })).toThrow(expect.objectContaining({ param: 'modalities', code: 'unsupported_parameter' }));
  });

  const LOGPROBS = [
    { token: 'Hello', logProbability: -0.01, top: [{ token: 'Hello', logProbability: -0.01 }, { token: 'Hi', logProbability: -4.6 }] },
    { token: ' world', logProbability: -0.2, top: [{ token: ' world', logProbability: -0.2 }, { token: ' there', logProbability: -1.7 }] },
  ];
  const OPENAI_LOGPROBS = {
    content: [
      {
        token: 'Hello',
        logprob: -0.01,
        bytes: [72, 101, 108, 108, 111],
        top_logprobs: [
          { token: 'Hello', logprob: -0.01, bytes: [72, 101, 108, 108, 111] },
          { token: 'Hi', logprob: -4.6, bytes: [72, 105] },
        ],
      },
      {
        token: ' world',
        logprob: -0.2,
        bytes: [32, 119, 111, 114, 108, 100],
        top_logprobs: [
          { token: ' world', logprob: -0.2, bytes: [32, 119, 111, 114, 108, 100] },
          { token: ' there', logprob: -1.7, bytes: [32, 116, 104, 101, 114, 101] },
        ],
      },
    ],
    refusal: null,
  };

  it('asks Gemini for logprobs and top_logprobs, and answers them in OpenAI shape', async () => {
    fake.script({ answer: { text: 'Hello world', logprobs: LOGPROBS } });
    const completion = await adapter.complete(request({ extra: { logprobs: true, top_logprobs: 2 } }));
    expect(fake.requests[0].body!.generationConfig).toMatchObject({ responseLogprobs: true, logprobs: 2 });
    expect(completion.choices[0].logprobs).toEqual(OPENAI_LOGPROBS);
  });

  it('streams logprobs on the chunks that carry them', async () => {
    fake.script({ answer: { text: ['Hello', ' world'], logprobs: LOGPROBS } });
    const chunks = await collect(adapter.stream(request({ extra: { logprobs: true, top_logprobs: 2 } })));
    const content = chunks.flatMap((chunk) => chunk.choices.flatMap((c) => c.logprobs?.content ?? []));
    expect(content).toEqual(OPENAI_LOGPROBS.content);
  });

  it('sends no logprobs settings, and answers none, when logprobs is not asked for', async () => {
    fake.script({ answer: { text: 'Hello world', logprobs: LOGPROBS } });
    const completion = await adapter.complete(request({ extra: { logprobs: false, top_logprobs: 0 } }));
    expect(fake.requests[0].body!.generationConfig!.responseLogprobs).toBeUndefined();
    expect(completion.choices[0].logprobs).toBeNull();
  });

  it('streams usage with cached tokens and thoughts (counted in completion_tokens, as reasoning_tokens)', async () => {
    fake.script({
      answer: { thought: 'Hmm.', text: 'Hi there', usage: { promptTokenCount: 100, candidatesTokenCount: 20, thoughtsTokenCount: 30, cachedContentTokenCount: 40 } },
    });
    const chunks = await collect(adapter.stream(request()));
    expect(chunks[chunks.length - 1].usage).toEqual({
      prompt_tokens: 100,
      completion_tokens: 50,
      total_tokens: 150,
      prompt_tokens_details: { cached_tokens: 40 },
      completion_tokens_details: { reasoning_tokens: 30 },
    });
  });
});

describe('GoogleAdapter non-streaming answers', () => {
  it('returns text as an OpenAI completion, without thoughts, with cached and thinking tokens in usage', async () => {
    fake.script({
      answer: {
        thought: 'The user greets me; I should greet back.',
        text: 'Hello there!',
        responseId: 'resp-abc123',
        usage: { promptTokenCount: 100, candidatesTokenCount: 20, thoughtsTokenCount: 30, cachedContentTokenCount: 40 },
      },
    });
    const before = Math.floor(Date.now() / 1000);
    const completion = await adapter.complete(request());
    expect(completion).toEqual({
      id: 'chatcmpl-resp-abc123',
      object: 'chat.completion',
      created: expect.any(Number),
      model: 'gemini-2.5-flash',
      choices: [{ index: 0, message: { role: 'assistant', content: 'Hello there!', refusal: null }, finish_reason: 'stop', logprobs: null }],
      usage: {
        prompt_tokens: 100,
        completion_tokens: 50,
        total_tokens: 150,
        prompt_tokens_details: { cached_tokens: 40 },
        completion_tokens_details: { reasoning_tokens: 30 },
      },
    });
    expect(completion.created).toBeGreaterThanOrEqual(before);
  });

  it('returns function calls as tool_calls with fresh ids and JSON arguments', async () => {
    fake.script({
      answer: {
        functionCalls: [
          { name: 'get_weather', args: { city: 'Paris', units: { temperature: 'C' } } },
          { name: 'lookup_image', args: {} },
        ],
        usage: { promptTokenCount: 12, candidatesTokenCount: 8 },
      },
    });
    const completion = await adapter.complete(request({ tools: [weatherTool, lookupTool] }));
    const [choice] = completion.choices;
    expect(choice.finish_reason).toBe('tool_calls');
    expect(choice.message.content).toBeNull();
    const calls = choice.message.tool_calls as Array<{ id: string; type: string; function: { name: string; arguments: string } }>;
    expect(calls.map((c) => [c.type, c.function.name, JSON.parse(c.function.arguments)])).toEqual([
      ['function', 'get_weather', { city: 'Paris', units: { temperature: 'C' } }],
      ['function', 'lookup_image', {}],
    ]);
    for (const call of calls) expect(call.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(calls[0].id).not.toBe(calls[1].id);
    expect(completion.usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 8, total_tokens: 20 });
    expect(completion.id).toMatch(/^chatcmpl-/);
  });

  it.each([
    ['MAX_TOKENS', 'length'],
    ['SAFETY', 'content_filter'],
    ['RECITATION', 'content_filter'],
    ['PROHIBITED_CONTENT', 'content_filter'],
  ])('maps finishReason %s to %s', async (reason, expected) => {
    fake.script({ answer: { text: 'Partial', finishReason: reason } });
    const completion = await adapter.complete(request());
    expect(completion.choices[0].finish_reason).toBe(expected);
  });

  it('answers a blocked prompt with an empty content_filter choice', async () => {
    fake.script({ answer: { blockReason: 'SAFETY', usage: { promptTokenCount: 9, candidatesTokenCount: 0 } } });
    const completion = await adapter.complete(request());
    expect(completion.choices).toEqual([
      { index: 0, message: { role: 'assistant', content: '', refusal: null }, finish_reason: 'content_filter', logprobs: null },
    ]);
    expect(completion.usage).toMatchObject({ prompt_tokens: 9, completion_tokens: 0 });
  });

  it('asks for n candidates and returns n choices', async () => {
    fake.script({ answer: { text: 'One.', moreCandidates: [{ text: 'Two.', finishReason: 'MAX_TOKENS' }] } });
    const completion = await adapter.complete(request({ extra: { n: 2 } }));
    expect(fake.requests[0].body!.generationConfig).toMatchObject({ candidateCount: 2 });
    expect(completion.choices.map((c) => [c.index, c.message.content, c.finish_reason])).toEqual([
      [0, 'One.', 'stop'],
      [1, 'Two.', 'length'],
    ]);
  });

  it('fails on a malformed JSON answer', async () => {
    fake.script({ raw: { body: '{"candidates": [{"content": ' } });
    const error = await adapter.complete(request()).catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'SyntaxError' });
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });
});

describe('GoogleAdapter streaming', () => {
  it('streams text chunk by chunk, then the finish reason, then usage, all under one id', async () => {
    fake.script({
      answer: {
        thought: 'Thinking about greetings.',
        text: ['Hello', ' there', ', friend!'],
        responseId: 'stream-xyz',
        usage: { promptTokenCount: 10, candidatesTokenCount: 6, thoughtsTokenCount: 4, cachedContentTokenCount: 2 },
      },
    });
    const chunks = await collect(adapter.stream(request()));

    const sent = fake.requests[0];
    expect(sent.path).toBe('/v1beta/models/gemini-2.5-flash:streamGenerateContent');
    expect(sent.query).toEqual({ alt: 'sse' });
    expect(sent.apiKey).toBe(API_KEY);

    expect(chunks.map((c) => c.choices.map((choice) => [choice.delta, choice.finish_reason]))).toEqual([
      [[{ role: 'assistant', content: '' }, null]],
      [[{ content: 'Hello' }, null]],
      [[{ content: ' there' }, null]],
      [[{ content: ', friend!' }, null]],
      [[{}, 'stop']],
      [],
    ]);
    expect(chunks[chunks.length - 1].usage).toEqual({
      prompt_tokens: 10,
      completion_tokens: 10,
      total_tokens: 20,
      prompt_tokens_details: { cached_tokens: 2 },
      completion_tokens_details: { reasoning_tokens: 4 },
    });
    for (const chunk of chunks) {
      expect(chunk).toMatchObject({ id: 'chatcmpl-stream-xyz', object: 'chat.completion.chunk', created: chunks[0].created, model: 'gemini-2.5-flash' });
    }
    expect(chunks.slice(0, -1).every((c) => c.usage === undefined)).toBe(true);
  });

  it('streams function calls with index, id, name and complete arguments', async () => {
    fake.script({
      answer: {
        text: 'Checking.',
        functionCalls: [
          { name: 'get_weather', args: { city: 'Paris' } },
          { name: 'lookup_image', args: { id: 7 } },
        ],
        usage: { promptTokenCount: 30, candidatesTokenCount: 12 },
      },
    });
    const chunks = await collect(adapter.stream(request({ tools: [weatherTool, lookupTool] })));
    expect(chunks[0].choices[0].delta).toEqual({ role: 'assistant', content: '' });
    const toolCalls = chunks.flatMap((c) => c.choices.flatMap((choice) => choice.delta.tool_calls ?? []));
    expect(toolCalls).toEqual([
      { index: 0, id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/), type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } },
      { index: 1, id: expect.stringMatching(/^call_[A-Za-z0-9]{24}$/), type: 'function', function: { name: 'lookup_image', arguments: '{"id":7}' } },
    ]);
    expect(chunks.flatMap((c) => c.choices.map((choice) => choice.delta.content).filter(Boolean))).toEqual(['', 'Checking.'].filter(Boolean));
    expect(chunks[chunks.length - 2].choices).toEqual([{ index: 0, delta: {}, finish_reason: 'tool_calls', logprobs: null }]);
    expect(chunks[chunks.length - 1]).toMatchObject({ choices: [], usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 } });
  });

  it('ends a blocked prompt with content_filter', async () => {
    fake.script({ answer: { blockReason: 'PROHIBITED_CONTENT', usage: { promptTokenCount: 5, candidatesTokenCount: 0 } } });
    const chunks = await collect(adapter.stream(request()));
    expect(chunks.map((c) => c.choices[0]?.finish_reason ?? (c.usage ? 'usage' : null))).toEqual([null, 'content_filter', 'usage']);
  });

  it('surfaces a connection lost mid-stream as an error, after the chunks that arrived', async () => {
    fake.script({ answer: { text: 'one two three four five' }, failAfterEvents: 2 });
    const { chunks, error } = await collectUntilError(adapter.stream(request()));
    expect(chunks.map((c) => c.choices[0].delta.content)).toEqual(['', 'one ', 'two ']);
    expect(isAbort(error)).toBe(false);
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable', status: 502 });
    expect(fake.requests).toHaveLength(1); // no silent reconnect by the SDK
  });

  it('surfaces malformed event data as an error', async () => {
    fake.script({
      events: [{ candidates: [{ content: { role: 'model', parts: [{ text: 'Fine ' }] }, index: 0 }] }, '{"candidates": [{"content": {'],
    });
    const { chunks, error } = await collectUntilError(adapter.stream(request()));
    expect(chunks.map((c) => c.choices[0].delta.content)).toEqual(['', 'Fine ']);
    expect(error).toMatchObject({ name: 'SyntaxError' });
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });

  it('surfaces an error event inside the stream with its status', async () => {
    fake.script({
      events: [
        { candidates: [{ content: { role: 'model', parts: [{ text: 'Fine ' }] }, index: 0 }] },
        { error: { code: 503, message: 'The model is overloaded.', status: 'UNAVAILABLE' } },
      ],
    });
    const { error } = await collectUntilError(adapter.stream(request()));
    expect(error).toMatchObject({ status: 503, message: 'The model is overloaded.' });
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_failed' });
  });

  it('fails a stream that ends cleanly without a finish reason (truncated)', async () => {
    fake.script({ answer: { text: 'cut short', finishReason: null } });
    const { chunks, error } = await collectUntilError(adapter.stream(request()));
    expect(chunks.length).toBeGreaterThan(1);
    expect((error as Error).message).toMatch(/finish reason/);
    expect(toUpstreamApiError(error, 'google').type).toBe('upstream_error');
  });

  it('stops a slow stream promptly when the signal is aborted, and closes the upstream connection', async () => {
    fake.script({ answer: { text: Array.from({ length: 50 }, (_, i) => `w${i} `) }, eventDelayMs: 200 });
    const controller = new Cancellation();
    const iterator = adapter.stream(request({ cancellation: controller }))[Symbol.asyncIterator]();
    expect((await iterator.next()).value.choices[0].delta).toEqual({ role: 'assistant', content: '' });
    expect((await iterator.next()).value.choices[0].delta).toEqual({ content: 'w0 ' });

    const started = Date.now();
    const pending = iterator.next();
    controller.abort();
    const error = await pending.catch((e: unknown) => e);
    // Well before the ~10 s the stream would still take: half of it, room for a loaded machine.
    expect(Date.now() - started).toBeLessThan(5_000);
    expect(isAbort(error)).toBe(true);
    await fake.requests[0].finished;
    expect(fake.requests[0].clientClosedEarly).toBe(true);
  });

  it('stops waiting for the headers when the signal is aborted', async () => {
    fake.script({ answer: { text: 'late' }, headerDelayMs: 3_000 });
    const controller = new Cancellation();
    setTimeout(() => controller.abort(), 50);
    const started = Date.now();
    const error = await collect(adapter.stream(request({ cancellation: controller }))).catch((e: unknown) => e);
    // Before the headers (3 s): half of that, room for a loaded machine.
    expect(Date.now() - started).toBeLessThan(1_500);
    expect(isAbort(error)).toBe(true);
  });

  it('keeps the reason of a signal that timed out, so it maps to upstream_timeout', async () => {
    fake.script({ answer: { text: 'late' }, headerDelayMs: 3_000 });
    // What AbortSignal.timeout(50) does: aborts with a TimeoutError.
    const timedOut = new Cancellation();
    setTimeout(() => timedOut.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')), 50);
    const error = await adapter.complete(request({ cancellation: timedOut })).catch((e: unknown) => e);
    expect(isAbort(error)).toBe(false);
    expect(toUpstreamApiError(error, 'google').type).toBe('upstream_timeout');
  });

  it('closes the upstream connection when the consumer stops early', async () => {
    fake.script({ answer: { text: Array.from({ length: 50 }, (_, i) => `w${i} `) }, eventDelayMs: 20 });
    for await (const chunk of adapter.stream(request())) {
      if (chunk.choices[0]?.delta.content === 'w1 ') break;
    }
    await fake.requests[0].finished;
    expect(fake.requests[0].clientClosedEarly).toBe(true);
  });

  it('streams n candidates as n choices', async () => {
    fake.script({ answer: { text: ['A'], moreCandidates: [{ text: ['B'] }] } });
    const chunks = await collect(adapter.stream(request({ extra: { n: 2 } })));
    expect(chunks[0].choices.map((c) => [c.index, c.delta])).toEqual([
      [0, { role: 'assistant', content: '' }],
      [1, { role: 'assistant', content: '' }],
    ]);
    const text = (index: number) =>
      chunks.flatMap((c) => c.choices.filter((choice) => choice.index === index).map((choice) => choice.delta.content ?? '')).join('');
    expect([text(0), text(1)]).toEqual(['A', 'B']);
    expect(chunks[chunks.length - 2].choices.map((c) => [c.index, c.finish_reason])).toEqual([
      [0, 'stop'],
      [1, 'stop'],
    ]);
  });
});

describe('GoogleAdapter timeouts', () => {
  it('times out when Gemini does not answer in time, as upstream_timeout', async () => {
    const impatient = new GoogleAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 200 });
    fake.script({ answer: { text: 'late' }, headerDelayMs: 5_000 });
    const started = Date.now();
    const error = await impatient.complete(request()).catch((e: unknown) => e);
    // Before the headers (5 s): half of that, room for a loaded machine.
    expect(Date.now() - started).toBeLessThan(2_500);
    expect(error).toMatchObject({ name: 'TimeoutError' });
    expect(isAbort(error)).toBe(false);
    expect(isRetryable(error)).toBe(false);
    expect(toUpstreamApiError(error, 'google').type).toBe('upstream_timeout');
  });

  it('times out a stream that stalls between events', async () => {
    const impatient = new GoogleAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 200 });
    fake.script({
      events: [
        { candidates: [{ content: { role: 'model', parts: [{ text: 'Hi ' }] }, index: 0 }] },
        { candidates: [{ content: { role: 'model', parts: [{ text: 'there' }] }, index: 0, finishReason: 'STOP' }] },
      ],
      eventDelayMs: [0, 600],
    });
    const { chunks, error } = await collectUntilError(impatient.stream(request()));
    expect(chunks.map((c) => c.choices[0].delta.content)).toEqual(['', 'Hi ']);
    expect(error).toMatchObject({ name: 'TimeoutError' });
    expect(toUpstreamApiError(error, 'google').type).toBe('upstream_timeout');
  });

  it('times out a stream whose first event does not come', async () => {
    const impatient = new GoogleAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 200 });
    fake.script({ answer: { text: 'late' }, eventDelayMs: 600 });
    const { chunks, error } = await collectUntilError(impatient.stream(request()));
    expect(chunks).toHaveLength(0);
    expect(toUpstreamApiError(error, 'google').type).toBe('upstream_timeout');
  });

  it('does not cut a stream that lasts longer than the timeout but keeps talking', async () => {
    const impatient = new GoogleAdapter({ apiKey: API_KEY, baseUrl: fake.url, timeoutMs: 300 });
    fake.script({ answer: { text: Array.from({ length: 8 }, (_, i) => `w${i} `) }, eventDelayMs: 100 });
    const chunks = await collect(impatient.stream(request()));
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('w0 w1 w2 w3 w4 w5 w6 w7 ');
    expect(chunks[chunks.length - 2].choices[0].finish_reason).toBe('stop');
  });
});

describe('GoogleAdapter HTTP errors', () => {
  it.each([
    [400, 'bad_request', 'upstream_bad_request', 400],
    [401, 'upstream_error', 'upstream_auth_failed', 502],
    [403, 'upstream_error', 'upstream_auth_failed', 502],
    [404, 'upstream_error', 'upstream_model_not_found', 502],
    [429, 'service_unavailable', 'upstream_rate_limited', 503],
    [500, 'upstream_error', 'upstream_failed', 502],
    [503, 'upstream_error', 'upstream_failed', 502],
  ])('HTTP %i maps to %s (%s)', async (status, type, code, apiStatus) => {
    const message = `Google says no (${status}).`;
    fake.script({ error: { status, message } }, { error: { status, message } });

    const fromComplete = await adapter.complete(request()).catch((e: unknown) => e);
    const fromStream = await collect(adapter.stream(request())).catch((e: unknown) => e);
    for (const error of [fromComplete, fromStream]) {
      expect(error).toMatchObject({ status });
      const mapped = toUpstreamApiError(error, 'google');
      expect(mapped).toMatchObject({ type, code, status: apiStatus });
      if (type === 'bad_request') expect(mapped.message).toBe(`The google provider rejected the request: ${message}`);
      expect(isRetryable(error)).toBe(status === 429 || status >= 500);
    }
    expect(fake.requests).toHaveLength(2); // one attempt each: the SDK does not retry
  });

  it('takes Retry-After from Google RetryInfo on a 429', async () => {
    fake.script({ error: { status: 429, message: 'Quota exceeded.', retryDelaySeconds: 37.2 } });
    const error = await adapter.complete(request()).catch((e: unknown) => e);
    expect(toUpstreamApiError(error, 'google').headers).toEqual({ 'Retry-After': '38' });
  });

  it('treats an invalid API key (Google answers 400 API_KEY_INVALID) as an authentication failure', async () => {
    const wrongKey = new GoogleAdapter({ apiKey: 'wrong-key', baseUrl: fake.url, timeoutMs: 5_000 });
    const error = await wrongKey.complete(request()).catch((e: unknown) => e);
    expect(fake.requests[0].apiKey).toBe('wrong-key');
    expect(error).toMatchObject({ status: 401, cause: expect.objectContaining({ status: 400 }) });
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_auth_failed' });
  });

  it('reports an unreachable Gemini as upstream_unreachable', async () => {
    const nowhere = new GoogleAdapter({ apiKey: API_KEY, baseUrl: 'http://127.0.0.1:1', timeoutMs: 5_000 });
    const error = await nowhere.complete(request()).catch((e: unknown) => e);
    expect(isRetryable(error)).toBe(true);
    expect(toUpstreamApiError(error, 'google')).toMatchObject({ type: 'upstream_error', code: 'upstream_unreachable' });
  });
});

describe('Gemini through the service, with the OpenAI SDK', () => {
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    t = await startTestApp({ config: { providers: { google: { apiKey: API_KEY, baseUrl: fake.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 } });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(() => t.close());

  it('maps reasoning_effort onto a thinking budget (docs/api.md)', async () => {
    for (const [effort, budget] of [['low', 1024], ['high', 24_576]] as const) {
      fake.reset();
      await workspace.client.chat.completions.create({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Think, then answer.' }], reasoning_effort: effort });
      expect(fake.requests[0].body!.generationConfig).toMatchObject({ thinkingConfig: { thinkingBudget: budget } });
    }
    fake.reset();
    await workspace.client.chat.completions.create({ model: 'gemini-2.5-flash', messages: [{ role: 'user', content: 'Answer.' }] });
    expect(fake.requests[0].body!.generationConfig).not.toHaveProperty('thinkingConfig');
  });

  it('answers the Anthropic Messages API from Gemini: system blocks, two parallel tool_use, their tool_results, and a stream', async () => {
    const anthropic = new Anthropic({ baseURL: t.baseUrl, apiKey: workspace.apiKey, maxRetries: 0 });
    const weather = { name: 'get_weather', description: 'Weather in a city', input_schema: { type: 'object' as const, properties: { city: { type: 'string' } }, required: ['city'] } };
    const system = [{ type: 'text' as const, text: 'You are terse.' }, { type: 'text' as const, text: 'Use the tools.', cache_control: { type: 'ephemeral' as const } }];
    const question = { role: 'user' as const, content: 'Weather in Oslo and Rome?' };
    fake.reset();
    fake.script({ answer: { functionCalls: [{ name: 'get_weather', args: { city: 'Oslo' } }, { name: 'get_weather', args: { city: 'Rome' } }], usage: { promptTokenCount: 40, candidatesTokenCount: 12 } } });
    const calls = await anthropic.messages.create({ model: 'gemini-2.5-flash', max_tokens: 300, system, tools: [weather], messages: [question] });
    expect(fake.requests[0].body!.systemInstruction).toMatchObject({ parts: [{ text: expect.stringContaining('You are terse.') }] });
    expect(JSON.stringify(fake.requests[0].body!.systemInstruction)).toContain('Use the tools.');
    expect(calls.stop_reason).toBe('tool_use');
    const uses = calls.content.filter((block) => block.type === 'tool_use');
    expect(uses.map((use) => use.input)).toEqual([{ city: 'Oslo' }, { city: 'Rome' }]);
    expect(new Set(uses.map((use) => use.id)).size).toBe(2);

    fake.script({ answer: { text: 'Oslo 3, Rome 18.', usage: { promptTokenCount: 80, candidatesTokenCount: 6 } } });
    const results = uses.map((use, i) => ({ type: 'tool_result' as const, tool_use_id: use.id, content: i === 0 ? '3 degrees' : '18 degrees' }));
    const stream = anthropic.messages.stream({
      model: 'gemini-2.5-flash',
      max_tokens: 300,
      system,
      tools: [weather],
      messages: [question, { role: 'assistant', content: calls.content }, { role: 'user', content: results }],
    });
    const final = await stream.finalMessage();
    expect(final.content).toEqual([expect.objectContaining({ type: 'text', text: 'Oslo 3, Rome 18.' })]);
    expect(final.stop_reason).toBe('end_turn');
    // Both results went back to Gemini as function responses, in order.
    const responses = (fake.requests[1].body!.contents ?? []).flatMap((content) => content.parts ?? []).filter((part) => part.functionResponse);
    expect(responses.map((part) => [part.functionResponse.name, JSON.stringify(part.functionResponse.response)])).toEqual([
      ['get_weather', expect.stringContaining('3 degrees')],
      ['get_weather', expect.stringContaining('18 degrees')],
    ]);
    await t.quiet(workspace.id);
    const records = (await t.app.get(DataSource).query(`SELECT source, status FROM usage_records WHERE workspace_id = $1 AND source = 'messages' ORDER BY created_at`, [workspace.id])) as {
      source: string;
      status: string;
    }[];
    expect(records).toEqual([
      { source: 'messages', status: 'success' },
      { source: 'messages', status: 'success' },
    ]);
  });

  it('answers logprobs and top_logprobs from Gemini in the OpenAI shape', async () => {
    fake.script({
      answer: {
        text: 'Hello',
        logprobs: [{ token: 'Hello', logProbability: -0.5, top: [{ token: 'Hello', logProbability: -0.5 }, { token: 'Hi', logProbability: -1.2 }] }],
      },
    });
    const completion = await workspace.client.chat.completions.create({
      model: 'gemini-2.5-flash',
      messages: [{ role: 'user', content: 'Greet me' }],
      logprobs: true,
      top_logprobs: 2,
    });
    expect(fake.requests[0].body!.generationConfig).toMatchObject({ responseLogprobs: true, logprobs: 2 });
    expect(completion.choices[0].logprobs?.content).toEqual([
      {
        token: 'Hello',
        logprob: -0.5,
        bytes: [72, 101, 108, 108, 111],
        top_logprobs: [
          { token: 'Hello', logprob: -0.5, bytes: [72, 101, 108, 108, 111] },
          { token: 'Hi', logprob: -1.2, bytes: [72, 105] },
        ],
      },
    ]);
  });
});
