/**
 * How the dashboard writes amounts and times. Money is kept in millicents (1 dollar =
 * 100,000 millicents) and shown exactly to the millicent, never through a float division.
 */

// Amounts are written the same way by the widget's settings: the function lives with the dollar fields.
export { formatMillicents } from '../common/dollars';

/** `2025-03-14` (UTC). */
export function formatDate(date: Date): string {
  return date.toISOString().slice(0, 10);
}

/** `2025-03-14 09:26 UTC`: minutes are as fine as the dashboard's times get. */
export function formatDateTime(date: Date): string {
  return `${date.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
}
