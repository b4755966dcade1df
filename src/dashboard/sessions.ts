import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { SESSION_COOKIE } from './dashboard.setup';
import type { PageRequest } from './page-request';

/**
 * Signs a person in: the session id changes (an id planted before sign-in is worthless),
 * and the new session is stored before the redirect that follows.
 */
export async function startSession(req: PageRequest, userId: string, authenticatedAt = Date.now()): Promise<void> {
  const flash = req.session.flash;
  await new Promise<void>((resolve, reject) => req.session.regenerate((error) => (error ? reject(error) : resolve())));
  req.session.userId = userId;
  req.session.authenticatedAt = authenticatedAt;
  if (flash) req.session.flash = flash;
  await new Promise<void>((resolve, reject) => req.session.save((error) => (error ? reject(error) : resolve())));
}

/** Signs out: the session is deleted from the store, so its cookie is worthless even if kept. */
export async function endSession(req: PageRequest, res: Response): Promise<void> {
  await new Promise<void>((resolve, reject) => req.session.destroy((error) => (error ? reject(error) : resolve())));
  res.clearCookie(SESSION_COOKIE, { path: req.basePath || '/', httpOnly: true, sameSite: 'lax' });
}

/** A form's errors keyed by field (`form` for the whole form); anything but a client error is rethrown. */
export function formErrors(error: unknown): Record<string, string> {
  if (error instanceof ApiError && error.status < 500 && error.status !== 404) {
    return { [error.param ?? 'form']: error.message };
  }
  throw error;
}

/** `next` of the sign-in page: a path inside the dashboard only, never another site. */
export function safeNext(next: unknown): string | null {
  if (typeof next !== 'string' || !next.startsWith('/') || next.startsWith('//') || next.startsWith('/\\')) return null;
  if (/[\u0000-\u001f]/.test(next)) return null;
  return next;
}
