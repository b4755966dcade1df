import type { AppConfig } from '../config/app-config';
import { DatabaseHandle, openEmbeddedPostgres } from './embedded-postgres';

export type { DatabaseHandle } from './embedded-postgres';

export const EMBEDDED_DATABASE_NAME = 'assistant_chat';

/**
 * DATABASE_URL when set; otherwise the embedded PostgreSQL under DATA_DIR (in its own process
 * group with `ownProcessGroup`: the service, which stops it after its drain).
 */
export async function openDatabase(
  config: AppConfig,
  log?: (message: string) => void,
  options: { ownProcessGroup?: boolean } = {},
): Promise<DatabaseHandle> {
  if (config.databaseUrl) return { url: config.databaseUrl, ownsServer: false, stop: async () => undefined };
  return openEmbeddedPostgres({ dataDir: config.dataDir, database: EMBEDDED_DATABASE_NAME, log, ownProcessGroup: options.ownProcessGroup });
}
