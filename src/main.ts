// First: OpenTelemetry, when configured, must patch `pg` before anything loads it.
import './telemetry/register';
import 'reflect-metadata';
import { INestApplication, Logger } from '@nestjs/common';
import type { Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { createApp } from './app.factory';
import { appLogger, PinoLoggerService } from './common/logging/pino-logger';
import { ServerDrain } from './common/http/server-drain';
import { AppConfig, ConfigError, configuredSecrets, loadConfig } from './config/app-config';
import { redactSecrets, registerSecrets } from './common/secrets';
import { DatabaseHandle, openDatabase } from './database/database';
import { runMigrations } from './database/data-source';
import { EmbeddedPostgresError } from './database/embedded-postgres';
import { exposureWarning } from './exposure-warning';
import { loadCatalogFile } from './models/model-catalog';
import { createDemoWorkspaceOnFirstStart } from './first-start';
import { OperatorsService } from './operator/operators.service';
import { stopTelemetry } from './telemetry/telemetry-sdk';

const logger = new Logger('Bootstrap');
let database: Promise<DatabaseHandle> | undefined;
let app: INestApplication | undefined;
let config: AppConfig | undefined;
let stopping = false;

/** Each starts the stop; SIGHUP (a closed terminal) too, since the terminal's user expects the service to end cleanly. */
const STOP_SIGNALS = ['SIGTERM', 'SIGINT', 'SIGHUP'] as const;
/**
 * Signals within this time of the first are taken as copies of it and ignored: under
 * `npm start` a signal to the process group (Ctrl-C, systemd, `kill -TERM -<pgid>`) reaches
 * node twice, from the kernel and forwarded by npm (more with npm inside npm). A signal after
 * it is an operator insisting: it forces the stop.
 */
const SIGNAL_COPIES_MS = 2_000;
/** How long a forced stop may still take (settling what the streams delivered) before the process exits anyway. */
const FORCED_STOP_BOUND_MS = 15_000;
let firstSignalAt: number | undefined;
let forced = false;

function onStopSignal(signal: NodeJS.Signals): void {
  if (firstSignalAt === undefined) {
    firstSignalAt = Date.now();
    void stop(signal);
    return;
  }
  if (forced) {
    logger.warn(`${signal} received: the stop is already forced`);
  } else if (Date.now() - firstSignalAt < SIGNAL_COPIES_MS) {
    logger.log(`${signal} received again: already stopping (a signal ${SIGNAL_COPIES_MS} ms or more after the first forces the stop)`);
  } else {
    forced = true;
    logger.warn(`${signal} received again: forcing the stop: open streams end now, charged for what they delivered; exit within ${FORCED_STOP_BOUND_MS} ms`);
    app?.get(ServerDrain).hurry();
    setTimeout(() => {
      logger.error(`The forced stop did not end within ${FORCED_STOP_BOUND_MS} ms: exiting (the embedded PostgreSQL is told to shut down)`);
      process.exit(1);
    }, FORCED_STOP_BOUND_MS).unref();
  }
}

/**
 * Stops in order: readiness turns 503 and the listener closes at once, requests in flight
 * finish and streams get SHUTDOWN_DRAIN_MS before they are ended (ServerDrain), then the
 * application closes (leases and holds go back), the pool closes, and the embedded database
 * stops. Registered before anything starts, so a signal during start-up (migrations, say)
 * still stops the embedded database. Repeated signals: onStopSignal.
 */
async function stop(signal: string): Promise<void> {
  if (stopping) return;
  stopping = true;
  logger.log(`${signal} received: not ready any more; finishing requests (streams: up to ${config?.shutdownDrainMs ?? 0} ms), then stopping`);
  if (app && config) {
    const outcome = await app
      .get(ServerDrain)
      .stop(app.getHttpServer() as Server, config.shutdownDrainMs)
      .catch((error) => logger.error(`Error while draining: ${String(error)}`));
    if (outcome) logger.log(`Drained: ${outcome.inFlightAtStart} request(s) were in flight, ${outcome.openAtDeadline} open at the deadline`);
  }
  await app?.close().catch((error) => logger.error(`Error while closing: ${String(error)}`));
  // The pool reports itself closed slightly before its connections are: let them go first.
  if (app) await sleep(100);
  // Awaits a database still opening, so a signal during start-up never leaves it running.
  await database
    ?.then((handle) => handle.stop())
    .catch((error) => logger.error(`Error while stopping the database: ${String(error)}`));
  // Last: the spans of the drained requests and the settlements are exported before the exit.
  await stopTelemetry();
  process.exit(0);
}

/**
 * Logs once their reader is gone: a closed terminal (whose SIGHUP starts the stop) fails every
 * write with EIO, a pipe whose reader quit with EPIPE. Unhandled, the first log line of the
 * drain would end the process, and pino would retry its last line at exit forever: the lines
 * are dropped instead, and the stop goes on.
 */
function dropLogsWhenTheirReaderIsGone(): void {
  for (const stream of [process.stdout, process.stderr]) stream.on('error', () => undefined);
}

/** pino's stdout (what `pino()` writes to), dropping lines once a write failed (above) instead of throwing. */
function pinoStdout(): pino.DestinationStream {
  const destination = pino.destination(1);
  destination.on('error', () => {
    destination.write = () => true;
    destination.flushSync = () => undefined;
    destination.end = () => undefined;
  });
  return destination;
}

async function bootstrap(): Promise<void> {
  config = loadConfig();
  registerSecrets(configuredSecrets(config));
  // Read before anything starts, as the configuration is: inside Nest, its error came with Nest's stack trace.
  if (config.modelCatalogFile) loadCatalogFile(config.modelCatalogFile);
  dropLogsWhenTheirReaderIsGone();
  // One logger for the whole process: pino's JSON lines or Nest's text (LOG_FORMAT).
  const appLog = config.logFormat === 'json' ? PinoLoggerService.create(config.logLevel, pinoStdout()) : appLogger(config);
  Logger.overrideLogger(appLog);
  for (const signal of STOP_SIGNALS) process.on(signal, onStopSignal);

  // The embedded PostgreSQL out of the service's process group: stopped by the service, after its drain.
  database = openDatabase(config, (message) => logger.log(message), { ownProcessGroup: true });
  const { url, ownsServer } = await database;
  const applied = await runMigrations(url);
  if (applied.length > 0) logger.log(`Applied migrations: ${applied.join(', ')}`);

  app = await createApp(config, url, { logger: appLog });
  if (stopping) return;
  await app.listen(config.port, config.host);
  const baseUrl = `http://${['0.0.0.0', '::'].includes(config.host) ? 'localhost' : config.host}:${config.port}`;
  logger.log(`Listening on ${baseUrl} (API at ${baseUrl}/v1, docs at ${baseUrl}/docs)`);
  const exposure = exposureWarning(config);
  if (exposure) logger.warn(`WARNING: ${exposure}`);
  const operators = await app.get(OperatorsService).unverifiedOperatorsWarning();
  if (operators) logger.warn(operators);
  if (ownsServer) await createDemoWorkspaceOnFirstStart(app, baseUrl);
}

bootstrap().catch(async (error: unknown) => {
  // A signal during start-up: what failed is the work the stop cut short, and stop() exits.
  if (stopping) return;
  const message =
    error instanceof ConfigError || error instanceof EmbeddedPostgresError
      ? error.message
      : `The service could not start: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`;
  // A configuration that could not be read has no log format yet: plain text on stderr.
  if (config?.logFormat === 'json') logger.fatal(message);
  else console.error(redactSecrets(message));
  await app?.close().catch(() => undefined);
  await database?.then((handle) => handle.stop()).catch(() => undefined);
  await stopTelemetry();
  process.exit(1);
});
