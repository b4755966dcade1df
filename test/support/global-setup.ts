import { chmod, mkdtemp } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { Client } from 'pg';
import { runMigrations } from '../../src/database/data-source';
import { openEmbeddedPostgres } from '../../src/database/embedded-postgres';

export const TEMPLATE_DATABASE = 'acs_template';

/**
 * The daily partitions of usage_records that a deployment in its steady state has: the 90
 * days of the default retention window and a week ahead. Tests then run against as many
 * partitions as production does, and may write records of any of those days.
 */
async function coverRetentionWindow(url: string): Promise<void> {
  const client = new Client({ connectionString: url });
  await client.connect();
  try {
    await client.query(`SELECT ensure_usage_record_partitions(current_date - 95, current_date + 7)`);
  } finally {
    await client.end();
  }
}

/** Starts one embedded PostgreSQL for the whole run and migrates the template database once. */
export default async function globalSetup(): Promise<void> {
  const started = Date.now();
  const dataDir = await mkdtemp(path.join(tmpdir(), 'acs-test-'));
  // The server runs as the unprivileged `postgres` user when tests run as root.
  await chmod(dataDir, 0o755);
  const database = await openEmbeddedPostgres({ dataDir, database: TEMPLATE_DATABASE });
  await runMigrations(database.url);
  await coverRetentionWindow(database.url);
  process.env.ACS_TEST_TEMPLATE_URL = database.url;
  process.env.ACS_TEST_DATA_DIR = dataDir;
  (globalThis as Record<string, unknown>).__ACS_TEST_DATABASE__ = database;
  process.stdout.write(`\nTest PostgreSQL ready in ${Date.now() - started} ms (${dataDir})\n`);
}
