import { randomBytes } from 'node:crypto';
import { Client } from 'pg';

/**
 * A fresh database for one test file, cloned from the migrated template: isolated from
 * the other files running in parallel, and nothing to truncate.
 */
export async function createTestDatabase(): Promise<string> {
  const templateUrl = process.env.ACS_TEST_TEMPLATE_URL;
  if (!templateUrl) throw new Error('ACS_TEST_TEMPLATE_URL is unset: run the tests through jest (npm test)');
  const name = `acs_test_${randomBytes(6).toString('hex')}`;
  const admin = new Client({ connectionString: withDatabase(templateUrl, 'postgres') });
  await admin.connect();
  try {
    const template = new URL(templateUrl).pathname.slice(1);
    await admin.query(`CREATE DATABASE ${name} TEMPLATE ${template}`);
  } finally {
    await admin.end();
  }
  return withDatabase(templateUrl, name);
}

function withDatabase(url: string, database: string): string {
  const parsed = new URL(url);
  parsed.pathname = `/${database}`;
  return parsed.toString();
}
