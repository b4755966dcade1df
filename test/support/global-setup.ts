import { chmod, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { runMigrations } from '../../src/database/data-source';
import { openEmbeddedPostgres } from '../../src/database/embedded-postgres';

export const TEMPLATE_DATABASE = 'acs_template';

/** Starts one embedded PostgreSQL for the whole run and migrates the template database once. */
export default async function globalSetup(): Promise<void> {
  const started = Date.now();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'acs-test-'));
  // The server runs as the unprivileged `postgres` user when tests run as root.
  await chmod(dataDir, 0o755);
  const database = await openEmbeddedPostgres({ dataDir, database: TEMPLATE_DATABASE });
  await runMigrations(database.url);
  process.env.ACS_TEST_TEMPLATE_URL = database.url;
  process.env.ACS_TEST_DATA_DIR = dataDir;
  (globalThis as Record<string, unknown>).__ACS_TEST_DATABASE__ = database;
  process.stdout.write(`\nTest PostgreSQL ready in ${Date.now() - started} ms (${dataDir})\n`);
}
