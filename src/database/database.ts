import type { AppConfig } from '../config/app-config';
import { DatabaseHandle, openEmbeddedPostgres } from './embedded-postgres';

export type { DatabaseHandle } from './embedded-postgres';

export const EMBEDDED_DATABASE_NAME = 'assistant_chat';

/** DATABASE_URL when set; otherwise the embedded PostgreSQL under DATA_DIR. */
export async function openDatabase(config: AppConfig, log?: (message: string) => void): Promise<DatabaseHandle> {
  if (config.databaseUrl) return { url: config.databaseUrl, ownsServer: false, stop: async () => undefined };
  return openEmbeddedPostgres({ dataDir: config.dataDir, database: EMBEDDED_DATABASE_NAME, log });
}
