import { ApiError } from '../common/errors/api-error';

const DAY_MS = 86_400_000;
const DATE_FORM = /^(\d{4})-(\d{2})-(\d{2})$/;

/** Days in the default range: the last 30 days, today (UTC) included. */
export const DEFAULT_RANGE_DAYS = 30;

/**
 * A range of whole UTC days, both ends included. Days are counted from the Unix epoch so
 * that arithmetic on them is exact (no DST, no time of day).
 */
export interface UsagePeriod {
  /** First day, `YYYY-MM-DD`. */
  startDate: string;
  /** Last day, `YYYY-MM-DD`. */
  endDate: string;
  /** 00:00:00.000 UTC of the first day: the lower bound, included. */
  from: Date;
  /** 00:00:00.000 UTC of the day after the last: the upper bound, excluded. */
  until: Date;
  /** `period` of the answer: start of the first day and end of the last, ISO 8601 UTC. */
  start: string;
  end: string;
}

/** A real calendar date in `YYYY-MM-DD` form, as a day number; null for anything else. */
export function parseDay(value: string): number | null {
  const match = DATE_FORM.exec(value);
  if (!match) return null;
  const [year, month, day] = [Number(match[1]), Number(match[2]), Number(match[3])];
  const ms = Date.UTC(year, month - 1, day);
  const date = new Date(ms);
  // Date.UTC rolls 2026-02-30 over to March 2 (and years 0-99 to 19xx); a real date survives the round trip.
  if (date.getUTCFullYear() !== year || date.getUTCMonth() !== month - 1 || date.getUTCDate() !== day) return null;
  return ms / DAY_MS;
}

export function formatDay(day: number): string {
  return new Date(day * DAY_MS).toISOString().slice(0, 10);
}

export function dayOf(instant: Date): number {
  return Math.floor(instant.getTime() / DAY_MS);
}

/**
 * The range asked for by `start_date`/`end_date`, checked against the retention window.
 *
 * The window is the last `retentionDays` UTC days, today included: its first day is
 * today - (retentionDays - 1). Records older than retentionDays * 24 h are deleted, so
 * every day of the window is whole, and a range may not start before it nor be longer.
 * Defaults: `end_date` today, `start_date` 29 days before `end_date` (not before the window).
 * The end may lie in the future (a client ahead of UTC); those days are simply empty.
 */
export function resolvePeriod(
  query: { start_date?: string; end_date?: string },
  options: { now: Date; retentionDays: number },
): UsagePeriod {
  const today = dayOf(options.now);
  const earliest = today - (options.retentionDays - 1);
  const windowText = `the last ${options.retentionDays} days (${formatDay(earliest)} onwards, UTC)`;

  const end = query.end_date !== undefined ? requireDay(query.end_date, 'end_date') : today;
  const start =
    query.start_date !== undefined
      ? requireDay(query.start_date, 'start_date')
      : Math.max(end - (DEFAULT_RANGE_DAYS - 1), earliest);

  if (query.start_date !== undefined && end < start) {
    throw ApiError.badRequest(
      `end_date (${formatDay(end)}) is before start_date (${formatDay(start)}).`,
      'end_date',
      'invalid_date_range',
    );
  }
  if (start < earliest) {
    throw ApiError.badRequest(
      `start_date ${formatDay(start)} is outside the retention window: usage is kept for ${windowText}.`,
      'start_date',
      'outside_retention_window',
    );
  }
  if (end < earliest) {
    throw ApiError.badRequest(
      `end_date ${formatDay(end)} is outside the retention window: usage is kept for ${windowText}.`,
      'end_date',
      'outside_retention_window',
    );
  }
  if (end - start + 1 > options.retentionDays) {
    throw ApiError.badRequest(
      `The range ${formatDay(start)} to ${formatDay(end)} spans ${end - start + 1} days; at most ${options.retentionDays} ` +
        '(the retention window) are allowed.',
      'end_date',
      'invalid_date_range',
    );
  }
  return {
    startDate: formatDay(start),
    endDate: formatDay(end),
    from: new Date(start * DAY_MS),
    until: new Date((end + 1) * DAY_MS),
    start: new Date(start * DAY_MS).toISOString(),
    end: new Date((end + 1) * DAY_MS - 1).toISOString(),
  };
}

/** The DTO validates the form first; this is the second line for direct callers. */
function requireDay(value: string, param: string): number {
  const day = parseDay(value);
  if (day === null) {
    throw ApiError.badRequest(`${param} must be a real date in YYYY-MM-DD form (got "${value}").`, param, 'invalid_value');
  }
  return day;
}
