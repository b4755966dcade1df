import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { Conversation, ConversationSource, ConversationStatus } from './entities/conversation.entity';

export interface ConversationStats {
  totals: {
    conversations: number;
    messages: number;
    input_tokens: number;
    output_tokens: number;
    total_tokens: number;
    cost_millicents: number;
  };
  by_status: Record<ConversationStatus, number>;
  by_source: Record<ConversationSource, number>;
  /** The last 30 UTC days, today first. */
  daily: Array<{ date: string; conversations: number; messages: number }>;
}

/** Statistics of a workspace's conversations, for `GET /v1/conversations/stats` and the dashboard. */
@Injectable()
export class ConversationStatsService {
  constructor(@InjectRepository(Conversation) private readonly conversations: Repository<Conversation>) {}

  /**
   * For the dashboard's statistics: conversations and their messages per assistant (null:
   * direct mode, or an assistant deleted since), most conversations first. One grouped scan
   * of the workspace's conversations; messages come from their counters, not a count.
   */
  async countsByAssistant(workspaceId: string): Promise<Array<{ assistantId: string | null; conversations: number; messages: number }>> {
    const rows = await queryRows<{ assistant_id: string | null; conversations: string; messages: string }>(
      this.conversations.manager,
      `SELECT assistant_id, count(*) AS conversations, coalesce(sum(message_count), 0) AS messages
         FROM conversations WHERE workspace_id = $1
        GROUP BY assistant_id
        ORDER BY count(*) DESC, assistant_id NULLS LAST`,
      [workspaceId],
    );
    return rows.map((row) => ({ assistantId: row.assistant_id, conversations: Number(row.conversations), messages: Number(row.messages) }));
  }

  /** Totals of the workspace's conversations, by status and source, and the last 30 UTC days. */
  async stats(workspaceId: string): Promise<ConversationStats> {
    const [totals] = await queryRows<Record<string, string>>(
      this.conversations.manager,
      `SELECT count(*) AS conversations,
              count(*) FILTER (WHERE status = 'active') AS active,
              count(*) FILTER (WHERE status = 'archived') AS archived,
              count(*) FILTER (WHERE source = 'api') AS api,
              count(*) FILTER (WHERE source = 'dashboard') AS dashboard,
              count(*) FILTER (WHERE source = 'widget') AS widget,
              coalesce(sum(message_count), 0) AS messages,
              coalesce(sum(total_input_tokens), 0) AS input_tokens,
              coalesce(sum(total_output_tokens), 0) AS output_tokens,
              coalesce(sum(total_cost_millicents), 0) AS cost_millicents
         FROM conversations WHERE workspace_id = $1`,
      [workspaceId],
    );
    const daily = await queryRows<{ date: string; conversations: string; messages: string }>(
      this.conversations.manager,
      `WITH today AS (SELECT (now() AT TIME ZONE 'UTC')::date AS day),
            days AS (SELECT (today.day - n) AS day FROM today, generate_series(0, 29) AS n),
            since AS (SELECT (min(day)::timestamp AT TIME ZONE 'UTC') AS at FROM days),
            created AS (
              SELECT (c.created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
                FROM conversations c, since WHERE c.workspace_id = $1 AND c.created_at >= since.at GROUP BY 1),
            stored AS (
              SELECT (m.created_at AT TIME ZONE 'UTC')::date AS day, count(*) AS n
                FROM conversation_messages m, since WHERE m.workspace_id = $1 AND m.created_at >= since.at GROUP BY 1)
       SELECT to_char(d.day, 'YYYY-MM-DD') AS date, coalesce(created.n, 0) AS conversations, coalesce(stored.n, 0) AS messages
         FROM days d LEFT JOIN created ON created.day = d.day LEFT JOIN stored ON stored.day = d.day
        ORDER BY d.day DESC`,
      [workspaceId],
    );
    const inputTokens = Number(totals.input_tokens);
    const outputTokens = Number(totals.output_tokens);
    return {
      totals: {
        conversations: Number(totals.conversations),
        messages: Number(totals.messages),
        input_tokens: inputTokens,
        output_tokens: outputTokens,
        total_tokens: inputTokens + outputTokens,
        cost_millicents: Number(totals.cost_millicents),
      },
      by_status: { active: Number(totals.active), archived: Number(totals.archived) },
      by_source: { api: Number(totals.api), dashboard: Number(totals.dashboard), widget: Number(totals.widget) },
      daily: daily.map((row) => ({ date: row.date, conversations: Number(row.conversations), messages: Number(row.messages) })),
    };
  }
}
