import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { Conversation } from './entities/conversation.entity';

/** The statements of conversation statistics: grouped scans of a workspace's conversations and messages. */
@Injectable()
export class ConversationStatsStore {
  constructor(@InjectRepository(Conversation) private readonly conversations: Repository<Conversation>) {}

  /** Conversations and their messages (from the counters) per assistant, most conversations first. */
  countsByAssistant(workspaceId: string): Promise<{ assistant_id: string | null; conversations: string; messages: string }[]> {
    return queryRows<{ assistant_id: string | null; conversations: string; messages: string }>(
      this.conversations.manager,
      `SELECT assistant_id, count(*) AS conversations, coalesce(sum(message_count), 0) AS messages
         FROM conversations WHERE workspace_id = $1
        GROUP BY assistant_id
        ORDER BY count(*) DESC, assistant_id NULLS LAST`,
      [workspaceId],
    );
  }

  /** Counts by status and source, and the sums of the counters, as text. */
  async totals(workspaceId: string): Promise<Record<string, string>> {
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
    return totals;
  }

  /** Conversations created and messages stored per UTC day, the last 30 days, today first. */
  lastThirtyDays(workspaceId: string): Promise<{ date: string; conversations: string; messages: string }[]> {
    return queryRows<{ date: string; conversations: string; messages: string }>(
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
  }
}
