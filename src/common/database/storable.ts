/** NUL, and UTF-16 surrogates without their pair: what PostgreSQL refuses in `text` and `jsonb`. */
const UNSTORABLE = /\u0000|[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g;

/**
 * A copy of `value` whose strings PostgreSQL can store: each NUL or lone surrogate becomes
 * U+FFFD. For text we did not validate ourselves (a provider's answer) on its way into a
 * settlement, which must never fail on content.
 */
export function storable<T>(value: T): T {
  if (typeof value === 'string') return value.replace(UNSTORABLE, '\ufffd') as T;
  if (Array.isArray(value)) return value.map(storable) as T;
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([key, item]) => [storable(key), storable(item)])) as T;
  }
  return value;
}
