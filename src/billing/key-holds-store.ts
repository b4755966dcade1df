import type { EntityManager } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import type { SpendPeriod } from '../common/http/request-context';

/** One admission against a key's limit, as reserve_key_budget() takes it. */
export interface KeyHoldRequest {
  apiKeyId: string;
  holdId: string;
  amount: number;
  limitMillicents: number;
  period: SpendPeriod;
  ttlMs: number;
}

/**
 * The statements of `api_key_holds`: what a limited key's requests in flight hold. Admission
 * is one statement (reserve_key_budget(), src/billing/sql), which serializes the key's
 * admissions; when a hold is raised or goes is KeyBudgets'.
 */
export class KeyHoldsStore {
  constructor(private readonly manager: () => EntityManager) {}

  /** What the key had left before this amount; the hold is written only when that covers it. */
  async reserve(request: KeyHoldRequest): Promise<number> {
    const [row] = await queryRows<{ remaining: string }>(
      this.manager(),
      `SELECT reserve_key_budget($1, $2, $3, $4, $5, $6) AS remaining`,
      [request.apiKeyId, request.holdId, request.amount, request.limitMillicents, request.period, request.ttlMs],
    );
    return Number(row.remaining);
  }

  async keepAlive(holdId: string, ttlMs: number): Promise<void> {
    await this.manager().query(`UPDATE api_key_holds SET expires_at = now() + make_interval(secs => $2::double precision / 1000) WHERE id = $1`, [
      holdId,
      ttlMs,
    ]);
  }

  async release(holdId: string): Promise<void> {
    await this.manager().query(`DELETE FROM api_key_holds WHERE id = $1`, [holdId]);
  }

  /** The sum of the key's live holds. */
  async held(apiKeyId: string): Promise<number> {
    const [row] = await queryRows<{ held: string }>(
      this.manager(),
      `SELECT coalesce(sum(amount_millicents), 0) AS held FROM api_key_holds WHERE api_key_id = $1 AND expires_at >= now()`,
      [apiKeyId],
    );
    return Number(row.held);
  }
}
