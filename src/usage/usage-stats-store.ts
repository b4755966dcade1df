import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { UsageRecord } from './entities/usage-record.entity';

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

export interface SummaryRow {
  model: string;
  requests: string;
  cost: string;
  total_requests: string;
  total_tokens: string;
  total_cost: string;
  average_latency: string;
}

export interface ProviderRow {
  provider: string | null;
  requests: string;
  cost: string;
}

export interface KeyRow {
  api_key_id: string | null;
  api_key_name: string | null;
  requests: string;
  cost: string;
}

export interface DailyRow {
  date: string;
  requests: string;
  tokens: string;
  cost: string;
}

/**
 * The statistics' statements: a workspace's daily totals (and whether it has any record).
 * Every read is scoped to one workspace; a range is whole UTC days (`YYYY-MM-DD`, both included).
 */
@Injectable()
export class UsageStatsStore {
  /** Raw SQL through its manager (the same pool): the statements are exported for the benchmark. */
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** By model (with the totals on each row), by provider and by API key, in parallel; `apiKeyId` null: every key. */
  async summary(
    workspaceId: string,
    startDate: string,
    endDate: string,
    apiKeyId: string | null,
  ): Promise<{ models: SummaryRow[]; providers: ProviderRow[]; keys: KeyRow[] }> {
    const parameters = [workspaceId, startDate, endDate, apiKeyId];
    const [models, providers, keys] = (await Promise.all([
      this.records.manager.query(SUMMARY_SQL, parameters),
      this.records.manager.query(BY_PROVIDER_SQL, parameters),
      this.records.manager.query(BY_API_KEY_SQL, parameters),
    ])) as [SummaryRow[], ProviderRow[], KeyRow[]];
    return { models, providers, keys };
  }

  daily(workspaceId: string, startDate: string, endDate: string, apiKeyId: string | null): Promise<DailyRow[]> {
    return this.records.manager.query(DAILY_SQL, [workspaceId, startDate, endDate, apiKeyId]);
  }

  async totals(workspaceId: string, startDate: string, endDate: string): Promise<UsageTotals> {
    const [row] = (await this.records.manager.query(TOTALS_SQL, [workspaceId, startDate, endDate])) as {
      requests: string;
      tokens: string;
      cost: string;
    }[];
    return { requests: Number(row.requests), tokens: Number(row.tokens), costMillicents: row.cost };
  }

  /** The models the workspace used since the day `since`, by name. */
  async modelsUsed(workspaceId: string, since: string): Promise<string[]> {
    const rows = (await this.records.manager.query(
      'SELECT DISTINCT model FROM usage_daily_totals WHERE workspace_id = $1 AND day >= $2::date ORDER BY model',
      [workspaceId, since],
    )) as { model: string }[];
    return rows.map((row) => row.model);
  }

  /** Whether the workspace has any record still kept (one index probe). */
  async hasRecords(workspaceId: string): Promise<boolean> {
    const [row] = (await this.records.manager.query(
      'SELECT EXISTS (SELECT 1 FROM usage_records WHERE workspace_id = $1) AS used',
      [workspaceId],
    )) as { used: boolean }[];
    return row.used;
  }
}
