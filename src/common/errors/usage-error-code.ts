import { ApiError } from './api-error';
import { isDatabaseUnavailable } from './database-unavailable';

/**
 * The `error_code` a usage record keeps for a request that failed or was refused: what
 * happened, as the client was (or would have been) told. An API error says it itself; a
 * database that could not be reached is `database_unavailable` (the client got a 503), even
 * when the client had left meanwhile; a client that left before anything else failed is
 * `client_disconnected`. Only an error of unknown cause is `internal_error`.
 */
export function usageErrorCode(error: unknown, options: { clientGone?: boolean } = {}): string {
  if (error instanceof ApiError) return error.code;
  if (isDatabaseUnavailable(error)) return 'database_unavailable';
  if (options.clientGone) return 'client_disconnected';
  return 'internal_error';
}

