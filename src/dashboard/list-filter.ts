import { isUUID } from 'class-validator';
import { parseDay } from '../usage/usage-period';

const DAY_MS = 86_400_000;

/** The fields every filtered, paged list of the dashboard has in its query string (empty when not given). */
export interface DaysAndCursorQuery {
  /** First day, `YYYY-MM-DD` (UTC), included. */
  from: string;
  /** Last day, `YYYY-MM-DD` (UTC), included. */
  to: string;
  /** The id of the last item of the previous page. */
  after: string;
}

/**
 * Reads the days and the page cursor of a list's filter, the same way on every list (the
 * billing ledger, the usage requests), so the same link means the same range everywhere:
 * the days go into `filter` as UTC bounds (`from` included, `until` the midnight after the
 * last day, excluded), each bad field into `errors` with what to fix. `listed` names the
 * list's items for the broken-link message (`transactions`, `requests`).
 * Returns the cursor, if any.
 */
export function readDaysAndCursor(
  query: DaysAndCursorQuery,
  filter: { from?: Date; until?: Date },
  errors: Partial<Record<keyof DaysAndCursorQuery, string>>,
  listed: string,
): string | undefined {
  const from = query.from ? parseDay(query.from) : null;
  const to = query.to ? parseDay(query.to) : null;
  if (query.from && from === null) errors.from = 'Give the first day as YYYY-MM-DD, a real date.';
  if (query.to && to === null) errors.to = 'Give the last day as YYYY-MM-DD, a real date.';
  if (from !== null && to !== null && to < from) errors.to = 'The last day is before the first day.';
  if (from !== null) filter.from = new Date(from * DAY_MS);
  if (to !== null) filter.until = new Date((to + 1) * DAY_MS);
  if (query.after && !isUUID(query.after)) errors.after = `That page link is broken: start again from the newest ${listed}.`;
  return query.after || undefined;
}
