import { createHash, randomBytes } from 'node:crypto';

/**
 * The secrets of single-use links (verification, reset, sign-in, invitation): 32 random
 * bytes in base64url, of which only the SHA-256 is stored.
 */
const LINK_SECRET = /^[A-Za-z0-9_-]{43}$/;

export function sha256(value: string): string {
  return createHash('sha256').update(value).digest('hex');
}

/** A new link secret and the hash to store for it. */
export function newLinkSecret(): { secret: string; hash: string } {
  const secret = randomBytes(32).toString('base64url');
  return { secret, hash: sha256(secret) };
}

/** Whether a value can be a link secret at all (anything else matches no row, without a query). */
export function isLinkSecret(value: string): boolean {
  return LINK_SECRET.test(value);
}
