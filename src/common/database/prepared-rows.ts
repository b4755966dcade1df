import type { EntityManager } from 'typeorm';
import { queryRows } from './query-rows';

interface PreparingClient {
  query<T>(config: { name: string; text: string; values: unknown[] }): Promise<{ rows: T[] }>;
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
  // A transaction whose runner TypeORM released (its connection failed): the statement fails
  // as any other of that transaction does, never runs outside it.
  if (runner?.isReleased) return queryRows<T>(manager, text, values);
  const client = runner
    ? // connect() answers the connection the runner already holds (a transaction's).
      ((await runner.connect()) as PreparingClient)
    : (manager.connection.driver as unknown as { master: PreparingClient }).master;
  return (await client.query<T>({ name, text, values })).rows;
}
