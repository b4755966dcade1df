import type { Message, StopReason } from '@anthropic-ai/sdk/resources/messages';
import type { ChatCompletion, CompletionUsage } from '../provider-adapter';
import type { AnswerFormat } from './request';

// Anthropic Message -> OpenAI ChatCompletion.

export type FinishReason = NonNullable<ChatCompletion['choices'][number]['finish_reason']>;
type ToolCall = NonNullable<ChatCompletion['choices'][number]['message']['tool_calls']>[number];

/** A completion in OpenAI's shape; the input of the answer tool (see `answerFormat`) becomes the content. */
export function toChatCompletion(message: Message, modelId: string, answer?: AnswerFormat, created = nowSeconds()): ChatCompletion {
  let text = message.content.map((block) => (block.type === 'text' ? block.text : '')).join('');
  const answerBlock = answer && message.content.find((block) => block.type === 'tool_use' && block.name === answer.name);
  if (answerBlock?.type === 'tool_use') text += answerText(answerBlock.input, answer!);
  const toolCalls: ToolCall[] = message.content.flatMap((block) =>
    block.type === 'tool_use' && block !== answerBlock
      ? [{ id: block.id, type: 'function' as const, function: { name: block.name, arguments: JSON.stringify(block.input ?? {}) } }]
      : [],
  );
  return {
    id: message.id,
    object: 'chat.completion',
    created,
    model: modelId,
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: text === '' && toolCalls.length > 0 ? null : text,
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: toFinishReason(message.stop_reason, toolCalls.length > 0),
        logprobs: null,
      },
    ],
    usage: toUsage(message.usage),
  };
}

/** The answer tool's input as the completion's text (its `value` when the schema was wrapped). */
export function answerText(input: unknown, answer: AnswerFormat): string {
  const value = answer.wrapped ? (input as { value?: unknown } | null)?.value : input;
  return JSON.stringify(value ?? {});
}

export function toFinishReason(stopReason: StopReason | null | undefined, hasToolCalls: boolean): FinishReason {
  switch (stopReason) {
    case 'max_tokens':
    case 'model_context_window_exceeded':
      return 'length';
    case 'tool_use':
      // Only tools Anthropic ran itself would leave no call for the client to make.
      return hasToolCalls ? 'tool_calls' : 'stop';
    case 'refusal':
      return 'content_filter';
    default:
      return 'stop'; // end_turn, stop_sequence, pause_turn
  }
}

export interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}

/**
 * Anthropic counts cache reads and writes apart from input_tokens; OpenAI's prompt_tokens include
 * them. Writes are detailed as `cache_write_tokens` (OpenRouter's name): they are billed at the
 * catalog's cache_write_price.
 */
export function toUsage(usage: AnthropicUsage): CompletionUsage {
  const cached = usage.cache_read_input_tokens ?? 0;
  const prompt = (usage.input_tokens ?? 0) + cached + (usage.cache_creation_input_tokens ?? 0);
  const completion = usage.output_tokens ?? 0;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached, ...(usage.cache_creation_input_tokens ? { cache_write_tokens: usage.cache_creation_input_tokens } : {}) },
  };
}

export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
