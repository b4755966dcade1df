import { parseDay } from '../../usage/usage-period';
import type { ApiKeySummary } from '../../workspaces/api-keys.service';
import { formatDate, formatDateTime } from '../format';

export const KEY_NAME_MAX_LENGTH = 100;
const DAY_MS = 86_400_000;

/** The expiry choices of the form: a number of days, a date, or none. */
export const EXPIRY_CHOICES = [
  { value: 'never', label: 'Never' },
  { value: '7', label: 'In 7 days' },
  { value: '30', label: 'In 30 days' },
  { value: '90', label: 'In 90 days' },
  { value: 'date', label: 'On a date (below)' },
] as const;

export interface KeyFormValues {
  name: string;
  expires: string;
  expires_on: string;
}

export type KeyForm =
  | { ok: true; name: string; expiresAt: Date | null }
  | { ok: false; errors: Record<string, string> };

/**
 * The create form read: a name (required, at most 100 characters) and an expiry. A date
 * means "works until the end of that day (UTC)", so it must be today or later.
 */
export function readKeyForm(values: KeyFormValues, now = new Date()): KeyForm {
  const errors: Record<string, string> = {};
  const name = values.name.trim();
  if (!name) errors.name = 'Give the key a name, such as the program that uses it.';
  else if (name.length > KEY_NAME_MAX_LENGTH) errors.name = `A name has at most ${KEY_NAME_MAX_LENGTH} characters.`;

  let expiresAt: Date | null = null;
  const choice = values.expires || 'never';
  if (choice === 'date') {
    const day = values.expires_on ? parseDay(values.expires_on) : null;
    if (day === null) {
      errors.expires_on = 'Choose the last day the key works (YYYY-MM-DD).';
    } else {
      expiresAt = new Date((day + 1) * DAY_MS);
      if (expiresAt.getTime() <= now.getTime()) errors.expires_on = 'That day is over: choose today or a later day.';
      else if (day > parseDay('9999-12-30')!) errors.expires_on = 'Choose a day before the year 10000.';
    }
  } else if (choice !== 'never') {
    const days = EXPIRY_CHOICES.find((option) => option.value === choice && /^\d+$/.test(option.value));
    if (!days) errors.expires = 'Choose one of the offered expiries.';
    else expiresAt = new Date(now.getTime() + Number(days.value) * DAY_MS);
  }
  return Object.keys(errors).length > 0 ? { ok: false, errors } : { ok: true, name, expiresAt };
}

/** A key as a table row shows it (text only, never its hash or secret). */
export interface KeyRow {
  id: string;
  name: string | null;
  prefix: string;
  created: string;
  createdIso: string;
  createdBy: string;
  lastUsed: string;
  expires: string;
  status: ApiKeySummary['status'];
  statusText: string;
}

/** `creators`: the names of the keys' creators by id (AccountsService.namesOf). */
export function keyRow(key: ApiKeySummary, creators: ReadonlyMap<string, string>): KeyRow {
  return {
    id: key.id,
    name: key.name,
    prefix: `${key.displayPrefix}…`,
    created: formatDate(key.createdAt),
    createdIso: key.createdAt.toISOString(),
    // No user: made by the CLI or at first start (an account's deletion clears it too).
    createdBy: (key.createdBy !== null ? creators.get(key.createdBy) : undefined) ?? 'CLI',
    lastUsed: key.lastUsedAt ? formatDateTime(key.lastUsedAt) : 'never',
    expires: key.expiresAt ? formatDateTime(key.expiresAt) : 'never',
    status: key.status,
    statusText:
      key.status === 'revoked' && key.revokedAt
        ? `revoked ${formatDate(key.revokedAt)}`
        : key.status === 'expired'
          ? 'expired'
          : 'active',
  };
}
