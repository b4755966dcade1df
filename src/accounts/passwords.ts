import { hash, verify } from '@node-rs/argon2';

/** `Algorithm.Argon2id` of @node-rs/argon2 (an ambient const enum, which isolatedModules cannot read). */
const ARGON2ID = 2;

/** NIST SP 800-63B: at least 8; we ask for 10, with no composition rules. */
export const PASSWORD_MIN_LENGTH = 10;
/** Hashing cost grows with length: a megabyte "password" must not tie up a core. */
export const PASSWORD_MAX_LENGTH = 200;

/** The most common passwords of public breach corpora that pass the length rule. */
const COMMON_PASSWORDS = new Set([
  '1234567890', '0123456789', '1234567891', '1111111111', '0000000000', '123456789a', 'qwertyuiop', 'password12',
  'password123', 'password1234', 'iloveyou12', 'qwerty1234', 'qwerty12345', '1q2w3e4r5t', '1qaz2wsx3edc',
  'abcdefghij', 'abcd123456', 'passw0rd12', 'welcome123', 'letmein123', 'football12', 'baseball12', 'sunshine12',
  'princess12', 'dragon1234', 'monkey1234', 'superman12', 'trustno123', 'changeme12', 'administrator',
  'qwertyuiop123', 'asdfghjkl1', 'zxcvbnm123', 'aaaaaaaaaa', 'password!1', 'p@ssw0rd12', 'michael123',
]);

/** Why a new password is refused, or null when it is acceptable. */
export function passwordProblem(password: string, email?: string): string | null {
  if (password.length < PASSWORD_MIN_LENGTH) return `Use at least ${PASSWORD_MIN_LENGTH} characters.`;
  if (password.length > PASSWORD_MAX_LENGTH) return `Use at most ${PASSWORD_MAX_LENGTH} characters.`;
  const lower = password.toLowerCase();
  if (COMMON_PASSWORDS.has(lower) || /^(.)\1+$/.test(password)) return 'This password is too common; choose another.';
  if (email && lower === email.toLowerCase()) return 'Your password cannot be your email address.';
  return null;
}

/** argon2id with the library's defaults (19 MiB, 2 passes: OWASP's recommendation). */
export function hashPassword(password: string): Promise<string> {
  return hash(password, { algorithm: ARGON2ID });
}

/** A hash of nothing anyone knows: verified against when the account does not exist, so both take as long. */
const DECOY_HASH = hashPassword('decoy password that matches nothing');

export async function verifyPassword(passwordHash: string | null, password: string): Promise<boolean> {
  if (password.length > PASSWORD_MAX_LENGTH) return false;
  if (!passwordHash) {
    await verify(await DECOY_HASH, password).catch(() => false);
    return false;
  }
  return verify(passwordHash, password).catch(() => false);
}
