import { readdirSync } from 'node:fs';
import * as path from 'node:path';
import type { MigrationInterface } from 'typeorm';

type MigrationClass = new () => MigrationInterface;

/**
 * Every migration in this folder (`<timestamp>-<Name>.ts`, compiled to `.js`), oldest first.
 * Loaded by file name so that the app, the CLI and the tests (from .ts or .js) see the same set,
 * and adding a migration is adding a file.
 */
export const MIGRATIONS: MigrationClass[] = readdirSync(__dirname)
  .filter((file) => /^\d{13}-[\w-]+\.(ts|js)$/.test(file) && !file.endsWith('.d.ts'))
  .sort()
  .map((file) => {
    // eslint-disable-next-line @typescript-eslint/no-require-imports
    const exported = require(path.join(__dirname, file)) as Record<string, unknown>;
    const migration = Object.values(exported).find((value) => typeof value === 'function');
    if (!migration) throw new Error(`Migration file ${file} exports no class`);
    return migration as MigrationClass;
  });
