import type { ModelDefinition } from '../models/model-catalog';
import type { ChatCompletion, ChatMessage, CompletionUsage } from '../providers/provider-adapter';
import type { ServerToolCall, ToolOutcome } from '../tools/tools.service';
import type { HoldLimit } from '../billing/billing-session';
import { Spend } from '../billing/spend';
import { answerOf, completionTurn, KEY_LIMIT_NOTE, LoopBilling, ModelTurn, OUT_OF_FUNDS_NOTE, runToolLoop, ToolLoop, WIDGET_CAP_NOTE } from './tool-loop';

const MODEL = { id: 'gpt-4o', inputPrice: 250_000, outputPrice: 1_000_000, cachedInputPrice: 125_000 } as ModelDefinition;
const PROMPT: ChatMessage[] = [{ role: 'user', content: 'Weather in Paris?' }];
const USAGE: CompletionUsage = { prompt_tokens: 100, completion_tokens: 10, total_tokens: 110 };
const SEARCH: ServerToolCall = { id: 'call_1', name: 'web_search', arguments: '{"query":"Paris weather"}' };

/** The billing session, in memory: every call metered on the usage given, extensions granted while `funds` lasts. */
class FakeBilling implements LoopBilling {
  readonly spend = new Spend();
  readonly prompts: ChatMessage[][] = [];
  extensions = 0;
  funds = Infinity;
  /** The limit that refuses once extensions run out. */
  refusedBy: HoldLimit = 'wallet';
  /** Set: the next call's prompt, once the tools' results are in, needs more than this limit covers. */
  nextCallRefusedBy: HoldLimit | null = null;
  /** The longest prompt (in messages) that fits the model's context. */
  contextMessages = Infinity;

  calling(messages: ChatMessage[]): void {
    this.prompts.push(messages);
    this.spend.calling(messages);
  }
  async meter(_messages: ChatMessage[], reported: CompletionUsage | undefined): Promise<void> {
    this.spend.addModelCall(MODEL, reported ?? { prompt_tokens: 0, completion_tokens: 0, total_tokens: 0 });
  }
  addToolCall(name: string, micros: bigint): void {
    this.spend.addToolCall(name, micros);
  }
  async holdNextIteration(): Promise<true | HoldLimit> {
    if (this.extensions >= this.funds) return this.refusedBy;
    this.extensions += 1;
    return true;
  }
  async holdNextCall(): Promise<true | HoldLimit> {
    return this.nextCallRefusedBy ?? true;
  }
  async nextOutputCap(messages: ChatMessage[]): Promise<number> {
    return messages.length <= this.contextMessages ? 100 : 0;
  }
}

const answer = (content: string): ModelTurn => ({ content, serverCalls: [], calledClientTools: false, usage: USAGE, generated: content });
const searching = (id = SEARCH.id): ModelTurn => ({ content: null, serverCalls: [{ ...SEARCH, id }], calledClientTools: false, usage: USAGE, generated: SEARCH.arguments });
const found: ToolOutcome = { content: 'Sunny, 24 C.', costMicros: 2_500_000n, ran: true };

/** A loop whose model answers with the turns given, in order, and whose tool always finds something. */
function loopOf(turns: Array<ModelTurn | Error>, fields: Partial<ToolLoop<ModelTurn>> = {}) {
  const billing = new FakeBilling();
  const calls: Array<{ messages: ChatMessage[]; last: boolean }> = [];
  const caps: Array<number | undefined> = [];
  const toolCalls: ServerToolCall[] = [];
  const loop: ToolLoop<ModelTurn> = {
    messages: PROMPT,
    maxIterations: 5,
    billing,
    callModel: async (messages, last, outputCap) => {
      calls.push({ messages, last });
      caps.push(outputCap);
      const turn = turns.shift();
      if (!turn) throw new Error('no more turns');
      if (turn instanceof Error) throw turn;
      return turn;
    },
    runTool: async (call) => {
      toolCalls.push(call);
      return found;
    },
    ...fields,
  };
  return { loop, billing, calls, caps, toolCalls };
}

describe('runToolLoop', () => {
  it('without tools: one call, metered, and its answer', async () => {
    const { loop, billing, calls, toolCalls } = loopOf([answer('Hello.')], { maxIterations: 1 });
    const end = await runToolLoop(loop);
    expect(end).toEqual({ turn: answer('Hello.'), cutShort: null });
    expect(calls).toEqual([{ messages: PROMPT, last: true }]);
    expect(billing.spend.iterations).toBe(1);
    expect(billing.extensions).toBe(0);
    expect(toolCalls).toEqual([]);
  });

  it('runs a server tool, bills it, and gives its result to the next call, which answers', async () => {
    const running: string[] = [];
    const { loop, billing, calls, toolCalls } = loopOf([searching(), answer('Sunny.')], {
      toolsRunning: () => {
        running.push('start');
        return () => running.push('done');
      },
    });
    const end = await runToolLoop(loop);
    expect(end.turn.content).toBe('Sunny.');
    expect(toolCalls).toEqual([SEARCH]);
    expect(running).toEqual(['start', 'done']);
    expect(billing.extensions).toBe(1);
    expect(billing.spend.iterations).toBe(2);
    expect(billing.spend.toolsUsed).toEqual(['web_search']);
    expect(billing.spend.toolMicros).toBe(2_500_000n);
    expect(calls[1].messages).toEqual([
      ...PROMPT,
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'web_search', arguments: SEARCH.arguments } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 24 C.' },
    ]);
  });

  it('does not bill a tool call that could not run', async () => {
    const { loop, billing } = loopOf([searching(), answer('I could not look it up.')], {
      runTool: async () => ({ content: 'web_search needs a query.', costMicros: 0n, ran: false }),
    });
    await runToolLoop(loop);
    expect(billing.spend.toolsUsed).toEqual([]);
    expect(billing.spend.toolMicros).toBe(0n);
  });

  it("returns a turn that calls the client's own tools to the client, without running the server tools of that turn", async () => {
    const mixed: ModelTurn = { ...searching(), calledClientTools: true };
    const { loop, toolCalls, billing } = loopOf([mixed]);
    const end = await runToolLoop(loop);
    expect(end).toEqual({ turn: mixed, cutShort: null });
    expect(toolCalls).toEqual([]);
    expect(billing.extensions).toBe(0);
  });

  it('stops at the iteration limit, telling the last call it is the last', async () => {
    const { loop, calls, toolCalls, billing } = loopOf([searching('a'), searching('b'), searching('c')], { maxIterations: 2 });
    const end = await runToolLoop(loop);
    expect(end.turn.serverCalls[0].id).toBe('b');
    expect(end.cutShort).toBeNull();
    expect(calls.map((call) => call.last)).toEqual([false, true]);
    expect(toolCalls.map((call) => call.id)).toEqual(['a']);
    expect(billing.spend.iterations).toBe(2);
  });

  it('ends cut short when the wallet cannot cover another iteration, running no tool', async () => {
    const { loop, billing, toolCalls } = loopOf([searching(), searching(), answer('never')]);
    billing.funds = 1;
    const end = await runToolLoop(loop);
    expect(end.cutShort).toBe('funds');
    expect(end.limit).toBe('wallet');
    expect(end.turn.serverCalls).toHaveLength(1);
    expect(toolCalls).toHaveLength(1);
    expect(billing.spend.iterations).toBe(2);
  });

  it('says which limit ended it: the widget\'s cap or the key\'s', async () => {
    for (const limit of ['widget', 'key'] as const) {
      const { loop, billing, toolCalls } = loopOf([searching(), answer('never')]);
      billing.funds = 0;
      billing.refusedBy = limit;
      const end = await runToolLoop(loop);
      expect(end).toMatchObject({ cutShort: 'funds', limit });
      expect(toolCalls).toHaveLength(0);
    }
  });

  it('ends cut short after the tools ran, without calling the model again, when their results make the next call dearer than a limit covers', async () => {
    const { loop, billing, calls, toolCalls } = loopOf([searching(), answer('never')]);
    billing.nextCallRefusedBy = 'widget';
    const end = await runToolLoop(loop);
    expect(end).toMatchObject({ cutShort: 'funds', limit: 'widget' });
    expect(calls).toHaveLength(1);
    expect(toolCalls).toHaveLength(1);
    expect(billing.spend.toolsUsed).toEqual(['web_search']);
  });

  it('asks a later call for the output cap its prompt leaves of the context', async () => {
    const { loop, caps } = loopOf([searching(), answer('Sunny.')]);
    await runToolLoop(loop);
    // The first call: the request's cap; the second: what FakeBilling.nextOutputCap left.
    expect(caps).toEqual([undefined, 100]);
  });

  it('ends cut short when the next prompt would not fit the context, after the tools ran and without calling the model again', async () => {
    const { loop, billing, calls, toolCalls } = loopOf([searching(), answer('never')]);
    // The prompt, the assistant's tool call and its result: 3 messages do not fit.
    billing.contextMessages = 2;
    const end = await runToolLoop(loop);
    expect(end.cutShort).toBe('context');
    expect(calls).toHaveLength(1);
    expect(toolCalls).toHaveLength(1);
    expect(billing.spend.iterations).toBe(1);
    expect(billing.spend.toolsUsed).toEqual(['web_search']);
  });

  it('fails with an upstream error mid-loop, after billing the calls that were answered', async () => {
    const upstream = new Error('502 from the provider');
    const { loop, billing } = loopOf([searching(), upstream]);
    await expect(runToolLoop(loop)).rejects.toBe(upstream);
    expect(billing.spend.iterations).toBe(1);
    expect(billing.spend.toolsUsed).toEqual(['web_search']);
    // The prompt of the call that got no answer is known, for a client that left to pay for it.
    expect(billing.spend.unansweredPrompt).toHaveLength(3);
  });

  it('bills a stream that broke for what it generated, then fails with its error', async () => {
    const stall = new Error('stalled');
    const { loop, billing, toolCalls } = loopOf([{ ...searching(), broken: stall }]);
    await expect(runToolLoop(loop)).rejects.toBe(stall);
    expect(billing.spend.iterations).toBe(1);
    expect(toolCalls).toEqual([]);
  });

  it('stops when aborted while tools run: no further model call', async () => {
    const client = new AbortController();
    const { loop, calls } = loopOf([searching(), answer('never')], {
      runTool: (call) =>
        new Promise<ToolOutcome>((_, reject) => {
          client.signal.addEventListener('abort', () => reject(Object.assign(new Error(`${call.name} aborted`), { name: 'AbortError' })));
        }),
    });
    const ended = runToolLoop(loop);
    setImmediate(() => client.abort());
    await expect(ended).rejects.toThrow('web_search aborted');
    expect(calls).toHaveLength(1);
  });
});

describe('plain completions in the loop', () => {
  const isServerTool = (name: string) => name === 'web_search';
  const completion = (message: ChatCompletion['choices'][number]['message'], finish: 'stop' | 'tool_calls' = 'tool_calls'): ChatCompletion => ({
    id: 'chatcmpl-1',
    object: 'chat.completion',
    created: 0,
    model: 'gpt-4o-2024-08-06',
    choices: [{ index: 0, message, finish_reason: finish, logprobs: null }],
    usage: USAGE,
  });
  const toolCall = (id: string, name: string) => ({ id, type: 'function' as const, function: { name, arguments: '{"query":"x"}' } });

  it('tells server calls from client calls, and counts what was generated', () => {
    const turn = completionTurn(
      completion({ role: 'assistant', content: null, refusal: null, tool_calls: [toolCall('a', 'web_search'), toolCall('b', 'get_weather')] }),
      isServerTool,
    );
    expect(turn.serverCalls).toEqual([{ id: 'a', name: 'web_search', arguments: '{"query":"x"}' }]);
    expect(turn.calledClientTools).toBe(true);
    expect(turn.generated).toBe('{"query":"x"}{"query":"x"}');
    expect(turn.usage).toEqual(USAGE);
  });

  it('never shows the client a server call: an answer at the iteration limit finishes with stop', () => {
    const turn = completionTurn(completion({ role: 'assistant', content: 'Let me look.', refusal: null, tool_calls: [toolCall('a', 'web_search')] }), isServerTool);
    const shown = answerOf({ turn, cutShort: null }, isServerTool);
    expect(shown.choices[0]).toMatchObject({ finish_reason: 'stop', message: { content: 'Let me look.', tool_calls: undefined } });
  });

  it('adds the out-of-funds note to an answer cut short', () => {
    const turn = completionTurn(completion({ role: 'assistant', content: 'So far:', refusal: null, tool_calls: [toolCall('a', 'web_search')] }), isServerTool);
    const shown = answerOf({ turn, cutShort: 'funds' }, isServerTool);
    expect(shown.choices[0]).toMatchObject({ finish_reason: 'length', message: { content: `So far:\n\n${OUT_OF_FUNDS_NOTE}`, tool_calls: undefined } });
  });

  it("names the limit that cut the loop short: the key's, or the widget's in a visitor's words", () => {
    const turn = completionTurn(completion({ role: 'assistant', content: null, refusal: null, tool_calls: [toolCall('a', 'web_search')] }), isServerTool);
    expect(answerOf({ turn, cutShort: 'funds', limit: 'key' }, isServerTool).choices[0].message.content).toBe(KEY_LIMIT_NOTE);
    expect(KEY_LIMIT_NOTE).toMatch(/API key's spending limit/);
    expect(answerOf({ turn, cutShort: 'funds', limit: 'widget' }, isServerTool).choices[0].message.content).toBe(WIDGET_CAP_NOTE);
    expect(WIDGET_CAP_NOTE).not.toMatch(/wallet|key/);
  });
});
