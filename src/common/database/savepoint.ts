import type { EntityManager } from 'typeorm';
import { isDatabaseUnavailable } from '../errors/database-unavailable';

let counter = 0;

/**
 * Runs `work` inside a savepoint of the manager's open transaction. If it fails, only its
 * own writes are rolled back and the error is returned, so the rest of the transaction (a
 * charge, say) can still commit. A lost connection is no refusal: the transaction is gone
 * with it, so its error is thrown (not hidden behind the rollback's own failure).
 */
export async function inSavepoint(manager: EntityManager, work: () => Promise<unknown>): Promise<unknown | null> {
  const name = `sp_${++counter}`;
  await manager.query(`SAVEPOINT ${name}`);
  try {
    await work();
    await manager.query(`RELEASE SAVEPOINT ${name}`);
    return null;
  } catch (error) {
    if (isDatabaseUnavailable(error)) throw error;
    try {
      await manager.query(`ROLLBACK TO SAVEPOINT ${name}`);
    } catch (rollbackError) {
      // The connection went during the rollback: that is what the caller must hear of.
      throw isDatabaseUnavailable(rollbackError) ? rollbackError : error;
    }
    return error ?? new Error('unknown failure');
  }
}
