import { Cancellation } from '../../common/cancellation';
import { ApiError } from '../../common/errors/api-error';
import { DEFAULT_CATALOG } from '../../models/model-catalog';
import type { ChatMessage, ProviderRequest } from '../provider-adapter';
import { checkParameters, toAnthropicMessages, toAnthropicParams } from './request';

const MODEL = DEFAULT_CATALOG.find((m) => m.id === 'claude-haiku-4-5')!;

function request(overrides: Partial<ProviderRequest> = {}): ProviderRequest {
  return { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], maxTokens: 100, extra: {}, cancellation: new Cancellation(), ...overrides };
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
  it('sends reasoning_effort as thinking, dropping the sampling Claude refuses beside it, and not with a forced tool or within a tool call', () => {
    const params = toAnthropicParams(request({ maxTokens: 16_000, temperature: 0.3, extra: { reasoning_effort: 'medium', top_p: 0.9, top_k: 5 } }));
    expect(params.thinking).toEqual({ type: 'enabled', budget_tokens: 8192 });
    expect(params).not.toHaveProperty('temperature');
    expect(params).not.toHaveProperty('top_p');
    expect(params).not.toHaveProperty('top_k');
    expect(toAnthropicParams(request({ maxTokens: 16_000, temperature: 1, extra: { reasoning_effort: 'low' } }))).toMatchObject({ temperature: 1 });
    expect(toAnthropicParams(request({ maxTokens: 16_000, extra: { reasoning_effort: 'low', top_p: 0.95 } }))).toMatchObject({ top_p: 0.95 });
    expect(toAnthropicParams(request({ maxTokens: 16_000, tools: [TOOL], extra: { reasoning_effort: 'high', tool_choice: 'required' } }))).not.toHaveProperty('thinking');
    expect(toAnthropicParams(request({ maxTokens: 16_000, extra: { reasoning_effort: 'high', response_format: { type: 'json_object' } } }))).not.toHaveProperty('thinking');
    const inToolCall: ChatMessage[] = [
      { role: 'user', content: 'Look it up' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'c1', type: 'function', function: { name: 'lookup', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'c1', content: 'found' },
    ];
    expect(toAnthropicParams(request({ maxTokens: 16_000, tools: [TOOL], messages: inToolCall, extra: { reasoning_effort: 'high' } }))).not.toHaveProperty('thinking');
    expect(toAnthropicParams(request({ maxTokens: 16_000, tools: [TOOL], extra: { reasoning_effort: 'high', tool_choice: 'auto' } })).thinking).toEqual({ type: 'enabled', budget_tokens: 15_999 });
    expect(toAnthropicParams(request({ maxTokens: 16_000, extra: { reasoning_effort: 'none' } }))).not.toHaveProperty('thinking');
    expect(thrown(() => checkParameters({ reasoning_effort: 'extreme' }))).toMatchObject({ status: 400, param: 'reasoning_effort' });
  });

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
