import { rm } from 'node:fs/promises';
import type { DatabaseHandle } from '../../src/database/embedded-postgres';

export default async function globalTeardown(): Promise<void> {
  const database = (globalThis as Record<string, unknown>).__ACS_TEST_DATABASE__ as DatabaseHandle | undefined;
  await database?.stop();
  if (process.env.ACS_TEST_DATA_DIR) await rm(process.env.ACS_TEST_DATA_DIR, { recursive: true, force: true });
}
