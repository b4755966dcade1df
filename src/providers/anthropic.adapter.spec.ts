import type { Message, RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import { ApiError } from '../common/errors/api-error';
import { DEFAULT_CATALOG } from '../models/model-catalog';
import { checkParameters, StreamTranslator, toAnthropicMessages, toAnthropicParams, toChatCompletion, toUsage } from './anthropic.adapter';
import type { ChatMessage, ProviderRequest } from './provider-adapter';

const MODEL = DEFAULT_CATALOG.find((m) => m.id === 'claude-haiku-4-5')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 100, extra: {}, signal: new AbortController().signal, ...overrides };
}

function thrown(fn: () => unknown): unknown {
  try {
    fn();
  } catch (error) {
    return error;
  }
  throw new Error('expected a throw');
}

const TOOL = { type: 'function' as const, function: { name: 'lookup', parameters: { type: 'object', properties: {} } } };

describe('toAnthropicMessages', () => {
  it('merges consecutive turns of one role and keeps single texts as strings', () => {
    const { system, messages } = toAnthropicMessages([
      { role: 'user', content: 'one' },
      { role: 'user', content: [{ type: 'text', text: 'two' }] },
      { role: 'assistant', content: 'three' },
    ]);
    expect(system).toBeUndefined();
    expect(messages).toEqual([
      { role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] },
      { role: 'assistant', content: 'three' },
    ]);
  });

  it('joins system and developer messages wherever they stand', () => {
    const { system, messages } = toAnthropicMessages([
      { role: 'system', content: 'A' },
      { role: 'user', content: 'u' },
      { role: 'developer', content: [{ type: 'text', text: 'B1' }, { type: 'text', text: 'B2' }] },
      { role: 'system', content: '   ' },
    ]);
    expect(system).toBe('A\n\nB1\nB2');
    expect(messages).toEqual([{ role: 'user', content: 'u' }]);
  });

  it('puts tool results first in their user turn, and leaves out empty tool content', () => {
    const { messages } = toAnthropicMessages([
      { role: 'assistant', content: null, tool_calls: [{ id: 't1', type: 'function', function: { name: 'f', arguments: '[1,2]' } }] },
      { role: 'user', content: 'By the way…' },
      { role: 'tool', tool_call_id: 't1', content: '' },
    ]);
    expect(messages).toEqual([
      { role: 'assistant', content: [{ type: 'tool_use', id: 't1', name: 'f', input: {} }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't1' }, { type: 'text', text: 'By the way…' }] },
    ]);
  });

  it('drops empty text blocks and trims a final assistant prefill', () => {
    const { messages } = toAnthropicMessages([
      { role: 'user', content: [{ type: 'text', text: '' }, { type: 'text', text: 'Q' }] },
      { role: 'assistant', content: 'The answer is ' },
    ]);
    expect(messages).toEqual([
      { role: 'user', content: 'Q' },
      { role: 'assistant', content: 'The answer is' },
    ]);
  });

  it('translates images: base64 data URLs (jpg as jpeg) and http(s) URLs', () => {
    const { messages } = toAnthropicMessages([
      {
        role: 'user',
        content: [
          { type: 'image_url', image_url: { url: 'data:image/JPG;base64,AAAA' } },
          { type: 'image_url', image_url: { url: 'http://example.com/a.gif' } },
        ],
      },
    ]);
    expect(messages[0].content).toEqual([
      { type: 'image', source: { type: 'base64', media_type: 'image/jpeg', data: 'AAAA' } },
      { type: 'image', source: { type: 'url', url: 'http://example.com/a.gif' } },
    ]);
  });

  it.each([
    ['a data URL that is not base64', { type: 'image_url', image_url: { url: 'data:image/png,rawbytes' } }],
    ['another URL scheme', { type: 'image_url', image_url: { url: 'ftp://example.com/a.png' } }],
    ['audio', { type: 'input_audio', input_audio: { data: 'AAAA', format: 'wav' } }],
  ])('refuses %s as a bad request naming the part', (_what, part) => {
    const error = thrown(() => toAnthropicMessages([{ role: 'user', content: [{ type: 'text', text: 'x' }, part] } as ChatMessage]));
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ type: 'bad_request', param: expect.stringMatching(/^messages\.0\.content\.1/) });
  });

  it('passes base64 PDFs as documents', () => {
    const { messages } = toAnthropicMessages([
      { role: 'user', content: [{ type: 'file', file: { file_data: 'data:application/pdf;base64,JVBE', filename: 'a.pdf' } }] },
    ]);
    expect(messages[0].content).toEqual([{ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBE' } }]);
  });
});

describe('toAnthropicParams', () => {
  it('clamps the temperature to 0..1 and keeps top_p only without one', () => {
    expect(toAnthropicParams(request({ temperature: 2, extra: { top_p: 0.3 } }))).toMatchObject({ temperature: 1 });
    expect(toAnthropicParams(request({ temperature: 2, extra: { top_p: 0.3 } })).top_p).toBeUndefined();
    expect(toAnthropicParams(request({ temperature: 0.4 })).temperature).toBe(0.4);
    expect(toAnthropicParams(request({ extra: { top_p: 0.3 } })).top_p).toBe(0.3);
  });

  it.each([
    [undefined, undefined, undefined],
    ['auto', undefined, { type: 'auto' }],
    ['none', false, { type: 'none' }],
    ['required', false, { type: 'any', disable_parallel_tool_use: true }],
    [undefined, false, { type: 'auto', disable_parallel_tool_use: true }],
    [{ type: 'function', function: { name: 'lookup' } }, undefined, { type: 'tool', name: 'lookup' }],
    [{ type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'lookup' } }] } }, undefined, { type: 'any' }],
  ])('maps tool_choice %j with parallel_tool_calls %j', (choice, parallel, expected) => {
    const params = toAnthropicParams(request({ tools: [TOOL], extra: { tool_choice: choice, parallel_tool_calls: parallel } }));
    expect(params.tool_choice).toEqual(expected);
  });

  it('offers only the allowed tools of an allowed_tools choice', () => {
    const other = { type: 'function' as const, function: { name: 'other' } };
    const params = toAnthropicParams(
      request({ tools: [TOOL, other], extra: { tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'auto', tools: [{ type: 'function', function: { name: 'other' } }] } } } }),
    );
    expect(params.tools).toEqual([{ name: 'other', input_schema: { type: 'object' } }]);
  });

  it('forwards the user as metadata.user_id and ignores OpenAI-only parameters', () => {
    const params = toAnthropicParams(
      request({ extra: { user: 'u-1', seed: 1, presence_penalty: 1, logit_bias: {}, response_format: { type: 'text' }, stop: ['', 'X'] } }),
    );
    expect(params).toEqual({
      model: 'claude-haiku-4-5',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Hi' }],
      stop_sequences: ['X'],
      metadata: { user_id: 'u-1' },
    });
  });

  it('refuses n > 1', () => {
    expect(thrown(() => toAnthropicParams(request({ extra: { n: 3 } })))).toMatchObject({ type: 'bad_request', param: 'n', code: 'unsupported_parameter' });
    expect(() => toAnthropicParams(request({ extra: { n: 1 } }))).not.toThrow();
  });

  it.each([
    [{ logprobs: true }, 'logprobs'],
    [{ logprobs: true, top_logprobs: 3 }, 'logprobs'],
    [{ top_logprobs: 2 }, 'top_logprobs'],
    [{ modalities: ['text', 'audio'] }, 'modalities'],
    [{ response_format: { type: 'xml' } }, 'response_format.type'],
  ])('refuses %j, which Claude cannot honour, naming the parameter', (extra, param) => {
    expect(thrown(() => checkParameters(extra))).toMatchObject({ type: 'bad_request', param, code: 'unsupported_parameter' });
  });

  it('accepts the parameters that change nothing: logprobs false, top_logprobs 0, seed', () => {
    expect(() => checkParameters({ logprobs: false, top_logprobs: 0, seed: 7, modalities: ['text'] })).not.toThrow();
  });

  const SCHEMA = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };

  it('asks for a json_schema answer as a forced tool with the schema', () => {
    const params = toAnthropicParams(
      request({ extra: { response_format: { type: 'json_schema', json_schema: { name: 'place', schema: SCHEMA, strict: true } } } }),
    );
    expect(params.tools).toEqual([{ name: 'place', description: expect.any(String), input_schema: SCHEMA, strict: true }]);
    expect(params.tool_choice).toEqual({ type: 'tool', name: 'place', disable_parallel_tool_use: true });
  });

  it('asks for a json_object answer as a forced tool taking any object', () => {
    const params = toAnthropicParams(request({ extra: { response_format: { type: 'json_object' } } }));
    expect(params.tools).toEqual([{ name: 'json_answer', description: expect.any(String), input_schema: { type: 'object' } }]);
    expect(params.tool_choice).toEqual({ type: 'tool', name: 'json_answer', disable_parallel_tool_use: true });
  });

  it('wraps a schema that is not an object under "value", keeping its definitions at the root', () => {
    const schema = { type: 'array', items: { $ref: '#/$defs/city' }, $defs: { city: { type: 'string' } } };
    const params = toAnthropicParams(request({ extra: { response_format: { type: 'json_schema', json_schema: { name: 'cities', schema } } } }));
    expect(params.tools![0]).toMatchObject({
      input_schema: { type: 'object', properties: { value: { type: 'array', items: { $ref: '#/$defs/city' } } }, required: ['value'], $defs: { city: { type: 'string' } } },
    });
  });

  it.each([
    [undefined, { type: 'any' }, ['lookup', 'place']],
    ['auto', { type: 'any' }, ['lookup', 'place']],
    ['none', { type: 'tool', name: 'place', disable_parallel_tool_use: true }, ['lookup', 'place']],
    ['required', { type: 'any' }, ['lookup']],
    [{ type: 'function', function: { name: 'lookup' } }, { type: 'tool', name: 'lookup' }, ['lookup']],
  ])('with the client tools and tool_choice %j, Claude calls a tool or answers in the format', (choice, expected, names) => {
    const params = toAnthropicParams(
      request({ tools: [TOOL], extra: { tool_choice: choice, response_format: { type: 'json_schema', json_schema: { name: 'place', schema: SCHEMA } } } }),
    );
    expect(params.tool_choice).toEqual(expected);
    expect(params.tools!.map((t) => (t as { name: string }).name)).toEqual(names);
  });

  it('refuses a format named like one of the client tools', () => {
    const error = thrown(() =>
      toAnthropicParams(request({ tools: [TOOL], extra: { response_format: { type: 'json_schema', json_schema: { name: 'lookup', schema: SCHEMA } } } })),
    );
    expect(error).toMatchObject({ type: 'bad_request', param: 'response_format.json_schema.name' });
  });
});

describe('toChatCompletion with a format', () => {
  const message = (content: unknown[], stop_reason = 'tool_use') =>
    ({ id: 'msg_1', content, stop_reason, usage: { input_tokens: 1, output_tokens: 1 } }) as unknown as Message;

  it('unwraps the answer tool into the content, finishing with stop and no tool calls', () => {
    const completion = toChatCompletion(message([{ type: 'tool_use', id: 't1', name: 'place', input: { city: 'Oslo' } }]), 'm', { name: 'place', wrapped: false });
    expect(completion.choices[0]).toMatchObject({ message: { content: '{"city":"Oslo"}' }, finish_reason: 'stop' });
    expect(completion.choices[0].message.tool_calls).toBeUndefined();
  });

  it('unwraps a wrapped value, and keeps client tool calls beside the answer', () => {
    const completion = toChatCompletion(
      message([
        { type: 'tool_use', id: 't1', name: 'lookup', input: {} },
        { type: 'tool_use', id: 't2', name: 'cities', input: { value: ['Oslo'] } },
      ]),
      'm',
      { name: 'cities', wrapped: true },
    );
    expect(completion.choices[0]).toMatchObject({
      message: { content: '["Oslo"]', tool_calls: [{ id: 't1', function: { name: 'lookup', arguments: '{}' } }] },
      finish_reason: 'tool_calls',
    });
  });
});

describe('StreamTranslator', () => {
  const start = (usage: Record<string, number> = { input_tokens: 10, output_tokens: 1 }) =>
    ({ type: 'message_start', message: { id: 'msg_1', content: [], usage } }) as unknown as RawMessageStreamEvent;
  const ev = (e: unknown) => e as RawMessageStreamEvent;

  function run(events: RawMessageStreamEvent[]) {
    const translator = new StreamTranslator('m');
    const chunks = events.flatMap((event) => translator.push(event));
    return { translator, chunks };
  }

  it('gives a tool call without parameters "{}" as arguments', () => {
    const { chunks } = run([
      start(),
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_1', name: 'now', input: {} } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '' } }),
      ev({ type: 'content_block_stop', index: 0 }),
      ev({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 5 } }),
      ev({ type: 'message_stop' }),
    ]);
    const args = chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? []).map((t) => t.function?.arguments ?? '');
    expect(args.join('')).toBe('{}');
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('tool_calls');
  });

  it('skips thinking, finishes with stop when no stop_reason came, and is finished only at message_stop', () => {
    const { translator, chunks } = run([
      start(),
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'hmm' } }),
      ev({ type: 'content_block_stop', index: 0 }),
      ev({ type: 'content_block_start', index: 1, content_block: { type: 'text', text: '' } }),
      ev({ type: 'content_block_delta', index: 1, delta: { type: 'text_delta', text: 'Hi' } }),
      ev({ type: 'message_delta', delta: { stop_reason: null }, usage: { output_tokens: 3 } }),
    ]);
    expect(translator.finished).toBe(false);
    expect(chunks.map((c) => c.choices[0].delta)).toEqual([{ role: 'assistant', content: '' }, { content: 'Hi' }]);
    const tail = translator.push(ev({ type: 'message_stop' }));
    expect(translator.finished).toBe(true);
    expect(tail.map((c) => c.choices[0]?.finish_reason ?? 'usage')).toEqual(['stop', 'usage']);
  });

  it('takes cumulative counts from message_delta when it has them', () => {
    const { chunks } = run([
      start({ input_tokens: 10, cache_read_input_tokens: 2, output_tokens: 1 }),
      ev({ type: 'message_delta', delta: { stop_reason: 'end_turn' }, usage: { input_tokens: 12, output_tokens: 9, cache_read_input_tokens: null } }),
      ev({ type: 'message_stop' }),
    ]);
    expect(chunks[chunks.length - 1].usage).toEqual({ prompt_tokens: 14, completion_tokens: 9, total_tokens: 23, prompt_tokens_details: { cached_tokens: 2 } });
  });

  it('streams the answer tool input as content deltas, finishing with stop', () => {
    const translator = new StreamTranslator('m', { name: 'place', wrapped: false });
    const chunks = [
      start(),
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_1', name: 'place', input: {} } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"city":' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '"Oslo"}' } }),
      ev({ type: 'content_block_stop', index: 0 }),
      ev({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 5 } }),
      ev({ type: 'message_stop' }),
    ].flatMap((event) => translator.push(event));
    expect(chunks.flatMap((c) => c.choices[0]?.delta.tool_calls ?? [])).toEqual([]);
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('{"city":"Oslo"}');
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('stop');
  });

  it('streams a wrapped answer unwrapped, once whole', () => {
    const translator = new StreamTranslator('m', { name: 'cities', wrapped: true });
    const chunks = [
      start(),
      ev({ type: 'content_block_start', index: 0, content_block: { type: 'tool_use', id: 'toolu_1', name: 'cities', input: {} } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: '{"value": ["Os' } }),
      ev({ type: 'content_block_delta', index: 0, delta: { type: 'input_json_delta', partial_json: 'lo"]}' } }),
      ev({ type: 'content_block_stop', index: 0 }),
    ].flatMap((event) => translator.push(event));
    expect(chunks.map((c) => c.choices[0]?.delta.content ?? '').join('')).toBe('["Oslo"]');
  });

  it('finishes with stop when Anthropic stopped for a tool it ran itself', () => {
    const { chunks } = run([start(), ev({ type: 'message_delta', delta: { stop_reason: 'tool_use' }, usage: { output_tokens: 2 } }), ev({ type: 'message_stop' })]);
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe('stop');
  });
});

describe('toUsage', () => {
  it('counts cache reads and writes as prompt tokens', () => {
    expect(toUsage({ input_tokens: 3, cache_read_input_tokens: 40, cache_creation_input_tokens: 7, output_tokens: 2 })).toEqual({
      prompt_tokens: 50,
      completion_tokens: 2,
      total_tokens: 52,
      prompt_tokens_details: { cached_tokens: 40 },
    });
  });
});
