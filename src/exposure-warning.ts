import { type AppConfig, UPSTREAM_PROVIDERS } from './config/app-config';

const LOOPBACK_HOSTS = new Set(['localhost', '::1', '[::1]', '::ffff:127.0.0.1']);

/** True when HOST only takes connections from this machine. */
export function listensOnLoopbackOnly(host: string): boolean {
  return LOOPBACK_HOSTS.has(host.toLowerCase()) || /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(host);
}

/**
 * The warning for a development start that strangers can use at the operator's expense:
 * outside production, a real provider key, listening beyond loopback, and open sign-up.
 * Null when any of these does not hold. Logged at start and printed in the first-start banner.
 */
export function exposureWarning(config: AppConfig): string | null {
  const keys = UPSTREAM_PROVIDERS.filter(([name]) => config.providers[name].apiKey).map(([, prefix]) => `${prefix}_API_KEY`);
  if (config.production || keys.length === 0 || listensOnLoopbackOnly(config.host) || config.dashboard.signup !== 'open') return null;
  const simulated =
    config.payments.provider === 'simulated' ? ' Payments are SIMULATED (PAYMENT_PROVIDER=simulated): they can add credit for free.' : '';
  return (
    `Anyone who can reach this service can sign up and spend on your provider account: it listens on ${config.host} ` +
    `(beyond this machine) with open sign-up, outside production, and calls real models with ${keys.join(', ')}.${simulated} ` +
    'Fix: set HOST=127.0.0.1 (this machine only), or SIGNUP=invite (only people you invite), or NODE_ENV=production ' +
    '(invite-only sign-up, no simulator, no simulated payments).'
  );
}
