import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { decode, encode } from 'gpt-tokenizer';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatMessage,
  FunctionTool,
  ProviderAdapter,
  ProviderRequest,
} from './provider-adapter';
import { countPromptTokensAsync, countTextTokens, PLAIN_TEXT } from './tokens';

type ChunkDelta = ChatCompletionChunk['choices'][number]['delta'];
type FinishReason = ChatCompletionChunk['choices'][number]['finish_reason'];

type Reply =
  | { kind: 'text'; text: string; finishReason: 'stop' | 'length' }
  | { kind: 'tool_call'; id: string; name: string; arguments: string };

/**
 * A built-in model for development without provider keys. Deterministic: it says that it
 * is a simulator and echoes the last message; when the request offers a function tool
 * whose name the last user message mentions, it calls that tool. Tokens are counted with
 * the real tokenizer, so billing works exactly as with a real provider.
 */
export class SimulatorAdapter implements ProviderAdapter {
  constructor(private readonly options: { wordDelayMs: number }) {}

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const reply = simulate(request);
    return {
      id: completionId(request),
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: request.model.id,
      choices: [
        reply.kind === 'text'
          ? {
              index: 0,
              message: { role: 'assistant', content: reply.text, refusal: null },
              finish_reason: reply.finishReason,
              logprobs: null,
            }
          : {
              index: 0,
              message: {
                role: 'assistant',
                content: null,
                refusal: null,
                tool_calls: [{ id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }],
              },
              finish_reason: 'tool_calls',
              logprobs: null,
            },
      ],
      usage: await usageOf(request, reply),
    };
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const reply = simulate(request);
    const id = completionId(request);
    const created = Math.floor(Date.now() / 1000);
    const chunk = (delta: ChunkDelta, finishReason: FinishReason = null) =>
      ({
        id,
        object: 'chat.completion.chunk',
        created,
        model: request.model.id,
        choices: [{ index: 0, delta, finish_reason: finishReason, logprobs: null }],
      }) satisfies ChatCompletionChunk;

    yield chunk({ role: 'assistant', content: '' });
    if (reply.kind === 'text') {
      for (const word of reply.text.split(/(?<= )/)) {
        if (this.options.wordDelayMs > 0) await sleep(this.options.wordDelayMs, undefined, { signal: request.signal });
        request.signal.throwIfAborted();
        yield chunk({ content: word });
      }
      yield chunk({}, reply.finishReason);
    } else {
      yield chunk({
        tool_calls: [{ index: 0, id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }],
      });
      yield chunk({}, 'tool_calls');
    }
    yield { id, object: 'chat.completion.chunk', created, model: request.model.id, choices: [], usage: await usageOf(request, reply) };
  }
}

function simulate(request: ProviderRequest): Reply {
  const last = request.messages[request.messages.length - 1];
  const lastText = textOf(last);
  const tool = last?.role === 'user' ? mentionedTool(request.tools ?? [], lastText) : undefined;
  if (tool) {
    const args = JSON.stringify(argumentsFor(tool, lastText));
    return { kind: 'tool_call', id: `call_sim_${hash(`${tool.function.name}:${args}`).slice(0, 24)}`, name: tool.function.name, arguments: args };
  }
  const text =
    last?.role === 'tool'
      ? `[simulator] The tool returned: ${excerpt(lastText, 400)}`
      : `[simulator] This answer comes from the built-in simulator, not a real model: no API key is configured ` +
        `for the provider of ${request.model.id} (${request.model.provider}). You said: "${excerpt(lastText, 400)}"`;
  const tokens = encode(text, PLAIN_TEXT);
  if (tokens.length <= request.maxTokens) return { kind: 'text', text, finishReason: 'stop' };
  return { kind: 'text', text: decode(tokens.slice(0, request.maxTokens)), finishReason: 'length' };
}

/** The prompt may be megabytes: it is counted as the chat service counts it, without holding the event loop. */
async function usageOf(request: ProviderRequest, reply: Reply) {
  const prompt = await countPromptTokensAsync(request.messages, request.tools);
  const completion = countTextTokens(reply.kind === 'text' ? reply.text : `${reply.name}${reply.arguments}`);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

function mentionedTool(tools: FunctionTool[], text: string): FunctionTool | undefined {
  return tools.find((tool) => tool.type === 'function' && text.includes(tool.function.name));
}

/** Fills the required parameters of a tool's schema: strings get the user's words. */
function argumentsFor(tool: FunctionTool, text: string): Record<string, unknown> {
  const schema = (tool.function.parameters ?? {}) as { properties?: Record<string, { type?: string }>; required?: string[] };
  const args: Record<string, unknown> = {};
  for (const name of schema.required ?? Object.keys(schema.properties ?? {})) {
    const type = schema.properties?.[name]?.type;
    args[name] = type === 'number' || type === 'integer' ? 1 : type === 'boolean' ? true : excerpt(text, 200);
  }
  return args;
}

function textOf(message: ChatMessage | undefined): string {
  const content = (message as { content?: unknown } | undefined)?.content;
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .map((part: { type?: string; text?: string }) => (part.type === 'text' ? (part.text ?? '') : '[image]'))
      .join(' ');
  }
  return '';
}

function excerpt(text: string, max: number): string {
  // Only the beginning of a long text can be shown: it alone is flattened.
  const flat = text.slice(0, max * 8).replace(/\s+/g, ' ').trim();
  return flat.length <= max ? flat : `${flat.slice(0, max - 1)}…`;
}

/** Deterministic: the same messages give the same id. Long texts weigh in by their length and ends, not all their bytes. */
function completionId(request: ProviderRequest): string {
  const fingerprint = JSON.stringify(request.messages, (_key, value: unknown) =>
    typeof value === 'string' && value.length > 1_024 ? `${value.length}:${value.slice(0, 512)}${value.slice(-512)}` : value,
  );
  return `chatcmpl-sim${hash(fingerprint).slice(0, 24)}`;
}

function hash(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}
