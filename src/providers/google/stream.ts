import type { GenerateContentResponse, GenerateContentResponseUsageMetadata } from '@google/genai';
import type { ChatCompletionChunk, ProviderRequest } from '../provider-adapter';
import { completionId, readParts, toFinishReason, toLogprobs, toolCallId, toUsage } from './response';

// Gemini stream events -> OpenAI chunks.

type ChunkChoice = ChatCompletionChunk['choices'][number];
type ToolCallDelta = NonNullable<ChunkChoice['delta']['tool_calls']>[number];

/**
 * Turns the events of `streamGenerateContent` into OpenAI chunks: a role chunk when the first
 * event arrives, text and function calls as they come (a function call arrives whole, so its
 * chunk carries the complete arguments), one chunk with the finish reasons, then the usage.
 */
export class GeminiStreamTranslator {
  private id = '';
  private readonly created = Math.floor(Date.now() / 1000);
  private started = false;
  private blocked = false;
  private usage?: GenerateContentResponseUsageMetadata;
  private readonly choices = new Map<number, { toolCalls: number; finishReason?: string }>();

  constructor(private readonly request: ProviderRequest) {}

  *push(event: GenerateContentResponse): Generator<ChatCompletionChunk> {
    if (!this.started) {
      this.started = true;
      this.id = completionId(event.responseId);
      const count = Math.max(1, event.candidates?.length ?? 1, Number(this.request.extra.n) || 1);
      for (let index = 0; index < count; index++) this.choices.set(index, { toolCalls: 0 });
      yield this.chunk([...this.choices.keys()].map((index) => choice(index, { role: 'assistant', content: '' })));
    }
    if (event.usageMetadata) this.usage = event.usageMetadata;
    if (event.promptFeedback?.blockReason) this.blocked = true;

    const deltas: ChunkChoice[] = [];
    (event.candidates ?? []).forEach((candidate, position) => {
      const index = candidate.index ?? position;
      const state = this.choices.get(index) ?? { toolCalls: 0 };
      this.choices.set(index, state);
      if (candidate.finishReason) state.finishReason = candidate.finishReason;
      const { text, calls } = readParts(candidate.content?.parts);
      const toolCalls: ToolCallDelta[] = calls.map((call) => ({
        index: state.toolCalls++,
        id: toolCallId(),
        type: 'function',
        function: call,
      }));
      if (text.length > 0 || toolCalls.length > 0) {
        const delta = choice(index, { ...(text.length > 0 ? { content: text } : {}), ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}) });
        delta.logprobs = toLogprobs(candidate.logprobsResult, this.request.extra);
        deltas.push(delta);
      }
    });
    if (deltas.length > 0) yield this.chunk(deltas);
  }

  *finish(): Generator<ChatCompletionChunk> {
    if (!this.started) throw new Error('The Gemini stream ended without any event.');
    const states = [...this.choices.entries()];
    if (!this.blocked && !states.some(([, state]) => state.finishReason)) {
      throw new Error('The Gemini stream ended before its finish reason: the answer is incomplete.');
    }
    yield this.chunk(
      states.map(([index, state]) => choice(index, {}, toFinishReason(state.finishReason, state.toolCalls > 0, this.blocked))),
    );
    if (this.usage) {
      yield { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.request.model.id, choices: [], usage: toUsage(this.usage) };
    }
  }

  private chunk(choices: ChunkChoice[]): ChatCompletionChunk {
    return { id: this.id, object: 'chat.completion.chunk', created: this.created, model: this.request.model.id, choices };
  }
}

function choice(index: number, delta: ChunkChoice['delta'], finishReason: ChunkChoice['finish_reason'] = null): ChunkChoice {
  return { index, delta, finish_reason: finishReason, logprobs: null };
}
