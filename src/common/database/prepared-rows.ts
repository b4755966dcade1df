import type { EntityManager } from 'typeorm';
import { queryRows } from './query-rows';

interface PreparingClient {
  query<T>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: T[] }>;
}

/**
 * Rows of a statement run as a named prepared statement on the manager's connection, for
 * the statements of the hot path: PostgreSQL parses and plans it once per connection
 * instead of on every call (the settlement's CTE statements spent about as long being
 * planned as being run). `name` must be unique per statement text. Outside a transaction
 * (no query runner of its own) it runs as a plain statement.
 */
export async function preparedRows<T>(manager: EntityManager, name: string, text: string, values: unknown[]): Promise<T[]> {
  const runner = manager.queryRunner;
  if (!runner || runner.isReleased) return queryRows<T>(manager, text, values);
  // connect() answers the connection the runner already holds (a transaction's).
  const client = (await runner.connect()) as PreparingClient;
  return (await client.query<T>({ name, text, values })).rows;
}
