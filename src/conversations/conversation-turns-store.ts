import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { ConversationMessage } from './entities/conversation-message.entity';
import { Conversation } from './entities/conversation.entity';
import type { StoredMessageValues } from './stored-messages';

/** What one turn adds to its conversation's counters. */
export interface TurnCounters {
  workspaceId: string;
  conversationId: string;
  messages: number;
  inputTokens: number;
  outputTokens: number;
  /** Exact decimal millicents. */
  cost: string;
  bytes: number;
}

/** A turn's messages, stored from `firstPosition + 1` on. */
export interface TurnMessages {
  workspaceId: string;
  conversationId: string;
  firstPosition: number;
  rows: StoredMessageValues[];
  /** Exact decimal millicents; kept on the last message, the reply, with the tools. */
  cost: string;
  toolsUsed: string[] | null;
}

/**
 * The statements of the chat path on conversations: the conversation a request names, the
 * newest messages within a token budget, and a turn's counters and messages, in the
 * settlement's transaction. Sizes, validation and order are ConversationTurns'.
 */
@Injectable()
export class ConversationTurnsStore {
  constructor(
    @InjectRepository(Conversation) private readonly conversations: Repository<Conversation>,
    @InjectRepository(ConversationMessage) private readonly conversationMessages: Repository<ConversationMessage>,
  ) {}

  find(workspaceId: string, conversationId: string): Promise<Conversation | null> {
    return this.conversations.findOneBy({ id: conversationId, workspaceId });
  }

  /**
   * The newest messages whose stored tokens add up to at most `budget`, oldest first, never
   * starting with `tool` messages. The window sum runs newest first over the stored token
   * counts only; the content is read for the messages that fit. Tokens are never negative,
   * so what fits is a suffix.
   */
  newestWithin(workspaceId: string, conversationId: string, budget: number): Promise<ConversationMessage[]> {
    return this.conversationMessages
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
  }

  /**
   * Adds a turn to the counters in one `UPDATE ... SET x = x + $n` (concurrent turns add up
   * exactly and wait on the row lock); null when the conversation is not in the workspace.
   */
  async addToCounters(manager: EntityManager, turn: TurnCounters): Promise<{ message_count: number; last_message_at: Date | null } | null> {
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
      [turn.conversationId, turn.workspaceId, turn.messages, turn.inputTokens, turn.outputTokens, turn.cost, turn.bytes],
    );
    return updated ?? null;
  }

  /** Inserts the messages in order; their ids and positions. */
  insertMessages(manager: EntityManager, turn: TurnMessages): Promise<{ id: string; position: number }[]> {
    const { rows } = turn;
    return queryRows<{ id: string; position: number }>(
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
        turn.conversationId,
        turn.workspaceId,
        turn.firstPosition,
        rows.map((row) => row.role),
        rows.map((row) => row.contentType),
        rows.map((row) => row.content),
        rows.map((row) => row.toolCallsJson),
        rows.map((row) => row.toolCallId),
        rows.map((row) => row.tokens),
        turn.cost,
        turn.toolsUsed,
        rows.map((row) => row.annotationsJson),
      ],
    );
  }
}
