import type { Request } from 'express';

/** Route parameters that carry a credential: a single-use link's secret (sign-in, password reset, e-mail check, invitation). */
const SECRET_PARAM = /token|secret/i;

/**
 * A request's path as logs may show it: never the query string (which may carry tokens), and
 * the value of any route parameter that is a link's secret replaced by `[redacted]`, so that
 * whoever reads the logs cannot use a sign-in or password-reset link before its owner does.
 */
export function loggedPath(req: Request): string {
  let path = req.originalUrl.split('?', 1)[0];
  for (const [name, value] of Object.entries((req.params ?? {}) as Record<string, unknown>)) {
    if (SECRET_PARAM.test(name) && typeof value === 'string' && value.length > 0) {
      path = path.split(encodeURIComponent(value)).join('[redacted]').split(value).join('[redacted]');
    }
  }
  return path;
}
