import { randomInt } from 'node:crypto';
import type { GenerateContentResponse, GenerateContentResponseUsageMetadata, LogprobsResult, Part } from '@google/genai';
import type OpenAI from 'openai';
import type { ChatCompletion, CompletionUsage, ProviderRequest } from '../provider-adapter';

// Gemini generateContent response -> OpenAI ChatCompletion.

type FinishReason = ChatCompletion['choices'][number]['finish_reason'];
type MessageToolCall = OpenAI.Chat.ChatCompletionMessageFunctionToolCall;

export function toChatCompletion(response: GenerateContentResponse, request: ProviderRequest): ChatCompletion {
  const blocked = Boolean(response.promptFeedback?.blockReason);
  const candidates = response.candidates?.length ? response.candidates : [{ index: 0 }];
  const completion: ChatCompletion = {
    id: completionId(response.responseId),
    object: 'chat.completion',
    created: Math.floor(Date.now() / 1000),
    model: request.model.id,
    choices: candidates.map((candidate, position) => {
      const { text, calls } = readParts(candidate.content?.parts);
      const toolCalls: MessageToolCall[] = calls.map((call) => ({ id: toolCallId(), type: 'function', function: call }));
      return {
        index: candidate.index ?? position,
        message: {
          role: 'assistant',
          content: text.length > 0 || toolCalls.length === 0 ? text : null,
          refusal: null,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: toFinishReason(candidate.finishReason, toolCalls.length > 0, blocked),
        logprobs: toLogprobs(candidate.logprobsResult, request.extra),
      };
    }),
  };
  if (response.usageMetadata) completion.usage = toUsage(response.usageMetadata);
  return completion;
}

type Logprobs = NonNullable<ChatCompletion['choices'][number]['logprobs']>;

/** Gemini's log probabilities in OpenAI's shape, when the client asked for them (and Gemini sent them). */
export function toLogprobs(result: LogprobsResult | undefined, extra: Record<string, unknown>): Logprobs | null {
  if (extra.logprobs !== true || !result?.chosenCandidates) return null;
  const entry = (candidate: { token?: string; logProbability?: number }) => ({
    token: candidate.token ?? '',
    logprob: candidate.logProbability ?? 0,
    bytes: [...Buffer.from(candidate.token ?? '', 'utf8')],
  });
  return {
    content: result.chosenCandidates.map((chosen, step) => ({
      ...entry(chosen),
      top_logprobs: (result.topCandidates?.[step]?.candidates ?? []).map(entry),
    })),
    refusal: null,
  };
}

/** Visible text (thoughts skipped) and function calls of a candidate's parts. */
export function readParts(parts: Part[] | undefined): { text: string; calls: Array<{ name: string; arguments: string }> } {
  let text = '';
  const calls: Array<{ name: string; arguments: string }> = [];
  for (const part of parts ?? []) {
    if (part.thought) continue;
    if (typeof part.text === 'string') text += part.text;
    if (part.functionCall) calls.push({ name: part.functionCall.name ?? '', arguments: JSON.stringify(part.functionCall.args ?? {}) });
  }
  return { text, calls };
}

export function toFinishReason(reason: string | undefined, hasToolCalls: boolean, blocked = false): FinishReason {
  if (blocked) return 'content_filter';
  if (hasToolCalls) return 'tool_calls';
  switch (reason) {
    case undefined:
    case 'STOP':
    case 'FINISH_REASON_UNSPECIFIED':
      return 'stop';
    case 'MAX_TOKENS':
    case 'CONTINUATION':
      return 'length';
    default:
      // SAFETY, RECITATION, BLOCKLIST, PROHIBITED_CONTENT, SPII, MALFORMED_FUNCTION_CALL, ...
      return 'content_filter';
  }
}

/** Thinking tokens are billed as output, as OpenAI's reasoning tokens are. */
export function toUsage(metadata: GenerateContentResponseUsageMetadata): CompletionUsage {
  const prompt = (metadata.promptTokenCount ?? 0) + (metadata.toolUsePromptTokenCount ?? 0);
  const thoughts = metadata.thoughtsTokenCount ?? 0;
  const completion = (metadata.candidatesTokenCount ?? 0) + thoughts;
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: metadata.cachedContentTokenCount ?? 0 },
    completion_tokens_details: { reasoning_tokens: thoughts },
  };
}

export function completionId(responseId: string | undefined): string {
  return `chatcmpl-${responseId || randomId(29)}`;
}

export function toolCallId(): string {
  return `call_${randomId(24)}`;
}

const ID_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';

function randomId(length: number): string {
  let id = '';
  for (let i = 0; i < length; i++) id += ID_ALPHABET[randomInt(ID_ALPHABET.length)];
  return id;
}
