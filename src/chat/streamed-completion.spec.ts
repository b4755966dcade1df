import type { Subscription } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { Cancellation } from '../common/cancellation';
import type { ModelDefinition } from '../models/model-catalog';
import type { ChatCompletionChunk, ChatMessage, CompletionUsage } from '../providers/provider-adapter';
import type { OpenedStream } from '../providers/providers.service';
import type { ServerToolCall, ToolOutcome } from '../tools/tools.service';
import { ChatCompletionChunkResponse, ChatStreamEvent, isKeepAlive } from './completion-types';
import { Spend } from '../billing/spend';
import { StreamedCall, streamedCompletion } from './streamed-completion';
import { OUT_OF_CONTEXT_NOTE, OUT_OF_FUNDS_NOTE } from './tool-loop';

const MODEL = { id: 'gpt-4o', inputPrice: 250_000, outputPrice: 1_000_000, cachedInputPrice: 125_000 } as ModelDefinition;
const PROMPT: ChatMessage[] = [{ role: 'user', content: 'Weather in Paris?' }];

type Delta = ChatCompletionChunk['choices'][number]['delta'];
function chunk(delta: Delta, finish: 'stop' | 'tool_calls' | null = null, usage?: CompletionUsage): ChatCompletionChunk {
  return {
    id: 'chatcmpl-1',
    object: 'chat.completion.chunk',
    created: 0,
    model: 'gpt-4o-2024-08-06',
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
    ...(usage ? { usage } : {}),
  };
}
const words = (...texts: string[]) => [chunk({ role: 'assistant', content: '' }), ...texts.map((content) => chunk({ content })), chunk({}, 'stop')];
const searchCall = [
  chunk({ role: 'assistant', tool_calls: [{ index: 0, id: 'call_1', type: 'function', function: { name: 'web_search', arguments: '' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"query":"Paris"}' } }] }),
  chunk({}, 'tool_calls'),
];

/** One upstream stream: its chunks, then (optionally) a failure, or waiting until the call is aborted. */
interface Script {
  chunks: ChatCompletionChunk[];
  then?: 'hang' | Error;
}

function opened(script: Script, ended: Cancellation): OpenedStream {
  async function* rest(): AsyncGenerator<ChatCompletionChunk> {
    yield* script.chunks.slice(1);
    if (script.then === 'hang') {
      await new Promise((_, reject) => ended.onAbort(() => reject(Object.assign(new Error('aborted'), { name: 'AbortError' }))));
    } else if (script.then) {
      throw script.then;
    }
  }
  return { first: script.chunks[0], rest: rest() };
}

/** A prepared streamed call over scripted upstream streams, with a billing session in memory. */
function streamedCall(
  scripts: Array<Script | Error>,
  fields: Partial<StreamedCall> = {},
  billing: Partial<StreamedCall['billing']> = {},
  /** The server's drain deadline (ServerDrain.streamsCut). */
  stop?: Cancellation,
) {
  const seen = { ended: undefined as Cancellation | undefined, settled: [] as Array<{ failure: unknown; reply?: ChatMessage; clientLeft: boolean }>, delivered: [] as boolean[] };
  const spend = new Spend();
  const events: ChatStreamEvent[] = [];
  const start = async (ended: Cancellation): Promise<StreamedCall> => {
    seen.ended = ended;
    return {
      messages: PROMPT,
      maxIterations: 3,
      modelId: () => 'gpt-4o',
      includeUsage: false,
      isServerTool: (name) => name === 'web_search',
      openStream: async () => {
        const script = scripts.shift();
        if (!script) throw new Error('no more streams');
        if (script instanceof Error) throw script;
        return opened(script, ended);
      },
      runTool: async () => ({ content: 'Sunny.', costMicros: 2_500_000n, ran: true }),
      billing: {
        spend,
        calling: (messages) => spend.calling(messages),
        meter: async (_messages, usage, generated) =>
          spend.addModelCall(MODEL, usage ?? { prompt_tokens: 10, completion_tokens: generated.length, total_tokens: 10 + generated.length }),
        addToolCall: (name, micros) => spend.addToolCall(name, micros),
        holdNextIteration: async () => true,
        holdNextCall: async () => true,
        nextOutputCap: async () => 100,
        // As the real session: a failure (other than after the client left) is the stream's error.
        settleStream: async (failure, reply, delivered) => {
          seen.settled.push({ failure, reply, clientLeft: ended.aborted });
          seen.delivered.push(delivered);
          if (failure && !ended.aborted) throw failure;
        },
        ...billing,
      },
      ...fields,
    };
  };
  const observable = streamedCompletion(start, stop);
  const run = () =>
    new Promise<{ events: ChatStreamEvent[]; error?: unknown }>((resolve) => {
      observable.subscribe({
        next: (event) => events.push(event),
        error: (error: unknown) => resolve({ events, error }),
        complete: () => resolve({ events }),
      });
    });
  return { run, observable, seen, spend, events };
}

const chunksOf = (events: ChatStreamEvent[]) => events.filter((event): event is ChatCompletionChunkResponse => !isKeepAlive(event));
const textOf = (events: ChatStreamEvent[]) => chunksOf(events).map((event) => event.choices[0]?.delta?.content ?? '').join('');
const nextTick = () => new Promise((resolve) => setImmediate(resolve));

describe('streamedCompletion', () => {
  it('does nothing until subscribed, then emits the answer with x_service on its last chunk', async () => {
    const { run, seen } = streamedCall([{ chunks: words('Sunny', ' today.') }]);
    await nextTick();
    expect(seen.ended).toBeUndefined();
    const { events, error } = await run();
    expect(error).toBeUndefined();
    expect(textOf(events)).toBe('Sunny today.');
    const last = chunksOf(events).at(-1)!;
    expect(last.choices[0].finish_reason).toBe('stop');
    expect(last.x_service).toMatchObject({ iterations: 1, tools_used: [] });
    expect(chunksOf(events).every((event) => event.model === 'gpt-4o')).toBe(true);
    expect(seen.settled).toEqual([{ failure: undefined, reply: { role: 'assistant', content: 'Sunny today.' }, clientLeft: false }]);
  });

  it('relays the iterations of a tool loop as one completion, with a keep-alive while the tool runs', async () => {
    const { run } = streamedCall([{ chunks: searchCall }, { chunks: words('Sunny.') }]);
    const { events } = await run();
    expect(events.filter(isKeepAlive)).toHaveLength(1);
    const chunks = chunksOf(events);
    expect(chunks.filter((event) => event.choices[0]?.delta?.role)).toHaveLength(1);
    expect(chunks.some((event) => event.choices[0]?.delta?.tool_calls)).toBe(false);
    expect(chunks.filter((event) => event.choices[0]?.finish_reason)).toHaveLength(1);
    expect(chunks.at(-1)!.x_service).toMatchObject({ iterations: 2, tools_used: ['web_search'] });
  });

  it('sends keep-alives every 5 s while server tools run', async () => {
    jest.useFakeTimers({ doNotFake: ['setImmediate', 'nextTick', 'queueMicrotask'] });
    try {
      let finishTool!: (outcome: ToolOutcome) => void;
      const { run, events } = streamedCall([{ chunks: searchCall }, { chunks: words('Sunny.') }], {
        runTool: (_call: ServerToolCall) => new Promise<ToolOutcome>((resolve) => (finishTool = resolve)),
      });
      const done = run();
      while (!finishTool) await nextTick();
      await jest.advanceTimersByTimeAsync(12_000);
      expect(events.filter(isKeepAlive)).toHaveLength(3);
      finishTool({ content: 'Sunny.', costMicros: 0n, ran: true });
      await done;
      await jest.advanceTimersByTimeAsync(12_000);
      expect(events.filter(isKeepAlive)).toHaveLength(3);
    } finally {
      jest.useRealTimers();
    }
  });

  it('aborts the upstream call when unsubscribed, and still settles what was used', async () => {
    const { observable, seen, events } = streamedCall([{ chunks: words('Once', ' upon').slice(0, 3), then: 'hang' }]);
    const subscription: Subscription = observable.subscribe((event) => events.push(event));
    while (textOf(events) !== 'Once upon') await nextTick();
    expect(seen.ended!.aborted).toBe(false);
    subscription.unsubscribe();
    expect(seen.ended!.aborted).toBe(true);
    while (seen.settled.length === 0) await nextTick();
    expect(seen.settled).toEqual([expect.objectContaining({ clientLeft: true })]);
    expect((seen.settled[0].failure as Error).name).toBe('AbortError');
  });

  it('fails before its first event when the upstream refuses: an ordinary HTTP error', async () => {
    const refused = new ApiError('upstream_error', 'The provider failed.');
    const { run, seen } = streamedCall([refused]);
    const { events, error } = await run();
    expect(events).toEqual([]);
    expect(error).toBe(refused);
    expect(seen.settled).toEqual([expect.objectContaining({ failure: refused, clientLeft: false })]);
  });

  it('fails before its first event when the request is refused while prepared', async () => {
    const refused = new ApiError('insufficient_balance', 'Top up.');
    const { events, error } = await new Promise<{ events: ChatStreamEvent[]; error?: unknown }>((resolve) => {
      const emitted: ChatStreamEvent[] = [];
      streamedCompletion(() => Promise.reject(refused)).subscribe({
        next: (event) => emitted.push(event),
        error: (failure: unknown) => resolve({ events: emitted, error: failure }),
      });
    });
    expect(events).toEqual([]);
    expect(error).toBe(refused);
  });

  it('ends with its error after what was relayed when the upstream fails mid-stream', async () => {
    const broken = new ApiError('upstream_error', 'The provider failed mid-answer.');
    const { run, seen } = streamedCall([{ chunks: words('Once', ' upon').slice(0, 3), then: broken }]);
    const { events, error } = await run();
    expect(textOf(events)).toBe('Once upon');
    expect(error).toBe(broken);
    expect(seen.settled).toHaveLength(1);
    // Text reached the client: the settlement charges it.
    expect(seen.delivered).toEqual([true]);
  });

  it('fails mid-loop when the next call cannot be opened; only server tool calls were streamed, so nothing was delivered', async () => {
    const refused = new ApiError('upstream_error', 'The provider failed.');
    const { run, seen } = streamedCall([{ chunks: searchCall }, refused]);
    const { events, error } = await run();
    expect(events.length).toBeGreaterThan(0);
    expect(error).toBe(refused);
    expect(seen.delivered).toEqual([false]);
  });

  it('ends cut short, with a note and finish_reason length, when the next prompt would not fit the context', async () => {
    const { run, spend } = streamedCall([{ chunks: searchCall }, { chunks: words('never') }], {}, { nextOutputCap: async () => 0 });
    const { events } = await run();
    expect(textOf(events)).toBe(OUT_OF_CONTEXT_NOTE);
    expect(chunksOf(events).at(-1)!.choices[0].finish_reason).toBe('length');
    expect(spend.iterations).toBe(1);
    expect(spend.toolsUsed).toEqual(['web_search']);
  });

  it('ends cut short, with a note and finish_reason length, when the wallet cannot cover another iteration', async () => {
    const { run } = streamedCall([{ chunks: searchCall }], {}, { holdNextIteration: async () => 'wallet' as const });
    const { events } = await run();
    expect(textOf(events)).toBe(OUT_OF_FUNDS_NOTE);
    expect(chunksOf(events).at(-1)!.choices[0].finish_reason).toBe('length');
  });

  it('adds the usage chunk when stream_options.include_usage asks for it', async () => {
    const { run } = streamedCall([{ chunks: [...words('Hi.'), chunk({}, null, { prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 })] }], {
      includeUsage: true,
    });
    const { events } = await run();
    const last = chunksOf(events).at(-1)!;
    expect(last.usage).toEqual({ prompt_tokens: 5, completion_tokens: 2, total_tokens: 7 });
    expect(last.x_service).toBeDefined();
  });

  describe('when the server stops (drain deadline)', () => {
    it('ends a stream mid-answer with server_shutting_down, billed for what it generated', async () => {
      const stop = new Cancellation();
      const { run, seen, spend, events } = streamedCall(
        [{ chunks: [chunk({ role: 'assistant', content: '' }), chunk({ content: 'Sunny' })], then: 'hang' }],
        {},
        {},
        stop,
      );
      const ended = run();
      for (let i = 0; i < 20 && textOf(events) !== 'Sunny'; i++) await nextTick();
      expect(textOf(events)).toBe('Sunny');
      stop.abort();
      const { error } = await ended;
      expect(error).toBeInstanceOf(ApiError);
      expect(error).toMatchObject({ status: 503, code: 'server_shutting_down' });
      // Settled as the server's ending, not as a client that left; the generated word is metered.
      expect(seen.settled).toEqual([{ failure: error, reply: undefined, clientLeft: false }]);
      expect(spend.tokens.outputTokens).toBe('Sunny'.length);
    });

    it('starts no further model call of a tool loop once stopped', async () => {
      const stop = new Cancellation();
      const scripts: Script[] = [{ chunks: searchCall }, { chunks: words('Sunny.') }];
      const { run, seen } = streamedCall(
        scripts,
        {
          runTool: async () => {
            stop.abort();
            return { content: 'Sunny.', costMicros: 2_500_000n, ran: true };
          },
        },
        {},
        stop,
      );
      const { error } = await run();
      expect(error).toMatchObject({ code: 'server_shutting_down' });
      expect(scripts).toHaveLength(1);
      expect(seen.settled[0].failure).toBe(error);
    });

    it('changes nothing for a stream that ends before the deadline', async () => {
      const stop = new Cancellation();
      const { run } = streamedCall([{ chunks: words('Sunny', ' today.') }], {}, {}, stop);
      const { events, error } = await run();
      stop.abort();
      expect(error).toBeUndefined();
      expect(textOf(events)).toBe('Sunny today.');
    });
  });
});
