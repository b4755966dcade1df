import { accessSync, constants } from 'node:fs';
import * as path from 'node:path';

/**
 * A program the tests run from Debian's packages: the path an environment variable names,
 * else Debian's own path, else the first one on PATH; null when there is none.
 */
export function findExecutable(name: string, options: { override?: string; debianPath: string }): string | null {
  const candidates = [
    options.override,
    options.debianPath,
    ...(process.env.PATH ?? '').split(path.delimiter).filter(Boolean).map((dir) => path.join(dir, name)),
  ];
  for (const candidate of candidates) {
    if (!candidate) continue;
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return null;
}
