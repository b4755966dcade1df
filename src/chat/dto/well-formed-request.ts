import { type ChatCompletionRequestDto, FUNCTION_NAME_PATTERN, MESSAGE_ROLES } from './chat-completion-request.dto';
import { contentProblem } from './message-content.validator';

/**
 * A chat request's own fields as ChatCompletionRequestDto's decorators accept them, checked
 * by hand: the request itself, or null for "look closer".
 *
 * Nearly every request is well formed, and class-transformer and class-validator, which copy
 * every value and then walk it through their metadata, were a quarter of the memory a chat
 * request allocated and a twentieth of its CPU. So a request this accepts is used as it
 * came, and anything else goes through them as before: they find the problem and word the
 * error (or accept what this is too strict for). This never accepts what the decorators
 * refuse: `well-formed-request.spec.ts` checks it against them on generated requests. A
 * field validated by the DTOs must be checked here too, or it would go unchecked: the spec
 * lists them, and fails when one is added.
 */
export function wellFormedRequest(own: Record<string, unknown>): ChatCompletionRequestDto | null {
  const { messages, tools, stream_options: streamOptions } = own;
  const wellFormed =
    optionalString(own.model, 200) &&
    // Rare: a request with fallback models is checked by the decorators.
    absent(own.models) &&
    optionalString(own.assistant_id, 200) &&
    optionalString(own.user_id, 256) &&
    optionalString(own.subscription_id, 256) &&
    optionalString(own.conversation_id, 200) &&
    optionalBoolean(own.stream) &&
    (absent(streamOptions) || (isObject(streamOptions) && optionalBoolean(streamOptions.include_usage))) &&
    optionalNumberBetween(own.temperature, 0, 2) &&
    optionalIntegerOfAtLeast(own.max_tokens, 1) &&
    optionalIntegerOfAtLeast(own.max_completion_tokens, 1) &&
    Array.isArray(messages) &&
    messages.length > 0 &&
    everyItem(messages, isWellFormedMessage) &&
    (absent(tools) || (Array.isArray(tools) && everyItem(tools, isWellFormedTool)));
  return wellFormed ? (own as ChatCompletionRequestDto) : null;
}

function isWellFormedMessage(message: unknown): boolean {
  if (!isObject(message)) return false;
  const calls = message.tool_calls;
  return (
    (MESSAGE_ROLES as readonly unknown[]).includes(message.role) &&
    contentProblem(message.content) === null &&
    optionalString(message.name) &&
    optionalString(message.tool_call_id) &&
    (absent(calls) || (Array.isArray(calls) && everyItem(calls, isWellFormedToolCall)))
  );
}

function isWellFormedToolCall(call: unknown): boolean {
  if (!isObject(call) || typeof call.id !== 'string' || call.type !== 'function') return false;
  const fn = call.function;
  return isObject(fn) && typeof fn.name === 'string' && typeof fn.arguments === 'string';
}

function isWellFormedTool(tool: unknown): boolean {
  if (!isObject(tool) || typeof tool.type !== 'string') return false;
  const fn = tool.function;
  if (absent(fn)) return true;
  return (
    isObject(fn) &&
    typeof fn.name === 'string' &&
    FUNCTION_NAME_PATTERN.test(fn.name) &&
    optionalString(fn.description) &&
    (absent(fn.parameters) || isObject(fn.parameters)) &&
    optionalBoolean(fn.strict)
  );
}

/** Array.every, but a hole is an item (undefined), which no check accepts. */
function everyItem(items: unknown[], check: (item: unknown) => boolean): boolean {
  for (let index = 0; index < items.length; index++) if (!check(items[index])) return false;
  return true;
}

/** Absent as @IsOptional() takes it. */
function absent(value: unknown): value is undefined | null {
  return value === undefined || value === null;
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** `max` in UTF-16 units: stricter than @MaxLength, which counts a surrogate pair once. */
function optionalString(value: unknown, max = Infinity): boolean {
  return absent(value) || (typeof value === 'string' && value.length <= max);
}

function optionalBoolean(value: unknown): boolean {
  return absent(value) || typeof value === 'boolean';
}

function optionalNumberBetween(value: unknown, min: number, max: number): boolean {
  return absent(value) || (typeof value === 'number' && Number.isFinite(value) && value >= min && value <= max);
}

function optionalIntegerOfAtLeast(value: unknown, min: number): boolean {
  return absent(value) || (Number.isInteger(value) && (value as number) >= min);
}
