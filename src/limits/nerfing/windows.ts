import type { NerfingWindow } from './entities/nerfing-rule.entity';

/** A calendar window in UTC: `start` included, `end` excluded, in milliseconds since the epoch. */
export interface CalendarWindow {
  start: number;
  end: number;
}

const MINUTE = 60_000;
const HOUR = 60 * MINUTE;
const DAY = 24 * HOUR;

/**
 * The window of a rule that `now` falls in. Rules count in calendar windows (the current
 * minute, hour, UTC day or UTC month) rather than windows opened by a first request: every
 * replica derives the same window from the clock alone, a month is a month, and "until the
 * window ends" is the same moment for every user.
 */
export function windowAt(window: NerfingWindow, now: number): CalendarWindow {
  switch (window) {
    case 'minute':
      return fixed(now, MINUTE);
    case 'hour':
      return fixed(now, HOUR);
    case 'day':
      return fixed(now, DAY);
    case 'month': {
      const date = new Date(now);
      return { start: Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1), end: Date.UTC(date.getUTCFullYear(), date.getUTCMonth() + 1, 1) };
    }
  }
}

function fixed(now: number, length: number): CalendarWindow {
  const start = Math.floor(now / length) * length;
  return { start, end: start + length };
}
