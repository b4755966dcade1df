import { randomUUID } from 'node:crypto';
import type { SpendPeriod } from '../common/http/request-context';
import type { KeyHoldsStore } from './key-holds-store';

/** An API key's spending limit, as a request's estimate carries it. */
export interface KeyBudget {
  apiKeyId: string;
  limitMillicents: number;
  period: SpendPeriod;
}

/** What a request holds against its key's limit: a row of api_key_holds. */
export interface KeyHold {
  id: string;
  budget: KeyBudget;
  amountMillicents: number;
}

/**
 * Spending limits of API keys, on the same money path as the wallet: a limited key's request
 * holds its estimate against the key (reserve_key_budget(), one statement that serializes the
 * key's admissions, so concurrent requests never take its spend past the limit), before the
 * wallet's hold. What the key spent in its period is api_key_spend, which the usage records'
 * insert adds to in the statement that charges them; the key's hold goes once that committed
 * (until then both count: a key is never over, at worst refused a moment early). A hold lives
 * HOLD_TTL_MS past its last heartbeat, so a process that died frees its key's budget.
 */
export class KeyBudgets {
  constructor(private readonly store: KeyHoldsStore) {}

  /** Holds `amount` against the key; null with what the key had left when its limit cannot cover it. */
  async reserve(budget: KeyBudget, amount: number, ttlMs: number): Promise<{ hold: KeyHold | null; remainingMillicents: number }> {
    const hold: KeyHold = { id: randomUUID(), budget, amountMillicents: amount };
    const remaining = await this.admit(hold, amount, ttlMs);
    return { hold: remaining >= amount ? hold : null, remainingMillicents: Math.max(remaining, 0) };
  }

  /** Raises a hold by `extra` (the next iteration of a tool loop); false when the key's limit cannot cover it. */
  async extend(hold: KeyHold, extra: number, ttlMs: number): Promise<boolean> {
    if (extra <= 0) return true;
    if ((await this.admit(hold, extra, ttlMs)) < extra) return false;
    hold.amountMillicents += extra;
    return true;
  }

  async keepAlive(hold: KeyHold, ttlMs: number): Promise<void> {
    await this.store.keepAlive(hold.id, ttlMs);
  }

  /** The request ended (its charge committed, or nothing was charged): its hold goes. */
  async release(hold: KeyHold): Promise<void> {
    await this.store.release(hold.id);
  }

  /** What the key's requests in flight hold now: the part of its limit that comes back as they settle. */
  held(budget: KeyBudget): Promise<number> {
    return this.store.held(budget.apiKeyId);
  }

  /** What the key has left, before this amount (held only when that covers it). */
  private admit(hold: KeyHold, amount: number, ttlMs: number): Promise<number> {
    const { apiKeyId, limitMillicents, period } = hold.budget;
    return this.store.reserve({ apiKeyId, holdId: hold.id, amount, limitMillicents, period, ttlMs });
  }
}
