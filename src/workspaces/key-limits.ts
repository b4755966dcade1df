import { BlockList, isIP } from 'node:net';
import { ApiError } from '../common/errors/api-error';
import { isSlug } from '../common/validation/slug';
import type { KeyLimits, SpendPeriod } from '../common/http/request-context';

export type { KeyLimits, SpendPeriod };

export const SPEND_PERIODS: readonly SpendPeriod[] = ['none', 'daily', 'weekly', 'monthly'];
/** Enough for every model of a catalog and every assistant of a workspace; more is a mistake. */
const MAX_LIST_ENTRIES = 100;
const MAX_ENTRY_LENGTH = 200;

/** A key without any limit: the workspace's wallet and rate are all that bound it. */
export const NO_KEY_LIMITS: KeyLimits = {
  spendLimitMillicents: null,
  spendLimitPeriod: 'none',
  allowedModels: null,
  allowedAssistants: null,
  rateLimitRpm: null,
  allowedIps: null,
};

/** What a person or the CLI asks to set: each field present is set (null clears it), absent ones stay. */
export type KeyLimitsChange = Partial<KeyLimits>;

/**
 * The limits as they will be stored, checked: a clear 400 naming the field for anything a
 * person could get wrong (a negative amount, an unknown period, a list too long, a range
 * that is not CIDR, a model not in the catalog, an assistant that no slug could name).
 * Only the lists of `change` are checked against the catalog: a model since removed from it
 * stays in a key's list until that list is set again.
 */
export function checkedKeyLimits(
  current: KeyLimits,
  change: KeyLimitsChange,
  catalog?: { isModel(id: string): boolean; aliasOf?(name: string): string | undefined },
): KeyLimits {
  const next: KeyLimits = { ...current, ...change };
  const { spendLimitMillicents, spendLimitPeriod, rateLimitRpm } = next;
  if (spendLimitMillicents !== null && (!Number.isSafeInteger(spendLimitMillicents) || spendLimitMillicents < 0)) {
    throw ApiError.badRequest('spend_limit must be a whole, non-negative number of millicents.', 'spend_limit');
  }
  if (!SPEND_PERIODS.includes(spendLimitPeriod)) {
    throw ApiError.badRequest(`spend_limit_period must be one of ${SPEND_PERIODS.join(', ')}.`, 'spend_limit_period');
  }
  if (rateLimitRpm !== null && (!Number.isSafeInteger(rateLimitRpm) || rateLimitRpm < 1 || rateLimitRpm > 1_000_000)) {
    throw ApiError.badRequest('rate_limit_rpm must be a whole number from 1 to 1000000.', 'rate_limit_rpm');
  }
  next.allowedModels = checkedList(next.allowedModels, 'allowed_models');
  next.allowedAssistants = checkedList(next.allowedAssistants, 'allowed_assistants');
  if (change.allowedModels && catalog) {
    const unknown = next.allowedModels!.find((id) => !catalog.isModel(id));
    const aliased = unknown === undefined ? undefined : catalog.aliasOf?.(unknown);
    if (aliased !== undefined) {
      // A key lists ids, so that every name of a model is allowed or refused with it.
      throw ApiError.badRequest(`allowed_models: "${unknown}" is an alias of ${aliased}: a key lists models by their id.`, 'allowed_models');
    }
    if (unknown !== undefined) {
      throw ApiError.badRequest(`allowed_models: "${unknown}" is not a model of the catalog (GET /v1/models lists them).`, 'allowed_models');
    }
  }
  if (change.allowedAssistants) assertKnownAssistants(next.allowedAssistants!, null);
  next.allowedIps = checkedList(next.allowedIps, 'allowed_ips');
  if (next.allowedIps) addressRanges(next.allowedIps);
  return next;
}

/**
 * Each entry names an assistant: a slug's shape, and, given the workspace's slugs, one of
 * them. A 400 naming the first entry that does not. The slugs are known to the callers that
 * know the workspace (the dashboard, the CLI); the key's service checks the shape alone.
 */
export function assertKnownAssistants(slugs: readonly string[] | null | undefined, workspaceSlugs: readonly string[] | null): void {
  for (const slug of slugs ?? []) {
    if (!isSlug(slug)) {
      throw ApiError.badRequest(
        `allowed_assistants: "${slug.slice(0, 64)}" is not an assistant slug (lowercase letters and digits joined by hyphens).`,
        'allowed_assistants',
      );
    }
    if (workspaceSlugs && !workspaceSlugs.includes(slug)) {
      throw ApiError.badRequest(`allowed_assistants: "${slug}" is not an assistant of this workspace.`, 'allowed_assistants');
    }
  }
}

function checkedList(list: string[] | null, field: string): string[] | null {
  if (list === null) return null;
  const entries = [...new Set(list.map((entry) => entry.trim()).filter(Boolean))];
  if (entries.length === 0) throw ApiError.badRequest(`${field} must name at least one entry (or be cleared to allow any).`, field);
  if (entries.length > MAX_LIST_ENTRIES) throw ApiError.badRequest(`${field} may have at most ${MAX_LIST_ENTRIES} entries.`, field);
  const long = entries.find((entry) => entry.length > MAX_ENTRY_LENGTH);
  if (long) throw ApiError.badRequest(`${field}: "${long.slice(0, 40)}..." is longer than ${MAX_ENTRY_LENGTH} characters.`, field);
  return entries;
}

/**
 * The client address ranges as a BlockList: `203.0.113.0/24`, `2001:db8::/32`, or a single
 * address. A 400 naming the entry that is not one.
 */
export function addressRanges(ranges: string[]): BlockList {
  const list = new BlockList();
  for (const range of ranges) {
    const [address, bits, extra] = range.split('/');
    const family = isIP(address);
    const prefix = bits === undefined ? (family === 6 ? 128 : 32) : Number(bits);
    if (family === 0 || extra !== undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 6 ? 128 : 32) || bits === '') {
      throw ApiError.badRequest(`allowed_ips: "${range.slice(0, 60)}" is not an IP address or a CIDR range (e.g. 203.0.113.0/24).`, 'allowed_ips');
    }
    list.addSubnet(address, prefix, family === 6 ? 'ipv6' : 'ipv4');
  }
  return list;
}

/** Whether a client address (as Express reports it, IPv4 possibly mapped into IPv6) is in the ranges. */
export function addressAllowed(ranges: BlockList, address: string | undefined): boolean {
  if (!address) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  const plain = mapped ? mapped[1] : address;
  return ranges.check(plain, isIP(plain) === 6 ? 'ipv6' : 'ipv4');
}

/** The start of the period that `now` is in (UTC; weeks start on Monday), and of the next one; null for `none`. */
export function spendPeriodOf(period: SpendPeriod, now = new Date()): { start: Date; end: Date } | null {
  if (period === 'none') return null;
  const day = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), now.getUTCDate());
  if (period === 'daily') return { start: new Date(day), end: new Date(day + 86_400_000) };
  if (period === 'weekly') {
    const start = day - ((now.getUTCDay() + 6) % 7) * 86_400_000;
    return { start: new Date(start), end: new Date(start + 7 * 86_400_000) };
  }
  return {
    start: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1)),
    end: new Date(Date.UTC(now.getUTCFullYear(), now.getUTCMonth() + 1, 1)),
  };
}

/** Whether any limit is set. */
export function hasKeyLimits(limits: KeyLimits): boolean {
  return Object.entries(limits).some(([field, value]) => (field === 'spendLimitPeriod' ? false : value !== null));
}

/**
 * Refuses (403, before anything is held) a request its key may not make: an assistant not
 * among the key's, or a model not among its models: each model the request names (its
 * `model` and each of its `models`), an assistant's own model, and a nerfing rule's
 * downgrade target (`downgradedFrom`: the model the rule replaced).
 */
export function assertKeyMayRun(
  limits: KeyLimits,
  run: { models: string[]; assistant: { slug: string; model: string } | null; downgradedFrom?: string },
): void {
  const { allowedModels, allowedAssistants } = limits;
  const { assistant, downgradedFrom } = run;
  if (assistant && allowedAssistants && !allowedAssistants.includes(assistant.slug)) {
    throw ApiError.permissionDenied(
      `This API key may not use the assistant "${assistant.slug}". It may use: ${allowedAssistants.join(', ')}.`,
      'assistant_not_allowed',
    );
  }
  const refused = allowedModels && run.models.find((model) => !allowedModels.includes(model));
  if (refused) {
    const why = downgradedFrom
      ? ` (a nerfing rule of the workspace downgrades ${downgradedFrom} to it for this user now)`
      : assistant
        ? ` (the assistant "${assistant.slug}" runs on it)`
        : '';
    throw ApiError.permissionDenied(`This API key may not use the model ${refused}${why}. It may use: ${allowedModels!.join(', ')}.`, 'model_not_allowed');
  }
}
