import { ApiError } from '../common/errors/api-error';

/** The longest message a visitor may send: a question, not a document. */
export const VISITOR_MESSAGE_MAX_CHARS = 2_000;

/** Messages a visitor may send in one conversation; then the widget offers to start a new one. */
export const VISITOR_MESSAGES_PER_CONVERSATION = 50;

/** `{visitor, message}` as the widget posts it; the visitor token is checked by VisitorTokens. @throws ApiError 400 naming the field. */
export function readVisitorMessage(body: unknown): { visitor: unknown; message: string } {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const message = typeof fields.message === 'string' ? fields.message.trim() : '';
  if (message === '') throw ApiError.badRequest('Write a message first.', 'message');
  if (message.length > VISITOR_MESSAGE_MAX_CHARS) {
    throw ApiError.badRequest(`A message has at most ${VISITOR_MESSAGE_MAX_CHARS.toLocaleString('en-US')} characters.`, 'message', 'message_too_long');
  }
  return { visitor: fields.visitor, message };
}

/** A new conversation's title: the first line of the visitor's first message, cut to 80 characters. */
export function titleOf(message: string): string {
  const line = message.split('\n', 1)[0].trim();
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}
