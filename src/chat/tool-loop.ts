import type { ChatCompletion, ChatMessage, CompletionUsage } from '../providers/provider-adapter';
import type { ServerToolCall, ToolOutcome } from '../tools/tools.service';
import type { BillingSession, HoldLimit } from '../billing/billing-session';

/** One model call, as far as the loop needs it. */
export interface ModelTurn {
  /** What the model said on the first choice, if anything. */
  content: string | null;
  /** Its calls of the assistant's server tools: the loop runs them. */
  serverCalls: ServerToolCall[];
  /** Whether it also called the client's own functions: then the turn goes back to the client. */
  calledClientTools: boolean;
  /** The provider's usage report, if it sent one, and the text and arguments generated: what the call is billed on. */
  usage?: CompletionUsage;
  generated: string;
  /** Set when a stream broke after it started: the call is billed for what it generated, then the loop fails with this. */
  broken?: unknown;
}

/** The billing session, as the loop uses it. */
export type LoopBilling = Pick<BillingSession, 'spend' | 'calling' | 'meter' | 'addToolCall' | 'holdNextIteration' | 'holdNextCall' | 'nextOutputCap'>;

/** One request's tool loop: how to call the model and run a tool, plain or streamed. */
export interface ToolLoop<T extends ModelTurn> {
  /** The prompt of the first call. */
  messages: ChatMessage[];
  /** 1 without server tools; the assistant's limit with them. */
  maxIterations: number;
  billing: LoopBilling;
  /**
   * Makes one model call; throws when it got no answer. `last`: no server tool will run after
   * this call, so the model is to answer rather than call tools. `outputCap`: a lower output
   * cap than the request's, for a later iteration whose prompt leaves less of the context.
   */
  callModel(messages: ChatMessage[], last: boolean, outputCap?: number): Promise<T>;
  /** Runs one server tool call (never throws for the tool's own failure, only when aborted). */
  runTool(call: ServerToolCall): Promise<ToolOutcome>;
  /** Told when server tools start running; what it returns is called once they are done. */
  toolsRunning?(): () => void;
}

/** Why a loop ended before the model answered: the wallet could not cover another iteration, or its prompt would not fit the model's context. */
export type CutShort = 'funds' | 'context';

export interface LoopEnd<T extends ModelTurn> {
  /** The last model call: the answer, or the client's tool calls. */
  turn: T;
  /** Set when the answer is cut short (finish_reason `length`). */
  cutShort: CutShort | null;
  /** With `funds`: which limit could not cover another iteration. */
  limit?: HoldLimit;
}

/**
 * The tool loop of plain and streamed completions alike. Each model call is one iteration;
 * server tools (web_search, file_search) run here and their results go back to the model.
 * The loop ends when the model answers, calls a client tool, reaches the iteration limit,
 * or the wallet cannot cover another iteration, or the next prompt (with the tools' results)
 * would leave no room for an answer in the model's context: then it ends cut short, charged
 * for what ran, rather than sending a prompt the upstream must refuse. Every call is billed as soon as it returns;
 * a failure (upstream, a tool aborted, the database) is thrown for the caller to settle.
 */
export async function runToolLoop<T extends ModelTurn>(loop: ToolLoop<T>): Promise<LoopEnd<T>> {
  const { billing, maxIterations } = loop;
  let messages = loop.messages;
  let outputCap: number | undefined;
  for (;;) {
    billing.calling(messages);
    const turn = await loop.callModel(messages, billing.spend.iterations + 1 >= maxIterations, outputCap);
    // Billed even when the stream broke: a client that went away pays for what was generated.
    await billing.meter(messages, turn.usage, turn.generated);
    if (turn.broken !== undefined) throw turn.broken;
    if (turn.serverCalls.length === 0 || turn.calledClientTools || billing.spend.iterations >= maxIterations) {
      return { turn, cutShort: null };
    }
    const held = await billing.holdNextIteration(messages, turn.serverCalls.length);
    if (held !== true) return { turn, cutShort: 'funds', limit: held };
    const done = loop.toolsRunning?.();
    try {
      messages = [...messages, assistantTurn(turn.content, turn.serverCalls), ...(await runTools(loop, turn.serverCalls))];
    } finally {
      done?.();
    }
    outputCap = await billing.nextOutputCap(messages);
    if (outputCap === 0) return { turn, cutShort: 'context' };
    // The tools' results may be longer than the hold assumed: the next call is covered as it will be sent.
    const covered = await billing.holdNextCall(messages, outputCap);
    if (covered !== true) return { turn, cutShort: 'funds', limit: covered };
  }
}

/** Runs the server tool calls of one iteration side by side; returns their tool messages. */
async function runTools(loop: ToolLoop<ModelTurn>, calls: ServerToolCall[]): Promise<ChatMessage[]> {
  const outcomes = await Promise.all(calls.map((call) => loop.runTool(call)));
  return outcomes.map((outcome, index) => {
    if (outcome.ran) loop.billing.addToolCall(calls[index].name, outcome.costMicros);
    return { role: 'tool', tool_call_id: calls[index].id, content: outcome.content };
  });
}

/** The assistant message of an iteration that called server tools, as the next call's history. */
function assistantTurn(content: string | null, calls: ServerToolCall[]): ChatMessage {
  return {
    role: 'assistant',
    content,
    tool_calls: calls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })),
  };
}

/** The answer when the wallet cannot cover another iteration: what the model said so far, cut short. */
export const OUT_OF_FUNDS_NOTE = 'I could not finish: the wallet balance does not cover another step.';
/** The same, when it is the API key's spending limit that cannot. */
export const KEY_LIMIT_NOTE = "I could not finish: this API key's spending limit does not cover another step.";
/** The same, for a widget's visitor when its daily cap cannot (in the visitor's words: no wallet, no key). */
export const WIDGET_CAP_NOTE = 'I could not finish: this chat is resting for today.';
/** The answer when the tools' results would not fit the model's context with room for an answer. */
export const OUT_OF_CONTEXT_NOTE = "I could not finish: the tools' results do not fit in the model's context window.";
const FUNDS_NOTES: Record<HoldLimit, string> = { wallet: OUT_OF_FUNDS_NOTE, key: KEY_LIMIT_NOTE, widget: WIDGET_CAP_NOTE };

/** Why a loop was cut short, in the words the client reads: which limit, or the context. */
export function cutShortNote(end: Pick<LoopEnd<ModelTurn>, 'cutShort' | 'limit'>): string {
  return end.cutShort === 'context' ? OUT_OF_CONTEXT_NOTE : FUNDS_NOTES[end.limit ?? 'wallet'];
}

/** A plain completion as one turn of the loop. */
export interface CompletionTurn extends ModelTurn {
  completion: ChatCompletion;
}

export function completionTurn(completion: ChatCompletion, isServerTool: (name: string) => boolean): CompletionTurn {
  const message = completion.choices[0]?.message;
  const calls = message?.tool_calls ?? [];
  const serverCalls = calls.flatMap((call) =>
    call.type === 'function' && isServerTool(call.function.name)
      ? [{ id: call.id, name: call.function.name as ServerToolCall['name'], arguments: call.function.arguments }]
      : [],
  );
  return {
    completion,
    content: message?.content ?? null,
    serverCalls,
    calledClientTools: calls.length > serverCalls.length,
    usage: completion.usage,
    generated: textOf(completion),
  };
}

/** The completion the client gets: its own tool calls only, and a note of why when the loop was cut short. */
export function answerOf(end: LoopEnd<CompletionTurn>, isServerTool: (name: string) => boolean): ChatCompletion {
  const completion = end.cutShort ? cutShort(end.turn.completion, cutShortNote(end)) : end.turn.completion;
  return { ...completion, choices: completion.choices.map((choice) => withoutServerCalls(choice, isServerTool)) };
}

function cutShort(completion: ChatCompletion, note: string): ChatCompletion {
  return {
    ...completion,
    choices: completion.choices.map((choice) => ({
      ...choice,
      message: { ...choice.message, content: choice.message?.content ? `${choice.message.content}\n\n${note}` : note, tool_calls: undefined },
      finish_reason: 'length',
    })),
  };
}

/** The caller only sees its own tool calls; server tool calls never leave the service. */
function withoutServerCalls(choice: ChatCompletion['choices'][number], isServer: (name: string) => boolean): ChatCompletion['choices'][number] {
  const calls = choice.message?.tool_calls;
  if (!calls?.length) return choice;
  const kept = calls.filter((call) => call.type !== 'function' || !isServer(call.function.name));
  if (kept.length === calls.length) return choice;
  return {
    ...choice,
    message: { ...choice.message, content: choice.message.content ?? '', tool_calls: kept.length ? kept : undefined },
    finish_reason: kept.length ? 'tool_calls' : 'stop',
  };
}

/** What a completion generated, as a stream's `generated` counts it: text and tool-call arguments. */
function textOf(completion: ChatCompletion): string {
  return completion.choices
    .map((choice) =>
      [choice.message?.content ?? '', ...(choice.message?.tool_calls ?? []).map((call) => (call.type === 'function' ? call.function.arguments : ''))].join(''),
    )
    .join('');
}
