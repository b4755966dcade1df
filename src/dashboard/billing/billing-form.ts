import { TRANSACTION_TYPES, TransactionType } from '../../wallet/entities/wallet-transaction.entity';
import type { LedgerFilter } from '../../wallet/ledger-query.service';
import { readDaysAndCursor } from '../list-filter';

/** Dollars as people type them: `25`, `25.5`, `1,250.00`, `$10`. */
const DOLLARS = /^\$?\s*(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d{1,2}))?$/;
/** The largest amount a field takes, so that the millicents stay a safe integer. */
const MAX_DOLLARS = 10_000_000_000n;

/** Top-up amounts offered as buttons, in dollars. */
export const TOPUP_PRESETS_DOLLARS = [10, 25, 50, 100];

/**
 * An amount typed in dollars, as millicents (1 dollar = 100,000), exactly: whole cents only.
 * Null when it is not such an amount.
 */
export function parseDollars(input: string | undefined): number | null {
  const match = DOLLARS.exec((input ?? '').trim());
  if (!match) return null;
  const whole = BigInt(match[1].replace(/,/g, ''));
  if (whole > MAX_DOLLARS) return null;
  const cents = BigInt((match[2] ?? '').padEnd(2, '0'));
  return Number(whole * 100_000n + cents * 1_000n);
}

/** Millicents as a value for a dollars field (`25.00`); whole cents, as the fields take. */
export function dollarsField(millicents: number | null | undefined): string {
  if (millicents === null || millicents === undefined) return '';
  const cents = BigInt(Math.round(millicents / 1000));
  return `${cents / 100n}.${(cents % 100n).toString().padStart(2, '0')}`;
}

/** The ledger filters of the billing page, as in its query string. */
export interface LedgerQuery {
  type: string;
  from: string;
  to: string;
  after: string;
}

export type ReadLedgerQuery =
  | { ok: true; filter: LedgerFilter; startingAfter?: string }
  | { ok: false; errors: Record<string, string> };

/**
 * Reads the filter fields: a transaction type, a first and last day (UTC, both included),
 * the cursor of the page. Each bad field is named, so the page can say what to fix.
 */
export function readLedgerQuery(query: LedgerQuery): ReadLedgerQuery {
  const errors: Record<string, string> = {};
  const filter: LedgerFilter = {};
  if (query.type) {
    if ((TRANSACTION_TYPES as readonly string[]).includes(query.type)) filter.type = query.type as TransactionType;
    else errors.type = `Choose one of the types offered (${TRANSACTION_TYPES.join(', ')}).`;
  }
  const startingAfter = readDaysAndCursor(query, filter, errors, 'transactions');
  if (Object.keys(errors).length > 0) return { ok: false, errors };
  return { ok: true, filter, startingAfter };
}

/** The query string of a filter (for the next page's and the CSV's links), without empty fields. */
export function queryString(fields: Record<string, string | undefined>): string {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(fields)) if (value) params.set(name, value);
  const text = params.toString();
  return text ? `?${text}` : '';
}
