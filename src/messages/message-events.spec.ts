import { Subject } from 'rxjs';
import type { ChatStreamEvent } from '../chat/completion-types';
import { KEEP_ALIVE } from '../chat/completion-types';
import { ApiError } from '../common/errors/api-error';
import { anthropicErrorType } from '../common/errors/anthropic-errors';
import { MessageEvent, messageEvents } from './message-events';
import { messageOf, toolInputOf } from './message-object';
import { AnthropicAnswer } from './native-answer';

const chunk = (delta: Record<string, unknown>, finish: string | null = null, extra: Record<string, unknown> = {}) =>
  ({ id: 'c', object: 'chat.completion.chunk', created: 1, model: 'm', choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }], ...extra }) as unknown as ChatStreamEvent;

function run(events: ChatStreamEvent[], fail?: unknown, native?: AnthropicAnswer): { out: MessageEvent[]; error?: unknown } {
  const chat = new Subject<ChatStreamEvent>();
  const out: MessageEvent[] = [];
  let error: unknown;
  messageEvents(chat, { id: 'msg_1', model: 'asked', promptTokens: () => 12, maxTokensLoweredTo: () => 64, toApiError: (e) => e as ApiError, native }).subscribe({
    next: (event) => out.push(event),
    error: (e: unknown) => (error = e),
  });
  events.forEach((event) => chat.next(event));
  if (fail) chat.error(fail);
  else chat.complete();
  return { out, error };
}

describe('chat stream -> Anthropic events', () => {
  it('opens a block per text run and per tool call, with contiguous indices, never an empty text block', () => {
    const { out } = run([
      chunk({ role: 'assistant', content: '' }),
      chunk({ content: 'Let me ' }),
      chunk({ content: 'check.' }),
      chunk({ tool_calls: [{ index: 0, id: 'a', function: { name: 'f', arguments: '' } }] }),
      chunk({ tool_calls: [{ index: 0, function: { arguments: '{"x":1}' } }] }),
      chunk({ tool_calls: [{ index: 1, id: 'b', function: { name: 'g' } }] }),
      chunk({}, 'tool_calls'),
      { ...chunk({}), choices: [], usage: { prompt_tokens: 20, completion_tokens: 7, total_tokens: 27, prompt_tokens_details: { cached_tokens: 5 } }, x_service: { cost_millicents: 3 } } as unknown as ChatStreamEvent,
    ]);
    expect(out.map((event) => `${event.type}${event.index === undefined ? '' : `:${event.index}`}`)).toEqual([
      'message_start',
      'content_block_start:0',
      'content_block_delta:0',
      'content_block_delta:0',
      'content_block_stop:0',
      'content_block_start:1',
      'content_block_delta:1',
      'content_block_stop:1',
      'content_block_start:2',
      'content_block_delta:2',
      'content_block_stop:2',
      'message_delta',
      'message_stop',
    ]);
    expect(out[0]).toMatchObject({ message: { id: 'msg_1', model: 'm', content: [], usage: { input_tokens: 12 } } });
    // A call without arguments still has JSON that parses.
    expect(out[9]).toMatchObject({ delta: { type: 'input_json_delta', partial_json: '{}' } });
    expect(out[11]).toMatchObject({
      delta: { stop_reason: 'tool_use', stop_sequence: null },
      usage: { input_tokens: 15, output_tokens: 7, cache_read_input_tokens: 5 },
      x_service: { cost_millicents: 3, max_tokens_lowered_to: 64 },
    });
  });

  it('maps length to max_tokens, pings on keep-alives, and turns a failure after the start into an error event', () => {
    expect(run([chunk({ content: 'a' }), chunk({}, 'length')]).out.at(-2)).toMatchObject({ delta: { stop_reason: 'max_tokens' } });
    const failed = run([KEEP_ALIVE, chunk({ content: 'a' })], new ApiError('upstream_error', 'boom'));
    expect(failed.out[0]).toMatchObject({ type: 'message_start', message: { model: 'asked' } });
    expect(failed.out[1]).toEqual({ type: 'ping' });
    expect(failed.out.at(-1)).toEqual({ type: 'error', error: { type: 'api_error', message: 'boom', code: 'upstream_error', param: null } });
    expect(failed.error).toBeUndefined();
    const early = run([], new ApiError('insufficient_balance', 'poor'));
    expect(early.out).toEqual([]);
    expect(early.error).toBeInstanceOf(ApiError);
  });
});

describe('message object and errors', () => {
  it('answers text then tool_use blocks with parsed input, and no empty text block', () => {
    const completion = {
      id: 'c',
      model: 'm',
      choices: [{ index: 0, finish_reason: 'tool_calls', message: { role: 'assistant', content: '', tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '{"x":1}' } }] } }],
      usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 },
      x_service: { cost_millicents: 1 },
    };
    expect(messageOf('msg_x', completion as never)).toMatchObject({
      content: [{ type: 'tool_use', id: 'a', name: 'f', input: { x: 1 } }],
      stop_reason: 'tool_use',
      usage: { input_tokens: 3, output_tokens: 2 },
    });
    expect(toolInputOf('not json')).toEqual({ arguments: 'not json' });
  });

  it("maps each status to Anthropic's error type", () => {
    expect([400, 401, 402, 403, 404, 409, 413, 415, 429, 500, 502, 503, 504].map(anthropicErrorType)).toEqual([
      'invalid_request_error',
      'authentication_error',
      'permission_error',
      'permission_error',
      'not_found_error',
      'invalid_request_error',
      'request_too_large',
      'invalid_request_error',
      'rate_limit_error',
      'api_error',
      'api_error',
      'overloaded_error',
      'api_error',
    ]);
  });

  describe("an Anthropic deployment's own events", () => {
    const upstream = (id: string) => [
      { type: 'message_start', message: { id, type: 'message', role: 'assistant', model: 'claude-upstream', content: [], usage: { input_tokens: 9, cache_read_input_tokens: 4 } } },
      { type: 'content_block_start', index: 0, content_block: { type: 'thinking', thinking: '', signature: '' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'thinking_delta', thinking: 'hm' } },
      { type: 'content_block_delta', index: 0, delta: { type: 'signature_delta', signature: 'sig' } },
      { type: 'content_block_stop', index: 0 },
      { type: 'message_delta', delta: { stop_reason: 'end_turn', stop_sequence: null }, usage: { output_tokens: 3 } },
      { type: 'message_stop' },
    ];
    const chatOf = (id: string) => [
      { ...(chunk({ role: 'assistant', content: '' }) as object), id } as ChatStreamEvent,
      { ...(chunk({}, 'stop') as object), id, x_service: { cost_millicents: 2 } } as ChatStreamEvent,
    ];

    it('go to the client in their order, under our id and model, x_service on their message_delta', () => {
      const native = new AnthropicAnswer();
      const events = upstream('msg_up');
      // The first chunk comes once message_start has arrived; the rest of the events as the stream goes on.
      native.event(events[0] as never);
      const chat = new Subject<ChatStreamEvent>();
      const out: MessageEvent[] = [];
      messageEvents(chat, { id: 'msg_1', model: 'asked', promptTokens: () => 12, maxTokensLoweredTo: () => undefined, toApiError: (e) => e as ApiError, native }).subscribe((e) => out.push(e));
      chat.next(chatOf('msg_up')[0]);
      events.slice(1).forEach((event) => native.event(event as never));
      chat.next(chatOf('msg_up')[1]);
      chat.complete();
      expect(out).toEqual([
        { ...events[0], message: { ...(events[0] as { message: object }).message, id: 'msg_1', model: 'm' } },
        ...events.slice(1, 5),
        { ...events[5], x_service: { cost_millicents: 2 } },
        { type: 'message_stop' },
      ]);
    });

    it('are not the answer when the chat stream came from elsewhere (another attempt failed over)', () => {
      const native = new AnthropicAnswer();
      upstream('msg_failed_attempt').slice(0, 2).forEach((event) => native.event(event as never));
      const { out } = run([chunk({ role: 'assistant', content: '' }), chunk({ content: 'Hi' }), chunk({}, 'stop')], undefined, native);
      expect(out.map((event) => event.type)).toEqual(['message_start', 'content_block_start', 'content_block_delta', 'content_block_stop', 'message_delta', 'message_stop']);
      expect(out[1]).toMatchObject({ content_block: { type: 'text' } });
    });
  });
});
