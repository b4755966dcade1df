import { setTimeout as sleep } from 'node:timers/promises';
import { decode } from 'gpt-tokenizer';
import type { ChatCompletion, ChatCompletionChunk, EmbeddingRequest, EmbeddingResult, ProviderAdapter, ProviderRequest } from '../provider-adapter';
import { simulatedEmbedding, simulatedPromptTokens } from './embeddings';
import { countPromptTokensAsync, countTextTokens, encodeText } from '../tokens';
import { hash, Reply, simulate, simulatorOptions } from './replies';

type ChunkDelta = ChatCompletionChunk['choices'][number]['delta'];
type FinishReason = ChatCompletionChunk['choices'][number]['finish_reason'];
type TokenLogprob = NonNullable<NonNullable<ChatCompletion['choices'][number]['logprobs']>['content']>[number];

/**
 * A built-in model for development without provider keys. Deterministic: it says that it
 * is a simulator and echoes the last message; when the request offers a function tool
 * whose name the last user message mentions, it calls that tool, and it searches an
 * assistant's documents (file_search) for a question that is not small talk. It honours what changes
 * the answer's shape (`tool_choice`, `response_format`, `stop`, `n`, `logprobs`), so that
 * clients relying on them work before any key is set. Tokens are counted with the real
 * tokenizer, so billing works exactly as with a real provider.
 */
export class SimulatorAdapter implements ProviderAdapter {
  constructor(private readonly options: { wordDelayMs: number }) {}

  async complete(request: ProviderRequest): Promise<ChatCompletion> {
    const options = simulatorOptions(request.extra);
    const replies = simulate(request, options);
    // The choices are alike: each distinct text is scored once, however many choices there are.
    const logprobsOf = remembered((text: string) => tokenLogprobs(text, options.topLogprobs ?? 0));
    return {
      id: completionId(request),
      object: 'chat.completion',
      created: Math.floor(Date.now() / 1000),
      model: request.model.id,
      choices: replies.map((reply, index) =>
        reply.kind === 'text'
          ? {
              index,
              message: { role: 'assistant', content: reply.text, refusal: null },
              finish_reason: reply.finishReason,
              logprobs: options.topLogprobs === undefined ? null : { content: logprobsOf(reply.text), refusal: null },
            }
          : {
              index,
              message: {
                role: 'assistant',
                content: null,
                refusal: null,
                tool_calls: [{ id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }],
              },
              finish_reason: reply.finishReason,
              logprobs: null,
            },
      ),
      usage: await usageOf(request, replies),
    };
  }

  /** Deterministic unit vectors (see simulatedEmbedding), of the model's size or the request's `dimensions`. */
  embed(request: EmbeddingRequest): Promise<EmbeddingResult> {
    const { model, input } = request;
    const dimensions = request.dimensions ?? model.embedding?.dimensions ?? 256;
    const vectors = input.map((item: string | number[]) => simulatedEmbedding(model, item, dimensions));
    return Promise.resolve({ vectors, promptTokens: simulatedPromptTokens(input) });
  }

  async *stream(request: ProviderRequest): AsyncIterable<ChatCompletionChunk> {
    const options = simulatorOptions(request.extra);
    const replies = simulate(request, options);
    const id = completionId(request);
    const created = Math.floor(Date.now() / 1000);
    const chunk = (index: number, delta: ChunkDelta, finishReason: FinishReason = null, logprobs: TokenLogprob[] | null = null) =>
      ({
        id,
        object: 'chat.completion.chunk',
        created,
        model: request.model.id,
        choices: [{ index, delta, finish_reason: finishReason, logprobs: logprobs && { content: logprobs, refusal: null } }],
      }) satisfies ChatCompletionChunk;

    // The choices advance together, one piece each per round, as OpenAI interleaves them.
    const piecesOf = remembered((reply: Reply) => streamPieces(reply, options.topLogprobs));
    const pieces = replies.map(piecesOf);
    for (let index = 0; index < replies.length; index++) yield chunk(index, { role: 'assistant', content: '' });
    for (let round = 0; round <= Math.max(...pieces.map((list) => list.length)); round++) {
      if (this.options.wordDelayMs > 0) await sleep(this.options.wordDelayMs, undefined, { signal: request.cancellation.signal });
      if (request.cancellation.aborted) throw request.cancellation.reason;
      for (let index = 0; index < replies.length; index++) {
        const piece = pieces[index][round];
        if (piece) yield chunk(index, piece.delta, null, piece.logprobs ?? null);
        else if (round === pieces[index].length) yield chunk(index, {}, replies[index].finishReason);
      }
    }
    yield { id, object: 'chat.completion.chunk', created, model: request.model.id, choices: [], usage: await usageOf(request, replies) };
  }
}

/** `compute`, remembered by its argument. */
function remembered<K, V>(compute: (key: K) => V): (key: K) => V {
  const known = new Map<K, V>();
  return (key) => {
    if (!known.has(key)) known.set(key, compute(key));
    return known.get(key)!;
  };
}

/** Usage of all choices: the prompt once, every choice's output. */
async function usageOf(request: ProviderRequest, replies: Reply[]) {
  // The prompt may be megabytes: it is counted as the chat service counts it, without holding the event loop.
  const prompt = await countPromptTokensAsync(request.messages, request.tools);
  let completion = 0;
  for (const reply of replies) completion += countTextTokens(reply.kind === 'text' ? reply.text : `${reply.name}${reply.arguments}`);
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
}

interface StreamPiece {
  delta: ChunkDelta;
  logprobs?: TokenLogprob[];
}

/** A reply as stream deltas: words of text (tokens, with their log-probabilities, when asked), or the whole tool call. */
function streamPieces(reply: Reply, topLogprobs: number | undefined): StreamPiece[] {
  if (reply.kind === 'tool_call') {
    return [{ delta: { tool_calls: [{ index: 0, id: reply.id, type: 'function', function: { name: reply.name, arguments: reply.arguments } }] } }];
  }
  if (topLogprobs === undefined) return reply.text.split(/(?<= )/).map((word) => ({ delta: { content: word } }));
  return tokenPieces(reply.text, topLogprobs);
}

/**
 * The text as pieces of whole characters, each with the log-probabilities of its tokens: a
 * character split across tokens (an emoji, a rare script) goes out with its last token.
 */
function tokenPieces(text: string, topLogprobs: number): StreamPiece[] {
  const entries = tokenLogprobs(text, topLogprobs);
  const tokens = encodeText(text);
  const pieces: StreamPiece[] = [];
  let sent = 0;
  let pending: number[] = [];
  tokens.forEach((token, position) => {
    pending.push(position);
    const piece = decode(pending.map((at) => tokens[at]));
    if (piece && text.startsWith(piece, sent)) {
      pieces.push({ delta: { content: piece }, logprobs: pending.map((at) => entries[at]) });
      sent += piece.length;
      pending = [];
    }
  });
  if (sent < text.length || pending.length > 0) {
    pieces.push({ delta: { content: text.slice(sent) }, logprobs: pending.map((at) => entries[at]) });
  }
  return pieces;
}

/** Frequent tokens, offered as the alternatives a real model would have weighed. */
const ALTERNATIVES = [
  ' the', ' a', ',', '.', ' and', ' to', ' of', ' in', ' is', ' that', ' it', ' for',
  ' you', ' on', ' with', ' as', ' this', ' be', ' are', ' was', ' I', ' not', ' or', ' at',
];

/**
 * Plausible log-probabilities, one entry per token of the text, shaped as OpenAI's. The
 * chosen token is always the likeliest (probability above one half); the alternatives share
 * what is left, halving each time, so that the probabilities never add up to more than one.
 */
export function tokenLogprobs(text: string, topLogprobs: number): TokenLogprob[] {
  return encodeText(text).map((id, position) => {
    const token = decode([id]);
    const seed = smallHash(`${position}:${token}`);
    const probability = 1 - (1e-4 + (seed % 10_000) / 25_000);
    const alternatives = ALTERNATIVES.filter((candidate) => candidate !== token);
    const offset = seed % alternatives.length;
    const top = [{ token, logprob: Math.log(probability), bytes: bytesOf(token) }];
    for (let rank = 1; rank < topLogprobs; rank++) {
      const alternative = alternatives[(offset + rank) % alternatives.length];
      top.push({ token: alternative, logprob: Math.log((1 - probability) / 2 ** rank), bytes: bytesOf(alternative) });
    }
    return { token, logprob: Math.log(probability), bytes: bytesOf(token), top_logprobs: topLogprobs === 0 ? [] : top };
  });
}

function bytesOf(text: string): number[] {
  return [...Buffer.from(text, 'utf8')];
}

/** FNV-1a: a cheap, stable number per token, for log-probabilities that vary but never change. */
function smallHash(text: string): number {
  let value = 0x811c9dc5;
  for (let at = 0; at < text.length; at++) value = Math.imul(value ^ text.charCodeAt(at), 0x01000193) >>> 0;
  return value;
}

/** Deterministic: the same messages give the same id. Long texts weigh in by their length and ends, not all their bytes. */
function completionId(request: ProviderRequest): string {
  const fingerprint = JSON.stringify(request.messages, (_key, value: unknown) =>
    typeof value === 'string' && value.length > 1_024 ? `${value.length}:${value.slice(0, 512)}${value.slice(-512)}` : value,
  );
  return `chatcmpl-sim${hash(fingerprint).slice(0, 24)}`;
}
