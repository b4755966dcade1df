import { isUUID } from 'class-validator';
import { ApiError } from '../../common/errors/api-error';

/** The longest message the playground sends (the chat service counts it against the model's context too). */
export const PLAYGROUND_MESSAGE_MAX_CHARS = 100_000;

/** What the playground's script posts: who answers, the person's message, and the conversation it continues. */
export interface PlaygroundMessage {
  /** Exactly one of assistantId and model is set. */
  assistantId: string | null;
  model: string | null;
  message: string;
  /** Null: a new conversation. */
  conversationId: string | null;
}

/**
 * Reads the JSON body `{target: "assistant:<uuid>" | "model:<id>", message, conversation_id?}`.
 * Whether the assistant, the model and the conversation exist is the chat service's to say
 * (with the same 404s as the API); this only refuses what cannot be a request at all.
 *
 * @throws ApiError 400 naming the field.
 */
export function readPlaygroundMessage(body: unknown): PlaygroundMessage {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const target = typeof fields.target === 'string' ? /^(assistant|model):(.{1,200})$/.exec(fields.target) : null;
  if (!target) throw ApiError.badRequest('Choose an assistant or a model to answer.', 'target');
  const [, kind, id] = target;
  if (kind === 'assistant' && !isUUID(id)) throw ApiError.badRequest('Choose an assistant of this workspace.', 'target');

  const message = typeof fields.message === 'string' ? fields.message : '';
  if (message.trim() === '') throw ApiError.badRequest('Write a message first.', 'message');
  if (message.length > PLAYGROUND_MESSAGE_MAX_CHARS) {
    throw ApiError.badRequest(`A message has at most ${PLAYGROUND_MESSAGE_MAX_CHARS.toLocaleString('en-US')} characters.`, 'message');
  }

  const conversation = fields.conversation_id;
  if (conversation !== undefined && conversation !== null && conversation !== '' && (typeof conversation !== 'string' || !isUUID(conversation))) {
    throw ApiError.badRequest('conversation_id must be the id of a conversation of this workspace.', 'conversation_id');
  }
  return {
    assistantId: kind === 'assistant' ? id : null,
    model: kind === 'model' ? id : null,
    message,
    conversationId: typeof conversation === 'string' && conversation !== '' ? conversation : null,
  };
}

/** A new conversation's title: the first line of its first message, cut to 80 characters. */
export function titleOf(message: string): string {
  const line = message.trim().split('\n')[0].trim();
  return line.length > 80 ? `${line.slice(0, 79)}…` : line;
}
