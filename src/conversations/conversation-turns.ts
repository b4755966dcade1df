import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import type { ChatMessage } from '../providers/provider-adapter';
import { formatMegabytes, MAX_CONVERSATION_CONTENT_BYTES, MAX_CONVERSATION_MESSAGES } from './conversation-limits';
import { conversationNotFound } from './conversation-store';
import { ConversationMessage } from './entities/conversation-message.entity';
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
  constructor(
    @InjectRepository(Conversation) private readonly conversations: Repository<Conversation>,
    @InjectRepository(ConversationMessage) private readonly conversationMessages: Repository<ConversationMessage>,
  ) {}

  /**
   * For the chat module, when a request carries `conversation_id`: the conversation, with
   * the counters `assertRoomFor` checks. Its `assistantId` (null when none) and `status` are
   * the caller's to use: an archived conversation is returned like an active one.
   *
   * @throws ApiError 404 `not_found` (code `conversation_not_found`, param `conversation_id`)
   *   for an unknown or malformed id, or another workspace's conversation.
   */
  async findForChat(workspaceId: string, conversationId: string): Promise<Conversation> {
    const conversation = isUUID(conversationId)
      ? await this.conversations.findOneBy({ id: conversationId, workspaceId })
      : null;
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
    // The window sum runs newest first over the stored token counts only; the content is
    // read for the messages that fit. Tokens are never negative, so what fits is a suffix.
    const stored = await this.conversationMessages
      .createQueryBuilder('m')
      .where('m.conversation_id = :conversationId AND m.workspace_id = :workspaceId', { conversationId, workspaceId })
      .andWhere(
        `m.position >= (
           SELECT min(newest.position) FILTER (WHERE newest.role <> 'tool')
             FROM (SELECT position, role,
                          sum(tokens) OVER (ORDER BY position DESC ROWS UNBOUNDED PRECEDING) AS tokens_through
                     FROM conversation_messages
                    WHERE conversation_id = :conversationId AND workspace_id = :workspaceId) newest
            WHERE newest.tokens_through <= :budget)`,
        { budget },
      )
      .orderBy('m.position', 'ASC')
      .getMany();
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

    const [updated] = await queryRows<{ message_count: number; last_message_at: Date | null }>(
      manager,
      `UPDATE conversations SET
         message_count = message_count + $3::integer,
         total_input_tokens = total_input_tokens + $4::bigint,
         total_output_tokens = total_output_tokens + $5::bigint,
         total_cost_millicents = total_cost_millicents + $6::numeric,
         content_bytes = content_bytes + $7::bigint,
         last_message_at = CASE WHEN $3::integer > 0 THEN now() ELSE last_message_at END,
         updated_at = now()
       WHERE id = $1 AND workspace_id = $2
       RETURNING message_count, last_message_at`,
      [
        conversationId,
        workspaceId,
        rows.length,
        params.inputTokens,
        params.outputTokens,
        cost,
        rows.reduce((sum, row) => sum + row.bytes, 0),
      ],
    );
    if (!updated) return null;
    const result: AppendedTurn = { messageIds: [], messageCount: updated.message_count, lastMessageAt: updated.last_message_at };
    if (rows.length === 0) return result;

    // The row lock taken by the UPDATE is held until the transaction ends, so no other turn
    // can take these positions.
    const inserted = await queryRows<{ id: string; position: number }>(
      manager,
      `INSERT INTO conversation_messages
         (conversation_id, workspace_id, position, role, content_type, content, tool_calls, tool_call_id, tokens, cost_millicents, tools_used, annotations)
       SELECT $1, $2, $3::integer + m.ord, m.role, m.content_type, m.content, m.tool_calls::jsonb, m.tool_call_id, m.tokens,
              -- The turn's cost and tools go on its last message, the reply.
              CASE WHEN m.ord = cardinality($4::text[]) THEN $10::numeric END,
              CASE WHEN m.ord = cardinality($4::text[]) THEN $11::text[] END,
              m.annotations::jsonb
         FROM unnest($4::text[], $5::text[], $6::text[], $7::text[], $8::text[], $9::integer[], $12::text[])
              WITH ORDINALITY AS m(role, content_type, content, tool_calls, tool_call_id, tokens, annotations, ord)
        ORDER BY m.ord
       RETURNING id, position`,
      [
        conversationId,
        workspaceId,
        updated.message_count - rows.length,
        rows.map((row) => row.role),
        rows.map((row) => row.contentType),
        rows.map((row) => row.content),
        rows.map((row) => row.toolCallsJson),
        rows.map((row) => row.toolCallId),
        rows.map((row) => row.tokens),
        cost,
        params.toolsUsed ? [...params.toolsUsed] : null,
        rows.map((row) => row.annotationsJson),
      ],
    );
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
