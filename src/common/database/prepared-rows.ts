import type { EntityManager } from 'typeorm';
import { isDatabaseUnavailable } from '../errors/database-unavailable';
import { queryRows } from './query-rows';

interface PreparingClient {
  query<T>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: T[] }>;
}

interface PooledClient extends PreparingClient {
  release(error?: Error): void;
  on(event: 'error', listener: () => void): void;
  removeListener(event: 'error', listener: () => void): void;
}

/**
 * Rows of a statement run as a named prepared statement, for the statements of the hot
 * path: PostgreSQL parses and plans it once per connection instead of on every call (the
 * settlement's statements spent about as long being planned as being run). `name` must be
 * unique per statement text. In the manager's transaction it runs on the transaction's
 * connection; outside one, on a connection of the pool (node-postgres prepares it there on
 * first use), autocommitted, without a TypeORM query runner around it.
 */
export async function preparedRows<T>(manager: EntityManager, name: string, text: string, values: unknown[]): Promise<T[]> {
  const runner = manager.queryRunner;
  const pool = (manager.connection.driver as unknown as { master?: { connect(): Promise<PooledClient> } }).master;
  // A transaction whose runner TypeORM released (its connection failed), or a data source
  // already destroyed: the statement fails as any other would then (TypeORM's own errors,
  // which count as the database being unavailable), and never runs outside its transaction.
  if (runner?.isReleased || (!runner && !pool)) return queryRows<T>(manager, text, values);
  if (runner) {
    // connect() answers the connection the runner already holds (a transaction's).
    const client = (await runner.connect()) as PreparingClient;
    return (await client.query<T>({ name, text, values })).rows;
  }
  // Not pool.query(), which closes the connection on any error the statement fails with (a
  // unique violation, a deadlock), and with it every statement prepared on it. Only a
  // connection that failed is closed here. Keeping the others is safe because no client-side
  // query_timeout is set: a statement given up on by the client would still run on it.
  const client = await pool!.connect();
  // A connection out of the pool has no listener for its errors (the pool's is back only
  // once it is released): PostgreSQL ending it between statements (a restart: 57P01), or
  // after it failed and is being closed, would be an 'error' nobody hears, an uncaught
  // exception that stops the process. The query, if one runs, fails with the error anyway.
  client.on('error', ignoreConnectionError);
  try {
    const { rows } = await client.query<T>({ name, text, values });
    client.removeListener('error', ignoreConnectionError);
    client.release();
    return rows;
  } catch (error) {
    const failed = isDatabaseUnavailable(error);
    // A connection closed for its failure keeps the listener: it may report more on its way out.
    if (!failed) client.removeListener('error', ignoreConnectionError);
    client.release(failed ? (error as Error) : undefined);
    throw error;
  }
}

function ignoreConnectionError(): void {}
