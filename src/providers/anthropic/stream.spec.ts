import type { RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import { StreamTranslator } from './stream';

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
