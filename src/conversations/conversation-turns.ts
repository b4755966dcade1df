import { Injectable } from '@nestjs/common';
import { isUUID } from 'class-validator';
import { EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import type { ChatMessage } from '../providers/provider-adapter';
import { formatMegabytes, MAX_CONVERSATION_CONTENT_BYTES, MAX_CONVERSATION_MESSAGES } from './conversation-limits';
import { conversationNotFound } from './conversation-store';
import { ConversationTurnsStore } from './conversation-turns-store';
import { Conversation } from './entities/conversation.entity';
import { costDecimal, IncomingMessage, incomingBytes, storedMessage, toChatMessage, TurnMessage } from './stored-messages';

export interface AppendTurnParams {
  workspaceId: string;
  conversationId: string;
  /** In conversation order; appended after the stored ones. */
  messages: TurnMessage[];
  inputTokens: number;
  outputTokens: number;
  /** Millicents, possibly fractional: a number, or an exact decimal string such as `"12.750000"`. */
  costMillicents: number | string;
  /** The server tools the turn ran; kept with the cost on its last message (the reply), for the transcript. */
  toolsUsed?: readonly string[];
}

export interface AppendedTurn {
  /** Ids of the stored messages, in the order given. */
  messageIds: string[];
  /** The conversation's message count after this turn. */
  messageCount: number;
  /** Null only if the conversation has no messages yet (an append without messages). */
  lastMessageAt: Date | null;
}

/**
 * What the chat path reads from and writes to a conversation: the conversation a request
 * names, whether it has room for the turn, the history to send before the request's own
 * messages, and the turn's messages and counters, written in the settlement's transaction.
 */
@Injectable()
export class ConversationTurns {
  constructor(private readonly store: ConversationTurnsStore) {}

  /**
   * For the chat module, when a request carries `conversation_id`: the conversation, with
   * the counters `assertRoomFor` checks. Its `assistantId` (null when none) and `status` are
   * the caller's to use: an archived conversation is returned like an active one.
   *
   * @throws ApiError 404 `not_found` (code `conversation_not_found`, param `conversation_id`)
   *   for an unknown or malformed id, or another workspace's conversation.
   */
  async findForChat(workspaceId: string, conversationId: string): Promise<Conversation> {
    const conversation = isUUID(conversationId) ? await this.store.find(workspaceId, conversationId) : null;
    if (!conversation) throw conversationNotFound(conversationId, 'conversation_id');
    return conversation;
  }

  /**
   * For the chat module: the history to put before a request's own messages, in OpenAI's
   * message format (array content comes back as the parts it was given; an assistant message
   * that only called tools has content null), oldest first. Only the newest messages whose
   * stored `tokens` add up to at most `budgetTokens` are read from the database, and the
   * history never starts with `tool` messages whose assistant call was left out. Nothing for
   * a budget of 0 or less, or a conversation that is not in the workspace.
   */
  async historyWithin(workspaceId: string, conversationId: string, budgetTokens: number): Promise<ChatMessage[]> {
    if (!(budgetTokens >= 1) || !isUUID(conversationId) || !isUUID(workspaceId)) return [];
    const budget = Math.min(Math.floor(budgetTokens), Number.MAX_SAFE_INTEGER);
    const stored = await this.store.newestWithin(workspaceId, conversationId, budget);
    // Stored messages were OpenAI chat messages, and come back as such.
    return stored.map((row) => toChatMessage(row) as ChatMessage);
  }

  /**
   * For the chat module, before it holds money: refuses a turn that would take the
   * conversation past `MAX_CONVERSATION_CONTENT_BYTES` (counting the incoming messages) or
   * `MAX_CONVERSATION_MESSAGES` (counting them and the reply). The reply's size is unknown
   * in advance, so a conversation can end up one reply over the byte limit; the next turn is
   * then refused. `appendTurn` itself never refuses on size: the charge must commit.
   *
   * @throws ApiError 400 `bad_request` (code `conversation_too_large`, param `conversation_id`).
   */
  assertRoomFor(conversation: Conversation, incomingMessages: readonly IncomingMessage[]): void {
    const messages = conversation.messageCount + incomingMessages.length + 1;
    if (messages > MAX_CONVERSATION_MESSAGES) {
      throw conversationTooLarge(
        `holds ${conversation.messageCount} messages, and a conversation holds at most ${MAX_CONVERSATION_MESSAGES}`,
      );
    }
    const bytes = incomingMessages.reduce((sum, message) => sum + incomingBytes(message), conversation.contentBytes);
    if (bytes > MAX_CONVERSATION_CONTENT_BYTES) {
      throw conversationTooLarge(
        `would store ${formatMegabytes(bytes)} of message content with this request, and a conversation stores at ` +
          `most ${formatMegabytes(MAX_CONVERSATION_CONTENT_BYTES)}`,
      );
    }
  }

  /**
   * For the chat module's settlement: stores a turn's messages after the conversation's
   * existing ones and adds the turn's tokens and cost to its counters, with the given
   * transaction manager, so that the turn is stored if and only if the request is charged.
   *
   * The counters (`content_bytes` included: a turn is never refused here for its size, the
   * charge must commit), `last_message_at` (when there are messages) and `updated_at` change in one
   * `UPDATE ... SET x = x + $n`, never read-modify-write: concurrent turns of one
   * conversation add up exactly, and wait for each other on the row lock so that their
   * messages keep their order.
   *
   * Returns null, changing nothing, when the conversation does not exist in the workspace
   * (deleted while the request ran), so that a concurrent delete never rolls back the
   * charge. Malformed arguments (an unknown role, negative or fractional token counts, a
   * negative cost) are programming errors and throw a plain `Error`.
   */
  async appendTurn(manager: EntityManager, params: AppendTurnParams): Promise<AppendedTurn | null> {
    const { workspaceId, conversationId, messages } = params;
    const rows = messages.map(storedMessage);
    const cost = costDecimal(params.costMillicents);
    for (const [name, value] of [
      ['inputTokens', params.inputTokens],
      ['outputTokens', params.outputTokens],
    ] as const) {
      if (!Number.isSafeInteger(value) || value < 0) throw new Error(`appendTurn: ${name} must be a whole number >= 0 (got ${value})`);
    }
    if (!isUUID(conversationId) || !isUUID(workspaceId)) return null;

    const updated = await this.store.addToCounters(manager, {
      workspaceId,
      conversationId,
      messages: rows.length,
      inputTokens: params.inputTokens,
      outputTokens: params.outputTokens,
      cost,
      bytes: rows.reduce((sum, row) => sum + row.bytes, 0),
    });
    if (!updated) return null;
    const result: AppendedTurn = { messageIds: [], messageCount: updated.message_count, lastMessageAt: updated.last_message_at };
    if (rows.length === 0) return result;

    // The row lock taken by the counters' UPDATE is held until the transaction ends, so no
    // other turn can take these positions.
    const inserted = await this.store.insertMessages(manager, {
      workspaceId,
      conversationId,
      firstPosition: updated.message_count - rows.length,
      rows,
      cost,
      toolsUsed: params.toolsUsed ? [...params.toolsUsed] : null,
    });
    result.messageIds = inserted.sort((a, b) => a.position - b.position).map((row) => row.id);
    return result;
  }
}

function conversationTooLarge(why: string): ApiError {
  return ApiError.badRequest(
    `This conversation ${why}. Start a new conversation (create one, or send the request without conversation_id).`,
    'conversation_id',
    'conversation_too_large',
  );
}
