import { Injectable } from '@nestjs/common';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import type { DailyUsageDto, UsageRecordDto, UsageSummaryDto } from './dto/usage.dto';
import type { UsageStatus } from './entities/usage-record.entity';
import { resolvePeriod, UsagePeriod } from './usage-period';
import { recordsSql, toRecordDto, UsageRecordFilter, UsageRecordsStore } from './usage-records-store';
import { UsageStatsStore, UsageTotals } from './usage-stats-store';

// The statements stay importable from here: bench/usage-summary.ts and test/dashboard-overview explain them.
export { BY_API_KEY_SQL, BY_PROVIDER_SQL, DAILY_SQL, NO_API_KEY, SUMMARY_SQL, TOTALS_SQL } from './usage-stats-store';
export type { UsageTotals } from './usage-stats-store';

export interface RecentUsageQuery {
  limit: number;
  startingAfter?: string;
  model?: string;
  apiKeyId?: string;
  assistantId?: string;
  userId?: string;
  status?: UsageStatus;
}

/** The newest `query.limit + 1` records (the extra one tells whether more follow) after an optional cursor, filtered. */
export function recentSql(workspaceId: string, query: RecentUsageQuery): { sql: string; parameters: unknown[] } {
  return recordsSql(workspaceId, recentFilter(query), query.limit + 1, query.startingAfter);
}

function recentFilter({ model, apiKeyId, assistantId, userId, status }: RecentUsageQuery): UsageRecordFilter {
  return { model, apiKeyId, assistantId, userId, status };
}

/** Statistics over a workspace's usage records. Every query is scoped to one workspace. */
@Injectable()
export class UsageStatsService {
  constructor(
    private readonly store: UsageStatsStore,
    private readonly recordsStore: UsageRecordsStore,
    @InjectConfig() private readonly config: AppConfig,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** The range of a query, defaults applied, or a 400 naming the parameter at fault. */
  period(query: { start_date?: string; end_date?: string }, now = new Date()): UsagePeriod {
    return resolvePeriod(query, { now, retentionDays: this.config.usageRetentionDays });
  }

  /** With `apiKeyId`: only the requests made with that key. */
  async summary(workspaceId: string, period: UsagePeriod, apiKeyId?: string): Promise<UsageSummaryDto> {
    await this.pending.written(workspaceId);
    const { models: rows, providers, keys } = await this.store.summary(workspaceId, period.startDate, period.endDate, apiKeyId ?? null);
    const totals = rows[0];
    return {
      period: { start: period.start, end: period.end },
      summary: {
        total_requests: totals ? Number(totals.total_requests) : 0,
        total_tokens: totals ? Number(totals.total_tokens) : 0,
        total_cost_millicents: totals ? Number(totals.total_cost) : 0,
        average_latency_ms: totals ? Number(totals.average_latency) : 0,
      },
      by_model: rows.map((row) => ({ model: row.model, requests: Number(row.requests), cost_millicents: Number(row.cost) })),
      by_provider: providers.map((row) => ({ provider: row.provider, requests: Number(row.requests), cost_millicents: Number(row.cost) })),
      by_api_key: keys.map((row) => ({
        api_key_id: row.api_key_id,
        api_key_name: row.api_key_name,
        requests: Number(row.requests),
        cost_millicents: Number(row.cost),
      })),
    };
  }

  async daily(workspaceId: string, period: UsagePeriod, apiKeyId?: string): Promise<DailyUsageDto[]> {
    await this.pending.written(workspaceId);
    const rows = await this.store.daily(workspaceId, period.startDate, period.endDate, apiKeyId ?? null);
    return rows.map((row) => ({
      date: row.date,
      requests: Number(row.requests),
      tokens: Number(row.tokens),
      cost_millicents: Number(row.cost),
    }));
  }

  /**
   * Requests, tokens and cost of the days from `startDate` to `endDate` (`YYYY-MM-DD`, UTC,
   * both included), read from the daily totals: as fast at a million records as at ten.
   */
  async totals(workspaceId: string, startDate: string, endDate: string): Promise<UsageTotals> {
    await this.pending.written(workspaceId);
    return this.store.totals(workspaceId, startDate, endDate);
  }

  /** This calendar month (UTC) so far: from its first day to today. */
  async monthToDate(workspaceId: string, now = new Date()): Promise<UsageTotals & { startDate: string; endDate: string }> {
    const endDate = now.toISOString().slice(0, 10);
    const startDate = `${endDate.slice(0, 8)}01`;
    return { ...(await this.totals(workspaceId, startDate, endDate)), startDate, endDate };
  }

  /** Whether the workspace has made any request that is still on record (one index probe). */
  async hasUsage(workspaceId: string): Promise<boolean> {
    await this.pending.written(workspaceId);
    return this.store.hasRecords(workspaceId);
  }

  async recent(workspaceId: string, query: RecentUsageQuery): Promise<Page<UsageRecordDto>> {
    await this.pending.written(workspaceId);
    if (query.startingAfter && !(await this.recordsStore.isRecordOf(workspaceId, query.startingAfter))) {
      throw ApiError.badRequest(
        'starting_after does not name a usage record of this workspace (records older than the retention window are deleted).',
        'starting_after',
        'invalid_cursor',
      );
    }
    const rows = await this.recordsStore.list(workspaceId, recentFilter(query), query.limit + 1, query.startingAfter);
    return toPage(rows.map(toRecordDto), query.limit);
  }
}
