import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { queryRows } from '../common/database/query-rows';
import { storable } from '../common/database/storable';
import type { ResponseObject } from './response-object';
import type { InputItem } from './chat-translation';

/** A stored response: its object, its conversation and its input items. */
export interface StoredResponse {
  body: ResponseObject;
  conversationId: string;
  /** Whether its conversation was created by the Responses API for it or for the response it continues. */
  ownsConversation: boolean;
  inputItems: InputItem[];
  /** Whether it is the newest response of its conversation (only that one can be continued). */
  latest: boolean;
}

/** Response ids are ours (`resp_` and hex); anything else is unknown without asking the database. */
const RESPONSE_ID = /^resp_[A-Za-z0-9_-]{1,100}$/;

/**
 * The `responses` table (migration 1764001900000): what `store: true` keeps beside the
 * conversation that holds the messages. Every read is scoped by workspace: another
 * workspace's response is as unknown as a missing one (404).
 */
@Injectable()
export class ResponsesStore {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The model's text is stored as the conversation stores it: NUL and lone surrogates (which jsonb refuses) become U+FFFD. */
  async save(workspaceId: string, conversation: { id: string; owned: boolean }, body: ResponseObject, inputItems: InputItem[]): Promise<void> {
    await this.dataSource.query(
      `INSERT INTO responses (id, workspace_id, conversation_id, owns_conversation, body, input_items, output_item_ids)
       VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7::text[])`,
      [
        body.id,
        workspaceId,
        conversation.id,
        conversation.owned,
        JSON.stringify(storable(body)),
        JSON.stringify(storable(inputItems)),
        body.output.map((item) => item.id),
      ],
    );
  }

  /** @throws ApiError 404 (code `response_not_found`, with `param` when given). */
  async get(workspaceId: string, responseId: string, param?: string): Promise<StoredResponse> {
    const [row] = RESPONSE_ID.test(responseId)
      ? await this.dataSource.query<
          Array<{ body: ResponseObject; conversation_id: string; owns_conversation: boolean; input_items: InputItem[]; latest: boolean }>
        >(
          `SELECT r.body, r.conversation_id, r.owns_conversation, r.input_items,
                  NOT EXISTS (SELECT 1 FROM responses newer
                               WHERE newer.conversation_id = r.conversation_id
                                 AND (newer.created_at, newer.id) > (r.created_at, r.id)) AS latest
             FROM responses r
            WHERE r.id = $1 AND r.workspace_id = $2`,
          [responseId, workspaceId],
        )
      : [];
    if (!row) throw responseNotFound(responseId, param);
    return {
      body: row.body,
      conversationId: row.conversation_id,
      ownsConversation: row.owns_conversation,
      inputItems: row.input_items,
      latest: row.latest,
    };
  }

  /**
   * Deletes a stored response. When it was the last response of a conversation the Responses
   * API created (`owns_conversation`), the conversation and its messages go with it, so that
   * the deleted response's text is not kept; a conversation the client brought with
   * `conversation` keeps its turns (other turns, from chat completions say, are the client's).
   * Conversations are also deleted through `/v1/conversations`, taking their responses.
   */
  async delete(workspaceId: string, responseId: string): Promise<void> {
    if (!RESPONSE_ID.test(responseId)) throw responseNotFound(responseId);
    await this.dataSource.transaction(async (manager) => {
      const [deleted] = await queryRows<{ conversation_id: string; owns_conversation: boolean }>(
        manager,
        `DELETE FROM responses WHERE id = $1 AND workspace_id = $2 RETURNING conversation_id, owns_conversation`,
        [responseId, workspaceId],
      );
      if (!deleted) throw responseNotFound(responseId);
      if (!deleted.owns_conversation) return;
      await manager.query(
        `DELETE FROM conversations c
          WHERE c.id = $1 AND c.workspace_id = $2
            AND NOT EXISTS (SELECT 1 FROM responses r WHERE r.conversation_id = c.id)`,
        [deleted.conversation_id, workspaceId],
      );
    });
  }

  /** An output item of one of the workspace's stored responses, for an `item_reference` input. */
  async outputItem(workspaceId: string, itemId: string): Promise<Record<string, unknown> | undefined> {
    const [row] = await this.dataSource.query<Array<{ item: Record<string, unknown> }>>(
      `SELECT item
         FROM responses r, jsonb_array_elements(r.body->'output') item
        WHERE r.workspace_id = $1 AND r.output_item_ids @> ARRAY[$2::text] AND item->>'id' = $2
        LIMIT 1`,
      [workspaceId, itemId],
    );
    return row?.item;
  }
}

function responseNotFound(responseId: string, param?: string): ApiError {
  return ApiError.notFound(`No response with id '${responseId.slice(0, 200)}' is stored in this workspace.`, 'response_not_found', param);
}
