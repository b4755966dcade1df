import { ApiError } from './api-error';

/** Seconds a client is told to wait (Retry-After) when the database cannot be reached. */
export const DATABASE_RETRY_AFTER_SECONDS = 5;

/** Socket-level failures of the connection to PostgreSQL (node-postgres passes them on as they are). */
const NETWORK_CODES = new Set(['ECONNREFUSED', 'ECONNRESET', 'ETIMEDOUT', 'EPIPE', 'EHOSTUNREACH', 'ENETUNREACH', 'ENOTFOUND', 'EAI_AGAIN']);

/**
 * SQLSTATEs of a server that is going away or full: admin_shutdown, crash_shutdown,
 * cannot_connect_now (starting or shutting down), too_many_connections; and of a statement
 * that waited past the service's bounds (database/data-source.ts): query_canceled (the
 * statement timeout), lock_not_available (the lock timeout), idle_in_transaction_session_timeout.
 * Class 08 (connection exceptions) is matched as a whole.
 */
const UNAVAILABLE_SQLSTATES = new Set(['57P01', '57P02', '57P03', '53300', '57014', '55P03', '25P03']);

/**
 * node-postgres and its pool report a lost or impossible connection only in their messages;
 * so does TypeORM a data source already destroyed (a statement still under way as the
 * service stops).
 */
const CONNECTION_MESSAGES = [
  /Connection terminated/i,
  /timeout exceeded when trying to connect/i,
  /Client has encountered a connection error/i,
  /Cannot use a pool after calling end/i,
  /^Driver not Connected$/,
  // pg's own client-side query_timeout, should a caller set one.
  /^Query read timeout$/,
];

/**
 * TypeORM releases a transaction's query runner when its connection reports an error (the
 * server ended it, the socket broke); the transaction's next statement then fails with one
 * of these instead of the connection's error.
 */
const RELEASED_RUNNER_ERRORS = new Set(['QueryRunnerAlreadyReleasedError', 'QueryRunnerProviderAlreadyReleasedError']);

/** A connection dropped because the server did not answer within DATABASE_ANSWER_TIMEOUT_MS (database/bounded-client.ts). */
const NOT_ANSWERING_ERRORS = new Set(['DatabaseNotAnsweringError']);

/**
 * Whether an error means PostgreSQL cannot be reached (stopped, restarting, full,
 * unreachable), as opposed to a query that failed: those are answered 503, and a retry
 * may well succeed. TypeORM wraps driver errors (`driverError`); a connection tried on
 * several addresses fails with an AggregateError (`errors`).
 */
export function isDatabaseUnavailable(error: unknown): boolean {
  const pending: unknown[] = [error];
  // A bounded walk: wrappers nest a few levels at most.
  for (let seen = 0; pending.length > 0 && seen < 16; seen++) {
    const candidate = pending.pop();
    if (typeof candidate !== 'object' || candidate === null) continue;
    const { code, message, name, driverError, errors } = candidate as {
      code?: unknown;
      message?: unknown;
      name?: unknown;
      driverError?: unknown;
      errors?: unknown;
    };
    if (typeof name === 'string' && (RELEASED_RUNNER_ERRORS.has(name) || NOT_ANSWERING_ERRORS.has(name))) return true;
    if (typeof code === 'string' && (NETWORK_CODES.has(code) || UNAVAILABLE_SQLSTATES.has(code) || /^08[0-9A-Z]{3}$/.test(code))) {
      return true;
    }
    if (typeof message === 'string' && CONNECTION_MESSAGES.some((pattern) => pattern.test(message))) return true;
    if (driverError) pending.push(driverError);
    if (Array.isArray(errors)) pending.push(...errors);
  }
  return false;
}

/** The answer when the database cannot be reached: worth a retry, and nothing of its internals is told. */
export function databaseUnavailableError(): ApiError {
  return new ApiError(
    'service_unavailable',
    `The service cannot reach its database right now. Try again in ${DATABASE_RETRY_AFTER_SECONDS} seconds.`,
    { code: 'database_unavailable', headers: { 'Retry-After': String(DATABASE_RETRY_AFTER_SECONDS) } },
  );
}
