import { ConsoleLogger, type LoggerService, type LogLevel } from '@nestjs/common';
import pino, { type DestinationStream, type Logger as Pino } from 'pino';
import { redactSecrets } from '../secrets';
import { tracing } from '../../telemetry/tracing';

/** LOG_LEVEL's values (as in the service's configuration; named here, since common/ does not import config/). */
export type LogLevelName = 'error' | 'warn' | 'log' | 'debug' | 'verbose';

/** Nest's levels as pino's: `log` is `info`, `verbose` is `trace`. */
const PINO_LEVEL = { fatal: 'fatal', error: 'error', warn: 'warn', log: 'info', debug: 'debug', verbose: 'trace' } as const;

/** Fields redacted wherever they appear in a logged object: headers carrying credentials, and keys by name. */
const REDACTED_PATHS = [
  'req.headers.authorization',
  'req.headers.cookie',
  'req.headers["x-api-key"]',
  'res.headers["set-cookie"]',
  'headers.authorization',
  'headers.cookie',
  'authorization',
  'cookie',
  'apiKey',
  '*.apiKey',
  'password',
  '*.password',
];

/** Secrets in a line's message, stack and error (configured ones and key shapes) are masked by redactSecrets. */
export { redactSecrets };

/**
 * Nest's LoggerService written by pino: one JSON object per line on stdout (LOG_FORMAT=json,
 * the production default), with `level`, `time`, `context` (the Nest logger's name), `msg`,
 * and whatever fields an object message carries (the request log's `reqId`,
 * `workspaceId`, ...). Every `new Logger(...)` of the code writes through it once installed
 * (`Logger.overrideLogger`, NestFactory's `logger`).
 */
export class PinoLoggerService implements LoggerService {
  constructor(private readonly pino: Pino) {}

  static create(level: LogLevelName, destination?: DestinationStream): PinoLoggerService {
    const options = {
      level: PINO_LEVEL[level],
      base: { pid: process.pid },
      redact: { paths: REDACTED_PATHS, censor: '[redacted]' },
      formatters: { level: (label: string) => ({ level: label }) },
      timestamp: pino.stdTimeFunctions.isoTime,
      // With OpenTelemetry on, a line written during a request carries its trace_id and span_id; while off, no mixin at all.
      ...(tracing.enabled ? { mixin: tracing.logFields } : {}),
    };
    return new PinoLoggerService(destination ? pino(options, destination) : pino(options));
  }

  log(message: unknown, ...params: unknown[]): void {
    this.write('info', message, params);
  }
  error(message: unknown, ...params: unknown[]): void {
    this.write('error', message, params);
  }
  warn(message: unknown, ...params: unknown[]): void {
    this.write('warn', message, params);
  }
  debug(message: unknown, ...params: unknown[]): void {
    this.write('debug', message, params);
  }
  verbose(message: unknown, ...params: unknown[]): void {
    this.write('trace', message, params);
  }
  fatal(message: unknown, ...params: unknown[]): void {
    this.write('fatal', message, params);
  }

  setLogLevels(levels: LogLevel[]): void {
    // The most verbose level asked for: Nest passes the list, pino takes a threshold.
    const order: LogLevel[] = ['verbose', 'debug', 'log', 'warn', 'error', 'fatal'];
    const lowest = order.find((level) => levels.includes(level));
    if (lowest) this.pino.level = PINO_LEVEL[lowest];
  }

  /**
   * Nest passes `(message, ...params, context)` from a named Logger, and for `error`
   * `(message, stack, context)`: the last string is the context, a string that looks like a
   * stack trace is the stack.
   */
  private write(level: 'fatal' | 'error' | 'warn' | 'info' | 'debug' | 'trace', message: unknown, params: unknown[]): void {
    if (!this.pino.isLevelEnabled(level)) return;
    const fields: Record<string, unknown> = {};
    const rest = [...params];
    if (rest.length > 0 && typeof rest[rest.length - 1] === 'string' && !isStack(rest[rest.length - 1])) fields.context = rest.pop();
    for (const param of rest) {
      if (typeof param === 'string' && isStack(param)) fields.stack = redactSecrets(param);
      else if (param instanceof Error) fields.err = redactedError(param);
    }
    if (message !== null && typeof message === 'object' && !(message instanceof Error)) {
      const { msg, ...objectFields } = message as Record<string, unknown>;
      this.pino[level]({ ...fields, ...objectFields }, typeof msg === 'string' ? redactSecrets(msg) : undefined);
      return;
    }
    if (message instanceof Error) {
      this.pino[level]({ ...fields, err: redactedError(message) }, redactSecrets(message.message));
      return;
    }
    this.pino[level](fields, redactSecrets(String(message)));
  }
}

/** An error as pino's serializer writes it (type, message, stack), secrets masked. */
function redactedError(error: Error): Record<string, unknown> {
  return { type: error.name, message: redactSecrets(error.message), ...(error.stack ? { stack: redactSecrets(error.stack) } : {}) };
}

/** Nest's own text logger (LOG_FORMAT=pretty), with the same masking of secrets as the JSON lines. */
export class RedactingConsoleLogger extends ConsoleLogger {
  protected override formatMessage(...args: Parameters<ConsoleLogger['formatMessage']>): string {
    return redactSecrets(super.formatMessage(...args));
  }

  protected override printStackTrace(stack: string): void {
    super.printStackTrace(stack && redactSecrets(stack));
  }
}

function isStack(value: unknown): boolean {
  return typeof value === 'string' && /\n\s+at /.test(value);
}

/**
 * The logger of the service: pino's JSON lines (LOG_FORMAT=json), or Nest's own coloured
 * text (LOG_FORMAT=pretty, the default outside production) at LOG_LEVEL and above.
 */
export function appLogger(config: { logLevel: LogLevelName; logFormat: 'json' | 'pretty' }): LoggerService {
  if (config.logFormat === 'json') return PinoLoggerService.create(config.logLevel);
  return new RedactingConsoleLogger({ logLevels: logLevelsFor(config.logLevel) });
}

const LOG_LEVELS: LogLevel[] = ['fatal', 'error', 'warn', 'log', 'debug', 'verbose'];

/** LOG_LEVEL and everything more severe. */
export function logLevelsFor(level: LogLevelName): LogLevel[] {
  return LOG_LEVELS.slice(0, LOG_LEVELS.indexOf(level) + 1);
}
