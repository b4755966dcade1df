import 'reflect-metadata';
import { INestApplication, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { createApp } from './app.factory';
import { ConfigError, loadConfig } from './config/app-config';
import { DatabaseHandle, openDatabase } from './database/database';
import { runMigrations } from './database/data-source';
import { createDemoWorkspaceOnFirstStart } from './workspaces/first-start';

const logger = new Logger('Bootstrap');
let database: DatabaseHandle | undefined;
let app: INestApplication | undefined;
let stopping = false;

/**
 * Stops in order: no new requests, in-flight ones finish, the pool closes, then the
 * embedded database stops. Registered before anything starts, so a signal during start-up
 * (migrations, say) still stops the embedded database.
 */
async function stop(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.log(`${signal} received: finishing requests, then stopping`);
  await app?.close().catch((error) => logger.error(`Error while closing: ${String(error)}`));
  // The pool reports itself closed slightly before its connections are: let them go first.
  if (app) await sleep(100);
  await database?.stop().catch((error) => logger.error(`Error while stopping the database: ${String(error)}`));
  process.exit(0);
}

async function bootstrap(): Promise<void> {
  const config = loadConfig();
  process.once('SIGINT', () => void stop('SIGINT'));
  process.once('SIGTERM', () => void stop('SIGTERM'));

  database = await openDatabase(config, (message) => logger.log(message));
  const applied = await runMigrations(database.url);
  if (applied.length > 0) logger.log(`Applied migrations: ${applied.join(', ')}`);

  app = await createApp(config, database.url);
  await app.listen(config.port, config.host);
  const baseUrl = `http://${['0.0.0.0', '::'].includes(config.host) ? 'localhost' : config.host}:${config.port}`;
  logger.log(`Listening on ${baseUrl} (API at ${baseUrl}/v1, docs at ${baseUrl}/docs)`);
  if (database.ownsServer) await createDemoWorkspaceOnFirstStart(app, baseUrl);
}

bootstrap().catch(async (error: unknown) => {
  if (error instanceof ConfigError) {
    console.error(error.message);
  } else {
    console.error(`The service could not start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
  }
  await app?.close().catch(() => undefined);
  await database?.stop().catch(() => undefined);
  process.exit(1);
});
