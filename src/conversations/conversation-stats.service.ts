import { Injectable } from '@nestjs/common';
import { ConversationStatsStore } from './conversation-stats-store';
import { ConversationSource, ConversationStatus } from './entities/conversation.entity';

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
  constructor(private readonly store: ConversationStatsStore) {}

  /**
   * For the dashboard's statistics: conversations and their messages per assistant (null:
   * direct mode, or an assistant deleted since), most conversations first. One grouped scan
   * of the workspace's conversations; messages come from their counters, not a count.
   */
  async countsByAssistant(workspaceId: string): Promise<Array<{ assistantId: string | null; conversations: number; messages: number }>> {
    const rows = await this.store.countsByAssistant(workspaceId);
    return rows.map((row) => ({ assistantId: row.assistant_id, conversations: Number(row.conversations), messages: Number(row.messages) }));
  }

  /** Totals of the workspace's conversations, by status and source, and the last 30 UTC days. */
  async stats(workspaceId: string): Promise<ConversationStats> {
    const totals = await this.store.totals(workspaceId);
    const daily = await this.store.lastThirtyDays(workspaceId);
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
