import { isUUID } from 'class-validator';
import type { UsageRecordFilter } from '../../usage/usage-explorer.service';
import { formatDay } from '../../usage/usage-period';
import { readDaysAndCursor } from '../list-filter';
import { formatMillicents } from '../format';

const DAY_MS = 86_400_000;

/** The chart's periods, in days ending today (UTC). */
export const USAGE_PERIODS = [7, 30, 90] as const;
export const DEFAULT_USAGE_PERIOD = 30;

/** The period asked for (`?days=`), among those the retention window allows; the default otherwise. */
export function periodDays(days: unknown, retentionDays: number): number {
  const allowed = allowedPeriods(retentionDays);
  const asked = Number(days);
  if (allowed.includes(asked)) return asked;
  return allowed.includes(DEFAULT_USAGE_PERIOD) ? DEFAULT_USAGE_PERIOD : allowed[allowed.length - 1];
}

/** The periods offered: those within the retention window, or the window itself when it is shorter than a week. */
export function allowedPeriods(retentionDays: number): number[] {
  const within = USAGE_PERIODS.filter((days) => days <= retentionDays);
  return within.length > 0 ? within : [retentionDays];
}

/** The first and last day (`YYYY-MM-DD`) of the last `days` days, today (UTC) included. */
export function lastDays(days: number, now = new Date()): { start_date: string; end_date: string } {
  const today = Math.floor(now.getTime() / DAY_MS);
  return { start_date: formatDay(today - (days - 1)), end_date: formatDay(today) };
}

/** The filters of the recent requests page, as in its query string. */
export interface RequestsQuery {
  model: string;
  key: string;
  assistant: string;
  status: string;
  user: string;
  from: string;
  to: string;
  after: string;
}

export const REQUESTS_QUERY_FIELDS: (keyof RequestsQuery)[] = ['model', 'key', 'assistant', 'status', 'user', 'from', 'to', 'after'];

export type ReadRequestsQuery =
  | { ok: true; filter: UsageRecordFilter; startingAfter?: string }
  | { ok: false; errors: Partial<Record<keyof RequestsQuery, string>> };

/** Reads the filters: each bad one is named, so the page says what to fix. */
export function readRequestsQuery(query: RequestsQuery): ReadRequestsQuery {
  const errors: Partial<Record<keyof RequestsQuery, string>> = {};
  const filter: UsageRecordFilter = {};
  if (query.model) {
    if (query.model.length > 200) errors.model = 'A model id has at most 200 characters.';
    else filter.model = query.model;
  }
  if (query.key) {
    if (isUUID(query.key)) filter.apiKeyId = query.key;
    else errors.key = 'Choose one of the keys offered.';
  }
  if (query.assistant) {
    if (isUUID(query.assistant)) filter.assistantId = query.assistant;
    else errors.assistant = 'Choose one of the assistants offered.';
  }
  if (query.status) {
    if (query.status === 'success' || query.status === 'error') filter.status = query.status;
    else errors.status = 'Choose success or error.';
  }
  if (query.user) {
    if (query.user.length > 256) errors.user = 'A user id has at most 256 characters.';
    else filter.userId = query.user;
  }
  const startingAfter = readDaysAndCursor(query, filter, errors, 'requests');
  if (Object.keys(errors).length > 0) return { ok: false, errors };
  return { ok: true, filter, startingAfter };
}

/** Query parameters arrive as strings, arrays (a repeated name) or not at all: only single strings count. */
export function requestsQueryOf(query: Record<string, unknown>): RequestsQuery {
  const text = (value: unknown) => (typeof value === 'string' ? value.trim() : '');
  return Object.fromEntries(REQUESTS_QUERY_FIELDS.map((field) => [field, text(query[field])])) as unknown as RequestsQuery;
}

/** A day of the usage chart and of its table (the usage page, the operator's figures): the numbers for the chart, the texts for the table. */
export function dailyChartRow(row: { date: string; requests: number; tokens: number; costMillicents: number | string }) {
  return {
    date: row.date,
    requests: row.requests,
    tokens: row.tokens,
    costMillicents: row.costMillicents,
    requestsText: row.requests.toLocaleString('en-US'),
    tokensText: row.tokens.toLocaleString('en-US'),
    cost: formatMillicents(row.costMillicents),
  };
}
