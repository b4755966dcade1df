import type { EntityManager } from 'typeorm';

/**
 * Rows of a raw statement. TypeORM's Postgres driver answers SELECT and INSERT with the
 * rows, but UPDATE and DELETE with `[rows, rowCount]`; callers only want the rows.
 */
export async function queryRows<T>(manager: EntityManager, sql: string, parameters: unknown[]): Promise<T[]> {
  const result: unknown = await manager.query(sql, parameters);
  if (Array.isArray(result) && result.length === 2 && Array.isArray(result[0]) && typeof result[1] === 'number') {
    return result[0] as T[];
  }
  return result as T[];
}
