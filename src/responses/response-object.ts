import type { ChatCompletionResponse, XService } from '../chat/completion-types';
import type { CompletionUsage } from '../providers/provider-adapter';
import { chatAnnotationsOf, ResponseAnnotation, responseAnnotationOf } from '../tools/citations';
import { EchoedFields, newId } from './chat-translation';
import type { ToolCallItem } from './tool-call-items';

/**
 * The Responses object (`object: "response"`) built from what the chat core answered. Its
 * shape follows the openai SDK's `Response` type (node_modules/openai/resources/responses),
 * without `output_text`, which the SDKs compute on the client; `x_service` is ours, as on
 * chat completions.
 */

export interface OutputText {
  type: 'output_text';
  text: string;
  annotations: ResponseAnnotation[];
  logprobs: unknown[];
}
export interface Refusal {
  type: 'refusal';
  refusal: string;
}
export interface MessageItem {
  type: 'message';
  id: string;
  status: 'in_progress' | 'completed' | 'incomplete';
  role: 'assistant';
  content: Array<OutputText | Refusal>;
}
export interface FunctionCallItem {
  type: 'function_call';
  id: string;
  call_id: string;
  name: string;
  arguments: string;
  status: 'in_progress' | 'completed' | 'incomplete';
}
export type OutputItem = MessageItem | FunctionCallItem | ToolCallItem;

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export type ResponseStatus = 'completed' | 'failed' | 'in_progress' | 'incomplete';

export interface ResponseObject extends EchoedFields {
  id: string;
  object: 'response';
  created_at: number;
  status: ResponseStatus;
  background: false;
  error: { code: string; message: string } | null;
  incomplete_details: { reason: 'max_output_tokens' | 'content_filter' } | null;
  model: string;
  output: OutputItem[];
  reasoning: { effort: string | null; summary: null };
  service_tier: 'default';
  /** The conversation a stored response belongs to (our conversations, `/v1/conversations/{id}`). */
  conversation: { id: string } | null;
  usage: ResponseUsage | null;
  x_service?: XService;
}

/** A response before its output: what `response.created` carries. */
export function startResponse(id: string, model: string, echo: EchoedFields, conversationId: string | null): ResponseObject {
  return {
    id,
    object: 'response',
    created_at: Math.floor(Date.now() / 1000),
    status: 'in_progress',
    background: false,
    error: null,
    incomplete_details: null,
    model,
    output: [],
    reasoning: { effort: null, summary: null },
    service_tier: 'default',
    conversation: conversationId ? { id: conversationId } : null,
    usage: null,
    ...echo,
  };
}

/**
 * The finished response of a plain (not streamed) chat completion: the server tools' calls
 * (`toolItems`, in the order they ran), then the answer with its citations.
 */
export function responseOf(start: ResponseObject, completion: ChatCompletionResponse, toolItems: readonly ToolCallItem[] = []): ResponseObject {
  const choice = completion.choices[0];
  const message = choice?.message;
  const output: OutputItem[] = [...toolItems];
  if (message?.refusal) {
    output.push({ type: 'message', id: newId('msg'), status: 'completed', role: 'assistant', content: [{ type: 'refusal', refusal: message.refusal }] });
  } else if (message?.content) {
    const annotations = chatAnnotationsOf(message.annotations).map(responseAnnotationOf);
    output.push({ type: 'message', id: newId('msg'), status: 'completed', role: 'assistant', content: [outputText(message.content, annotations)] });
  }
  for (const call of message?.tool_calls ?? []) {
    if (call.type !== 'function') continue;
    output.push({ type: 'function_call', id: newId('fc'), call_id: call.id, name: call.function.name, arguments: call.function.arguments, status: 'completed' });
  }
  return finishResponse({ ...start, model: completion.model, output }, choice?.finish_reason ?? null, completion.usage, completion.x_service);
}

/** Sets the status from the finish reason, and the usage and `x_service`. */
export function finishResponse(
  response: ResponseObject,
  finishReason: string | null,
  usage: CompletionUsage | undefined,
  xService: XService | undefined,
): ResponseObject {
  const incomplete = finishReason === 'length' ? 'max_output_tokens' : finishReason === 'content_filter' ? 'content_filter' : null;
  return {
    ...response,
    status: incomplete ? 'incomplete' : 'completed',
    incomplete_details: incomplete ? { reason: incomplete } : null,
    usage: usage ? usageOf(usage) : null,
    ...(xService ? { x_service: xService } : {}),
  };
}

export function outputText(text: string, annotations: ResponseAnnotation[] = []): OutputText {
  return { type: 'output_text', text, annotations, logprobs: [] };
}

/** Chat usage in the Responses API's names. */
export function usageOf(usage: CompletionUsage): ResponseUsage {
  return {
    input_tokens: usage.prompt_tokens,
    input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0 },
    output_tokens: usage.completion_tokens,
    output_tokens_details: { reasoning_tokens: usage.completion_tokens_details?.reasoning_tokens ?? 0 },
    total_tokens: usage.total_tokens,
  };
}
