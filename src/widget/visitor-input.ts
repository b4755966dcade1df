import { ApiError } from '../common/errors/api-error';

/** `v_` and 32 hex digits, drawn by the widget in the visitor's browser and kept in its localStorage. */
export const VISITOR_ID = /^v_[0-9a-f]{32}$/;

/** The longest message a visitor may send: a question, not a document. */
export const VISITOR_MESSAGE_MAX_CHARS = 2_000;

/** Messages a visitor may send in one conversation; then the widget offers to start a new one. */
export const VISITOR_MESSAGES_PER_CONVERSATION = 50;

/** The visitor id of a request, or 400 `invalid_visitor_id`. */
export function readVisitorId(value: unknown): string {
  if (typeof value !== 'string' || !VISITOR_ID.test(value)) {
    throw new ApiError('bad_request', 'visitor must be the visitor id the widget made: "v_" and 32 lowercase hex digits.', {
      param: 'visitor',
      code: 'invalid_visitor_id',
    });
  }
  return value;
}

/** `{visitor, message}` as the widget posts it. @throws ApiError 400 naming the field. */
export function readVisitorMessage(body: unknown): { visitorId: string; message: string } {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const visitorId = readVisitorId(fields.visitor);
  const message = typeof fields.message === 'string' ? fields.message.trim() : '';
  if (message === '') throw ApiError.badRequest('Write a message first.', 'message');
  if (message.length > VISITOR_MESSAGE_MAX_CHARS) {
    throw ApiError.badRequest(`A message has at most ${VISITOR_MESSAGE_MAX_CHARS.toLocaleString('en-US')} characters.`, 'message', 'message_too_long');
  }
  return { visitorId, message };
}

/** A new conversation's title: the first line of the visitor's first message, cut to 80 characters. */
export function titleOf(message: string): string {
  const line = message.split('\n', 1)[0].trim();
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}
