/** A high surrogate not followed by a low one, or a low one not preceded by a high one. */
export const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;

/** NUL, and UTF-16 surrogates without their pair: what PostgreSQL refuses in `text` and `jsonb`. */
const UNSTORABLE = new RegExp(`\\u0000|${LONE_SURROGATE.source}`);
const EVERY_UNSTORABLE = new RegExp(UNSTORABLE.source, 'g');

/**
 * `value` with strings PostgreSQL can store: each NUL or lone surrogate becomes U+FFFD. For
 * text we did not validate ourselves (a provider's answer) on its way into a settlement,
 * which must never fail on content; requests are refused such text at the edge
 * (common/validation/input-guard.ts). What needs no change is returned as it is (an object
 * or array is copied only when something in it changed): nearly everything, every request.
 */
export function storable<T>(value: T): T {
  if (typeof value === 'string') return (UNSTORABLE.test(value) ? value.replace(EVERY_UNSTORABLE, '\ufffd') : value) as T;
  if (Array.isArray(value)) {
    let copy: unknown[] | undefined;
    value.forEach((item: unknown, index) => {
      const changed = storable(item);
      if (changed !== item) (copy ??= [...value])[index] = changed;
    });
    return (copy ?? value) as T;
  }
  if (value !== null && typeof value === 'object') {
    const object = value as Record<string, unknown>;
    const keys = Object.keys(object);
    let entries: Array<[string, unknown]> | undefined;
    keys.forEach((key, index) => {
      const storableKey = storable(key);
      const item = storable(object[key]);
      // The keys before this one were storable as they are.
      if (!entries && (storableKey !== key || item !== object[key])) entries = keys.slice(0, index).map((earlier) => [earlier, object[earlier]]);
      entries?.push([storableKey, item]);
    });
    // Object.fromEntries, not assignments: a key "__proto__" (JSON.parse makes it an own key) stays a key.
    return (entries ? Object.fromEntries(entries) : value) as T;
  }
  return value;
}
