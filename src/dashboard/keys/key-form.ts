import { formatMillicents, parseDollars } from '../../common/dollars';
import { parseDay } from '../../usage/usage-period';
import type { ApiKeySummary } from '../../workspaces/api-keys.service';
import type { KeyLimits, KeyLimitsChange, SpendPeriod } from '../../workspaces/key-limits';
import { KEY_NAME_MAX_LENGTH } from '../../workspaces/api-keys.service';
import type { KeySpend } from '../../workspaces/key-spend';
import { formatDate, formatDateTime } from '../format';

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
  /** One line per limit of the key ("$5.00 per day: $1.20 spent"); empty without any. */
  limits: string[];
}

/** `creators`: the names of the keys' creators by id (AccountsService.namesOf); `spend`: the keys' spend (KeySpendService). */
export function keyRow(key: ApiKeySummary, creators: ReadonlyMap<string, string>, spend?: ReadonlyMap<string, KeySpend>): KeyRow {
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
    limits: describeLimits(key.limits, spend?.get(key.id)),
  };
}

const PERIOD_WORDS: Record<SpendPeriod, string> = { none: 'in all', daily: 'per day', weekly: 'per week', monthly: 'per month' };

/** The key's limits in words, with its spend in the current period beside a spending limit. */
export function describeLimits(limits: KeyLimits, spend: KeySpend | undefined): string[] {
  const lines: string[] = [];
  if (limits.spendLimitMillicents !== null) {
    const spent = spend ? `: ${formatMillicents(spend.period)} spent${spend.held > 0 ? `, ${formatMillicents(spend.held)} held` : ''}` : '';
    lines.push(`${formatMillicents(limits.spendLimitMillicents)} ${PERIOD_WORDS[limits.spendLimitPeriod]}${spent}`);
  }
  if (limits.allowedModels) lines.push(`Models: ${limits.allowedModels.join(', ')}`);
  if (limits.allowedAssistants) lines.push(`Assistants: ${limits.allowedAssistants.join(', ')}`);
  if (limits.rateLimitRpm !== null) lines.push(`${limits.rateLimitRpm} requests per minute`);
  if (limits.allowedIps) lines.push(`From: ${limits.allowedIps.join(', ')}`);
  return lines;
}

/** The limits form as typed (each field a string; the lists as the checked boxes or lines). */
export interface KeyLimitsFormValues {
  spend_limit: string;
  spend_limit_period: string;
  allowed_models: string[];
  allowed_assistants: string[];
  rate_limit_rpm: string;
  allowed_ips: string;
}

export function limitsFormValues(limits: KeyLimits, dollars: (millicents: number | null) => string): KeyLimitsFormValues {
  return {
    spend_limit: dollars(limits.spendLimitMillicents),
    spend_limit_period: limits.spendLimitPeriod,
    allowed_models: limits.allowedModels ?? [],
    allowed_assistants: limits.allowedAssistants ?? [],
    rate_limit_rpm: limits.rateLimitRpm === null ? '' : String(limits.rateLimitRpm),
    allowed_ips: (limits.allowedIps ?? []).join('\n'),
  };
}

/**
 * The limits form read: a spending limit in dollars (blank: none) and its period, the models
 * and assistants checked (none checked: any), a rate (blank: the workspace's) and address
 * ranges, one per line or comma (blank: anywhere). The service checks the rest and names the field.
 */
export function readKeyLimitsForm(values: KeyLimitsFormValues): { ok: true; change: KeyLimitsChange } | { ok: false; errors: Record<string, string> } {
  const errors: Record<string, string> = {};
  const amount = values.spend_limit.trim();
  const spendLimitMillicents = amount === '' ? null : parseDollars(amount);
  if (spendLimitMillicents === null && amount !== '') errors.spend_limit = 'Type an amount in dollars, such as 5 or 12.50, or leave it empty for no limit.';
  const rpm = values.rate_limit_rpm.trim();
  const rateLimitRpm = rpm === '' ? null : /^\d{1,7}$/.test(rpm) && Number(rpm) > 0 ? Number(rpm) : undefined;
  if (rateLimitRpm === undefined) errors.rate_limit_rpm = 'Type a whole number of requests per minute, or leave it empty.';
  const ips = values.allowed_ips.split(/[\s,]+/).filter(Boolean);
  if (Object.keys(errors).length > 0) return { ok: false, errors };
  return {
    ok: true,
    change: {
      spendLimitMillicents,
      spendLimitPeriod: values.spend_limit_period as SpendPeriod,
      allowedModels: values.allowed_models.length > 0 ? values.allowed_models : null,
      allowedAssistants: values.allowed_assistants.length > 0 ? values.allowed_assistants : null,
      rateLimitRpm: rateLimitRpm ?? null,
      allowedIps: ips.length > 0 ? ips : null,
    },
  };
}
