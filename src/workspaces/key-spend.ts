import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { PendingSettlements } from '../common/settlements/pending-settlements';

/** What an API key was charged, in whole millicents, and what its requests in flight hold against its limit. */
export interface KeySpend {
  /** In the current period of its spending limit (all time for a key whose limit never resets, or without a limit). */
  period: number;
  today: number;
  /** This week (from Monday, UTC). */
  week: number;
  month: number;
  allTime: number;
  /** Held by its requests in flight (counted against the limit until their charges commit). */
  held: number;
}

/**
 * Keys' spend, from api_key_spend (per key and UTC day, kept by the usage records' trigger in
 * the statement that charges them) and api_key_holds: a few rows per key, however many
 * requests it made. The periods are the database's clock, as in reserve_key_budget().
 */
export const KEY_SPEND_SQL = `
  WITH bounds AS (
    SELECT (now() AT TIME ZONE 'UTC')::date AS today,
           date_trunc('week', now() AT TIME ZONE 'UTC')::date AS week,
           date_trunc('month', now() AT TIME ZONE 'UTC')::date AS month)
  SELECT k.id,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= CASE k.spend_limit_period WHEN 'daily' THEN b.today
                                                                    WHEN 'weekly' THEN b.week WHEN 'monthly' THEN b.month
                                                                    ELSE '-infinity'::date END), 0) AS period,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.today), 0) AS today,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.week), 0) AS week,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.month), 0) AS month,
         coalesce(sum(s.charged_millicents), 0) AS all_time,
         (SELECT coalesce(sum(h.amount_millicents), 0) FROM api_key_holds h WHERE h.api_key_id = k.id AND h.expires_at >= now()) AS held
    FROM api_keys k CROSS JOIN bounds b
    LEFT JOIN api_key_spend s ON s.api_key_id = k.id
   WHERE k.id = ANY($1::uuid[])
   GROUP BY k.id, k.spend_limit_period, b.today, b.week, b.month`;

@Injectable()
export class KeySpendService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** Each key's spend, by id (keys of the workspace, whose answered requests' charges are committed first). */
  async of(workspaceId: string, keyIds: string[]): Promise<Map<string, KeySpend>> {
    if (keyIds.length === 0) return new Map();
    await this.pending.written(workspaceId);
    const rows = await queryRows<Record<'id' | 'period' | 'today' | 'week' | 'month' | 'all_time' | 'held', string>>(
      this.dataSource.manager,
      KEY_SPEND_SQL,
      [keyIds],
    );
    return new Map(
      rows.map((row) => [
        row.id,
        {
          period: Number(row.period),
          today: Number(row.today),
          week: Number(row.week),
          month: Number(row.month),
          allTime: Number(row.all_time),
          held: Number(row.held),
        },
      ]),
    );
  }
}
