import { Logger } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import * as path from 'node:path';
import type { AppConfig } from '../config/app-config';

const FILE_NAME = 'session-secret';

/**
 * SESSION_SECRET, else a secret generated once into DATA_DIR (so sessions survive a
 * restart of a laptop install). Replicas must share SESSION_SECRET; where DATA_DIR cannot
 * be written (a read-only container) the secret lives as long as the process, with a warning.
 */
export function sessionSecret(config: AppConfig): string {
  if (config.sessionSecret) return config.sessionSecret;
  const file = path.join(config.dataDir, FILE_NAME);
  try {
    const existing = readFileSync(file, 'utf8').trim();
    if (existing.length >= 32) return existing;
  } catch {
    // not there yet
  }
  const secret = randomBytes(32).toString('base64url');
  try {
    mkdirSync(config.dataDir, { recursive: true });
    // `wx`: when two processes start together, the second keeps the first one's secret.
    writeFileSync(file, `${secret}\n`, { mode: 0o600, flag: 'wx' });
    return secret;
  } catch (error) {
    // Only the write's EEXIST means another process won the race; DATA_DIR being a file is EEXIST from mkdir.
    if ((error as NodeJS.ErrnoException).code === 'EEXIST' && (error as NodeJS.ErrnoException).syscall === 'open') {
      return readFileSync(file, 'utf8').trim();
    }
    new Logger('Dashboard').warn(
      `SESSION_SECRET is unset and ${file} cannot be written (${(error as Error).message}): dashboard sessions end when this process stops. Set SESSION_SECRET.`,
    );
    return secret;
  }
}
