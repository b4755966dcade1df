import type { Message } from '@anthropic-ai/sdk/resources/messages';
import { toChatCompletion, toUsage } from './response';

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

describe('toUsage', () => {
  it('counts cache reads and writes as prompt tokens, the writes detailed for their price', () => {
    expect(toUsage({ input_tokens: 3, cache_read_input_tokens: 40, cache_creation_input_tokens: 7, output_tokens: 2 })).toEqual({
      prompt_tokens: 50,
      completion_tokens: 2,
      total_tokens: 52,
      prompt_tokens_details: { cached_tokens: 40, cache_write_tokens: 7 },
    });
  });
});
