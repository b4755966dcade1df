/**
 * Masks secrets in text that leaves the process: upstream error messages relayed to clients,
 * and log lines. Two nets: the configured secrets themselves (provider and deployment keys,
 * Stripe's, the session secret, passwords of URLs: whatever the configuration and the model
 * catalog hold, registered at start), and the shapes keys have (`sk-...`, `AIza...`, `Bearer
 * <token>`, a URL's password), for keys the service was never told about. Only error paths
 * and log lines pay for it.
 *
 * The registry is the process's, like the logger: registering is adding, and nothing is ever
 * forgotten (several apps in one process, as in tests, only mask more).
 */

/** Shorter values are not registered: masking "test" or "1234" would garble messages and protect nothing. */
const MIN_SECRET_LENGTH = 8;

/** Key shapes, masked whoever's key it is. Bearer first: the token after it goes with it. */
const KEY_SHAPES: [RegExp, string][] = [
  [/\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+/gi, '$1 [redacted]'],
  // OpenAI (sk-, sk-proj-), Anthropic (sk-ant-), OpenRouter and this service's own keys.
  [/\bsk-[A-Za-z0-9_-]{8,}/g, 'sk-[redacted]'],
  // Stripe's secret and restricted keys, and webhook signing secrets.
  [/\b(sk|rk)_(live|test)_[A-Za-z0-9]{8,}/g, '$1_$2_[redacted]'],
  [/\bwhsec_[A-Za-z0-9+/=]{8,}/g, 'whsec_[redacted]'],
  // Google API keys.
  [/\bAIza[A-Za-z0-9_-]{20,}/g, 'AIza[redacted]'],
  // A password in a URL (postgres://user:password@host).
  [/(\/\/[^:/@\s]+:)[^@/\s]+@/g, '$1[redacted]@'],
];

const registered = new Set<string>();
/** Every registered secret as one alternation, longest first (so a secret containing another is masked whole). */
let configured: RegExp | null = null;

/** Adds configured secret values (undefined, empty and short values are ignored). */
export function registerSecrets(values: Iterable<string | null | undefined>): void {
  let added = false;
  for (const value of values) {
    const secret = value?.trim();
    if (!secret || secret.length < MIN_SECRET_LENGTH || registered.has(secret)) continue;
    registered.add(secret);
    added = true;
  }
  if (!added) return;
  const alternatives = [...registered].sort((a, b) => b.length - a.length).map((secret) => secret.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
  configured = new RegExp(alternatives.join('|'), 'g');
}

/** The password of a URL (`redis://:password@host`), to register beside the URL's own shape. */
export function urlPassword(url: string | undefined): string | undefined {
  if (!url || !URL.canParse(url)) return undefined;
  const { password } = new URL(url);
  return password ? decodeURIComponent(password) : undefined;
}

/** `text` with every configured secret and every key-shaped string replaced by `[redacted]`. */
export function redactSecrets(text: string): string {
  let result = configured ? text.replace(configured, '[redacted]') : text;
  for (const [pattern, replacement] of KEY_SHAPES) result = result.replace(pattern, replacement);
  return result;
}
