import type { RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import { ApiError } from '../common/errors/api-error';
import { DEFAULT_CATALOG } from '../models/model-catalog';
import { StreamTranslator, toAnthropicMessages, toAnthropicParams, toUsage } from './anthropic.adapter';
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
    expect(thrown(() => toAnthropicParams(request({ extra: { n: 3 } })))).toMatchObject({ type: 'bad_request', param: 'n' });
    expect(() => toAnthropicParams(request({ extra: { n: 1 } }))).not.toThrow();
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
