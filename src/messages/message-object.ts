import type { Message } from '@anthropic-ai/sdk/resources/messages';
import { randomUUID } from 'node:crypto';
import type { ChatCompletionResponse, XService } from '../chat/completion-types';
import type { CompletionUsage } from '../providers/provider-adapter';

/**
 * The Anthropic `message` object the Messages API answers with, built from the chat core's
 * completion; its shape follows `@anthropic-ai/sdk`'s `Message` type, plus our `x_service`.
 */

export type StopReason = 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'refusal';

export type ResponseBlock = { type: 'text'; text: string } | { type: 'tool_use'; id: string; name: string; input: Record<string, unknown> };

export interface MessageUsage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number | null;
  cache_read_input_tokens: number | null;
}

/** `x_service` of a message: the chat core's, and the cap it was lowered to when max_tokens was above the model's limit. */
export type MessageXService = XService & { max_tokens_lowered_to?: number };

export interface MessageObject {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: ResponseBlock[];
  stop_reason: StopReason | null;
  stop_sequence: string | null;
  usage: MessageUsage;
  x_service: MessageXService;
}

/**
 * The message an Anthropic deployment answered, as it answered it (thinking with signatures,
 * text with citations, tool_use, its stop reason and usage with the cache fields), under our id,
 * the catalog's model id and our `x_service`.
 */
export type NativeMessageObject = Omit<Message, 'id' | 'model'> & { id: string; model: string; x_service: MessageXService };

export function nativeMessageOf(id: string, native: Message, completion: ChatCompletionResponse, maxTokensLoweredTo?: number): NativeMessageObject {
  const { id: _upstreamId, model: _upstreamModel, ...answer } = native;
  return { id, model: completion.model, ...answer, x_service: xServiceOf(completion.x_service, maxTokensLoweredTo) };
}

export function newMessageId(): string {
  // randomUUID draws from a cached pool of entropy; randomBytes asked the system for each id (bench:chat's profile).
  return `msg_${randomUUID().replaceAll('-', '')}`;
}

/** The message of a plain completion: its text, then its tool calls, never an empty text block. */
export function messageOf(id: string, completion: ChatCompletionResponse, maxTokensLoweredTo?: number): MessageObject {
  const choice = completion.choices[0];
  const message = choice?.message;
  const content: ResponseBlock[] = [];
  const text = message?.content || message?.refusal;
  if (text) content.push({ type: 'text', text });
  for (const call of message?.tool_calls ?? []) {
    if (call.type !== 'function') continue;
    content.push({ type: 'tool_use', id: call.id, name: call.function.name, input: toolInputOf(call.function.arguments) });
  }
  const refused = Boolean(message?.refusal) && !message?.content;
  return {
    id,
    type: 'message',
    role: 'assistant',
    model: completion.model,
    content,
    stop_reason: stopReasonOf(refused ? 'content_filter' : (choice?.finish_reason ?? null), content.some((block) => block.type === 'tool_use')),
    stop_sequence: null,
    usage: usageOf(completion.usage),
    x_service: xServiceOf(completion.x_service, maxTokensLoweredTo),
  };
}

/**
 * Chat's finish reason as Anthropic's stop reason. OpenAI says `stop` both for the end of a turn
 * and for a stop sequence, without naming which: both are `end_turn` here (docs/api.md).
 */
export function stopReasonOf(finishReason: string | null, calledTools: boolean): StopReason {
  if (calledTools || finishReason === 'tool_calls' || finishReason === 'function_call') return 'tool_use';
  if (finishReason === 'length') return 'max_tokens';
  if (finishReason === 'content_filter') return 'refusal';
  return 'end_turn';
}

/** Anthropic counts cached input apart from `input_tokens`; OpenAI's prompt_tokens include it. */
export function usageOf(usage: CompletionUsage | undefined): MessageUsage {
  const cached = usage?.prompt_tokens_details?.cached_tokens ?? 0;
  return {
    input_tokens: Math.max(0, (usage?.prompt_tokens ?? 0) - cached),
    output_tokens: usage?.completion_tokens ?? 0,
    cache_creation_input_tokens: null,
    cache_read_input_tokens: cached,
  };
}

export function xServiceOf(xService: XService, maxTokensLoweredTo: number | undefined): MessageXService {
  return maxTokensLoweredTo === undefined ? xService : { ...xService, max_tokens_lowered_to: maxTokensLoweredTo };
}

/** A tool call's arguments as tool_use's `input` (an object); arguments that are not a JSON object are kept under `arguments`. */
export function toolInputOf(argumentsJson: string): Record<string, unknown> {
  if (argumentsJson.trim() === '') return {};
  try {
    const parsed: unknown = JSON.parse(argumentsJson);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed)) return parsed as Record<string, unknown>;
  } catch {
    // kept below, as the model wrote it
  }
  return { arguments: argumentsJson };
}
