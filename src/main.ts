import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { createApp } from './app.factory';
import { ConfigError, loadConfig } from './config/app-config';
import { openDatabase } from './database/database';
import { runMigrations } from './database/data-source';
import { createDemoWorkspaceOnFirstStart } from './workspaces/first-start';

async function bootstrap(): Promise<void> {
  const logger = new Logger('Bootstrap');
  const config = loadConfig();
  const database = await openDatabase(config, (message) => logger.log(message));
  let stopping = false;
  try {
    const applied = await runMigrations(database.url);
    if (applied.length > 0) logger.log(`Applied migrations: ${applied.join(', ')}`);

    const app = await createApp(config, database.url);
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      logger.log(`${signal} received: finishing requests, then stopping`);
      // Order matters: stop taking requests, close the pool, then stop the embedded database.
      await app.close().catch((error) => logger.error(`Error while closing: ${String(error)}`));
      await database.stop().catch((error) => logger.error(`Error while stopping the database: ${String(error)}`));
      process.exit(0);
    };
    process.once('SIGINT', () => void stop('SIGINT'));
    process.once('SIGTERM', () => void stop('SIGTERM'));

    await app.listen(config.port, config.host);
    const baseUrl = `http://${['0.0.0.0', '::'].includes(config.host) ? 'localhost' : config.host}:${config.port}`;
    logger.log(`Listening on ${baseUrl} (API at ${baseUrl}/v1, docs at ${baseUrl}/docs)`);
    if (database.ownsServer) await createDemoWorkspaceOnFirstStart(app, baseUrl);
  } catch (error) {
    await database.stop().catch(() => undefined);
    throw error;
  }
}

bootstrap().catch((error: unknown) => {
  if (error instanceof ConfigError) {
    console.error(error.message);
  } else {
    console.error(`The service could not start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  }
  process.exit(1);
});
