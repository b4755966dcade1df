import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import type { DailyUsageDto, UsageRecordDto, UsageSummaryDto } from './dto/usage.dto';
import { UsageRecord, type UsageStatus } from './entities/usage-record.entity';
import { resolvePeriod, UsagePeriod } from './usage-period';
import { isRecordOf, RecordRow, recordsSql, toRecordDto } from './usage-record-list';
import { PendingSettlements } from '../common/settlements/pending-settlements';

export interface RecentUsageQuery {
  limit: number;
  startingAfter?: string;
  model?: string;
  apiKeyId?: string;
  assistantId?: string;
  userId?: string;
  status?: UsageStatus;
}

/*
 * The statements are exported so that bench/usage-summary.ts explains exactly these.
 *
 * The summary and the daily series read usage_daily_totals (see the UsageIndexes and
 * UsageAnswerer migrations): per workspace, UTC day, model and provider, the request count and the exact sums of tokens, cost and
 * latency, kept equal to the records by triggers. A range is whole UTC days, so its totals
 * are the sum of at most (days x models x providers) rows, whatever the number of requests.
 */

/**
 * Grouped by model; the totals are window sums over the per-model groups, so they stay
 * exact numerics (no float addition) and cost no second pass.
 * $1 workspace, $2 first day, $3 last day (both included, `YYYY-MM-DD`), $4 an API key or null (all).
 */
export const SUMMARY_SQL = `
  SELECT model,
         sum(requests) AS requests,
         sum(cost_millicents) AS cost,
         sum(sum(requests)) OVER () AS total_requests,
         sum(sum(tokens)) OVER () AS total_tokens,
         sum(sum(cost_millicents)) OVER () AS total_cost,
         round(sum(sum(latency_ms)) OVER () / sum(sum(requests)) OVER (), 2) AS average_latency
    FROM usage_daily_totals
   WHERE workspace_id = $1 AND day >= $2::date AND day <= $3::date AND ($4::uuid IS NULL OR api_key_id = $4::uuid)
   GROUP BY model
  HAVING sum(requests) > 0
   ORDER BY cost DESC, requests DESC, model`;

/**
 * Grouped by the provider that answered ('' in the totals: none did, answered as null),
 * highest cost first. $1 workspace, $2 first day, $3 last day (both included, `YYYY-MM-DD`), $4 an API key or null.
 */
export const BY_PROVIDER_SQL = `
  SELECT nullif(provider, '') AS provider,
         sum(requests) AS requests,
         sum(cost_millicents) AS cost
    FROM usage_daily_totals
   WHERE workspace_id = $1 AND day >= $2::date AND day <= $3::date AND ($4::uuid IS NULL OR api_key_id = $4::uuid)
   GROUP BY provider
  HAVING sum(requests) > 0
   ORDER BY cost DESC, requests DESC, provider`;

/** "No key" in usage_daily_totals' grain (a primary key holds no null): requests made without one. */
export const NO_API_KEY = '00000000-0000-0000-0000-000000000000';

/**
 * Grouped by the API key the requests were made with (null: none), with the key's name now,
 * highest cost first. $1 workspace, $2 first day, $3 last day (both included), $4 an API key or null.
 */
export const BY_API_KEY_SQL = `
  SELECT nullif(t.api_key_id, '${NO_API_KEY}'::uuid) AS api_key_id,
         k.name AS api_key_name,
         sum(t.requests) AS requests,
         sum(t.cost_millicents) AS cost
    FROM usage_daily_totals t
    LEFT JOIN api_keys k ON k.id = t.api_key_id
   WHERE t.workspace_id = $1 AND t.day >= $2::date AND t.day <= $3::date AND ($4::uuid IS NULL OR t.api_key_id = $4::uuid)
   GROUP BY t.api_key_id, k.name
  HAVING sum(t.requests) > 0
   ORDER BY cost DESC, requests DESC, t.api_key_id`;

/**
 * Every UTC day of the range, newest first, days without requests as zeros.
 * $1 workspace, $2 first day, $3 last day (both included, `YYYY-MM-DD`), $4 an API key or null.
 */
export const DAILY_SQL = `
  SELECT to_char(days.day, 'YYYY-MM-DD') AS date,
         coalesce(sum(t.requests), 0) AS requests,
         coalesce(sum(t.tokens), 0) AS tokens,
         coalesce(sum(t.cost_millicents), 0) AS cost
    FROM generate_series($2::timestamp, $3::timestamp, interval '1 day') AS days(day)
    LEFT JOIN usage_daily_totals AS t
           ON t.workspace_id = $1 AND t.day = days.day::date AND t.day >= $2::date AND t.day <= $3::date
          AND ($4::uuid IS NULL OR t.api_key_id = $4::uuid)
   GROUP BY days.day
   ORDER BY days.day DESC`;

/**
 * The totals of a range of whole UTC days, from the daily totals (at most days x models rows).
 * The cost is the exact numeric, as text. $1 workspace, $2 first day, $3 last day (both included).
 */
export const TOTALS_SQL = `
  SELECT coalesce(sum(requests), 0) AS requests,
         coalesce(sum(tokens), 0) AS tokens,
         coalesce(sum(cost_millicents), 0)::text AS cost
    FROM usage_daily_totals
   WHERE workspace_id = $1 AND day >= $2::date AND day <= $3::date`;

/** The totals of a range of days. */
export interface UsageTotals {
  requests: number;
  tokens: number;
  /** The exact sum of the records' costs, a decimal string of millicents (fractions of a millicent kept). */
  costMillicents: string;
}

/** The newest `query.limit + 1` records (the extra one tells whether more follow) after an optional cursor, filtered. */
export function recentSql(workspaceId: string, query: RecentUsageQuery): { sql: string; parameters: unknown[] } {
  const { model, apiKeyId, assistantId, userId, status } = query;
  return recordsSql(workspaceId, { model, apiKeyId, assistantId, userId, status }, query.limit + 1, query.startingAfter);
}

interface SummaryRow {
  model: string;
  requests: string;
  cost: string;
  total_requests: string;
  total_tokens: string;
  total_cost: string;
  average_latency: string;
}

interface ProviderRow {
  provider: string | null;
  requests: string;
  cost: string;
}

interface KeyRow {
  api_key_id: string | null;
  api_key_name: string | null;
  requests: string;
  cost: string;
}

interface DailyRow {
  date: string;
  requests: string;
  tokens: string;
  cost: string;
}

/** Statistics over a workspace's usage records. Every query is scoped to one workspace. */
@Injectable()
export class UsageStatsService {
  constructor(
    /** Raw SQL through its manager (the same pool): the statements are exported for the benchmark. */
    @InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>,
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
    const parameters = [workspaceId, period.startDate, period.endDate, apiKeyId ?? null];
    const [rows, providers, keys] = (await Promise.all([
      this.records.manager.query(SUMMARY_SQL, parameters),
      this.records.manager.query(BY_PROVIDER_SQL, parameters),
      this.records.manager.query(BY_API_KEY_SQL, parameters),
    ])) as [SummaryRow[], ProviderRow[], KeyRow[]];
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
    const rows = (await this.records.manager.query(DAILY_SQL, [workspaceId, period.startDate, period.endDate, apiKeyId ?? null])) as DailyRow[];
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
    const [row] = (await this.records.manager.query(TOTALS_SQL, [workspaceId, startDate, endDate])) as {
      requests: string;
      tokens: string;
      cost: string;
    }[];
    return { requests: Number(row.requests), tokens: Number(row.tokens), costMillicents: row.cost };
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
    const [row] = (await this.records.manager.query(
      'SELECT EXISTS (SELECT 1 FROM usage_records WHERE workspace_id = $1) AS used',
      [workspaceId],
    )) as { used: boolean }[];
    return row.used;
  }

  async recent(workspaceId: string, query: RecentUsageQuery): Promise<Page<UsageRecordDto>> {
    await this.pending.written(workspaceId);
    if (query.startingAfter && !(await isRecordOf(this.records.manager, workspaceId, query.startingAfter))) {
      throw ApiError.badRequest(
        'starting_after does not name a usage record of this workspace (records older than the retention window are deleted).',
        'starting_after',
        'invalid_cursor',
      );
    }
    const { sql, parameters } = recentSql(workspaceId, query);
    const rows = (await this.records.manager.query(sql, parameters)) as RecordRow[];
    return toPage(rows.map(toRecordDto), query.limit);
  }
}
