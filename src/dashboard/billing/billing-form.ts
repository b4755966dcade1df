import { TRANSACTION_TYPES, TransactionType } from '../../wallet/entities/wallet-transaction.entity';
import type { LedgerFilter } from '../../wallet/ledger-query.service';
import { readDaysAndCursor } from '../list-filter';

/** Top-up amounts offered as buttons, in dollars. */
export const TOPUP_PRESETS_DOLLARS = [10, 25, 50, 100];

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
