import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';

/**
 * The figures' statements, exported so that bench/operator-pages.ts explains exactly these.
 * The daily totals of the days $1 to $2 (`YYYY-MM-DD`), per day, per workspace and per model, in one pass.
 */
export const GROUPED_TOTALS_SQL = `
  SELECT day::text AS day, workspace_id, model, sum(requests)::bigint AS requests, sum(tokens)::bigint AS tokens,
         sum(cost_millicents)::text AS cost, GROUPING(day, workspace_id, model) AS grouping
    FROM usage_daily_totals
   WHERE day BETWEEN $1::date AND $2::date
   GROUP BY GROUPING SETS ((day), (workspace_id), (model))`;

/** Failed requests of the days $1 to $2 per error code, from the partial index of failures (created_at, error_code). */
export const FAILURES_SQL = `
  SELECT COALESCE(error_code, 'unknown') AS error_code, count(*)::bigint AS requests
    FROM usage_records
   WHERE status = 'error' AND created_at >= $1::date AND created_at < $2::date + 1
   GROUP BY 1
   ORDER BY 2 DESC, 1`;

/** Requests, tokens and exact cost (numeric text) of a group of daily totals. */
export interface Sums {
  requests: number;
  tokens: number;
  cost: string;
}

/** Daily totals of a range of days, summed per day, per workspace and per model. */
export interface GroupedTotals {
  byDay: Map<string, Sums>;
  byWorkspace: Map<string, Sums>;
  byModel: Map<string, Sums>;
}

export function emptyTotals(): GroupedTotals {
  return { byDay: new Map(), byWorkspace: new Map(), byModel: new Map() };
}

/**
 * The platform-wide reads of the operator console: usage_daily_totals and the partial index
 * of failed usage_records (never a scan of usage_records), and the names of the workspaces
 * they rank. Reads for display only; the usage module writes those tables.
 */
@Injectable()
export class PlatformFiguresStore {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  /** The daily totals of the days `startDate` to `endDate` (`YYYY-MM-DD`, both included). */
  async groupedTotals(startDate: string, endDate: string): Promise<GroupedTotals> {
    const rows = (await this.db.query(GROUPED_TOTALS_SQL, [startDate, endDate])) as { day: string | null; workspace_id: string | null; model: string | null; requests: string; tokens: string; cost: string; grouping: number }[];
    const totals = emptyTotals();
    for (const row of rows) {
      const sums = { requests: Number(row.requests), tokens: Number(row.tokens), cost: row.cost };
      // GROUPING bits, in the order (day, workspace_id, model): 1 = that column is aggregated away.
      if (row.grouping === 0b011) totals.byDay.set(row.day!, sums);
      else if (row.grouping === 0b101) totals.byWorkspace.set(row.workspace_id!, sums);
      else if (row.grouping === 0b110) totals.byModel.set(row.model!, sums);
    }
    return totals;
  }

  /** Failed requests of those days per error code, most first. */
  async failures(startDate: string, endDate: string): Promise<{ errorCode: string; requests: number }[]> {
    const rows = (await this.db.query(FAILURES_SQL, [startDate, endDate])) as { error_code: string; requests: string }[];
    return rows.map((row) => ({ errorCode: row.error_code, requests: Number(row.requests) }));
  }

  /** id -> name of these workspaces (an id of none is absent). */
  async workspaceNames(ids: string[]): Promise<Map<string, string>> {
    if (ids.length === 0) return new Map();
    const rows = (await this.db.query(`SELECT id, name FROM workspaces WHERE id = ANY($1::uuid[])`, [ids])) as { id: string; name: string }[];
    return new Map(rows.map((row) => [row.id, row.name]));
  }
}
