/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** NUL, and UTF-16 surrogates without their pair: what PostgreSQL refuses in `text` and `jsonb`. */
const UNSTORABLE = new RegExp(`\\u0000|${LONE_SURROGATE.source}`, 'g');

/**
 * A copy of `value` whose strings PostgreSQL can store: each NUL or lone surrogate becomes
 * U+FFFD. For text we did not validate ourselves (a provider's answer) on its way into a
 * settlement, which must never fail on content; requests are refused such text at the edge
 * (common/validation/input-guard.ts).
 */
export function storable<T>(value: T): T {
  if (typeof value === 'string') return value.replace(UNSTORABLE, '\ufffd') as T;
  if (Array.isArray(value)) return value.map(storable) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [storable(key), storable(item)])) as T;
  }
  return value;
}
