import { Logger } from '@nestjs/common';
import Redis from 'ioredis';

/** What replicas share of a deployment's health: when its cooldown ends, and whether it is on probation. */
export interface SharedHealth {
  /** Epoch ms; 0 when not cooling down. */
  cooldownUntil: number;
  /** It came out of a cooldown and has not answered since: one more failure sends it back. */
  probation: boolean;
}

/**
 * The state of routing that every replica must see alike: failures counted in a window,
 * cooldowns, and the deployments' own rpm/tpm budgets. In process without Redis (one
 * replica); in Redis (REDIS_URL) with several, on the rate limits' semantics (fixed windows).
 */
export interface RoutingState {
  /** Counts a failure of the deployment in a window of `windowMs`; returns the count in the window. */
  failure(id: string, windowMs: number): Promise<number>;
  /** Puts the deployment in cooldown for `ms` (a longer cooldown in force is kept), then on probation. */
  coolDown(id: string, ms: number): Promise<void>;
  /** It answered: off probation, failures forgotten. */
  recovered(id: string): Promise<void>;
  health(ids: readonly string[]): Promise<Map<string, SharedHealth>>;
  /**
   * Takes `amount` from a budget of `limit` per `windowMs` under `key`; false, taking nothing,
   * when it would go over. Used for a deployment's rpm (1 per attempt) and tpm (its tokens).
   */
  take(key: string, amount: number, limit: number, windowMs: number): Promise<boolean>;
  /** What has been taken in the open window of `key` (0 when none is open). */
  taken(key: string): Promise<number>;
  close(): void;
}

/** A probation lasts until the deployment answers, or this long without traffic. */
const PROBATION_MS = 10 * 60_000;

export class MemoryRoutingState implements RoutingState {
  private readonly windows = new Map<string, { count: number; endsAt: number }>();
  private readonly health_ = new Map<string, SharedHealth & { probationUntil: number }>();

  async failure(id: string, windowMs: number): Promise<number> {
    return this.add(`fail:${id}`, 1, windowMs);
  }

  async coolDown(id: string, ms: number): Promise<void> {
    const now = Date.now();
    const current = this.health_.get(id);
    const until = Math.max(current?.cooldownUntil ?? 0, now + ms);
    this.health_.set(id, { cooldownUntil: until, probation: true, probationUntil: until + PROBATION_MS });
    this.windows.delete(`fail:${id}`);
  }

  async recovered(id: string): Promise<void> {
    this.health_.delete(id);
    this.windows.delete(`fail:${id}`);
  }

  async health(ids: readonly string[]): Promise<Map<string, SharedHealth>> {
    const now = Date.now();
    const result = new Map<string, SharedHealth>();
    for (const id of ids) {
      const h = this.health_.get(id);
      if (!h || h.probationUntil <= now) continue;
      result.set(id, { cooldownUntil: h.cooldownUntil > now ? h.cooldownUntil : 0, probation: h.probation });
    }
    return result;
  }

  async take(key: string, amount: number, limit: number, windowMs: number): Promise<boolean> {
    const now = Date.now();
    const window = this.windows.get(key);
    const used = window && window.endsAt > now ? window.count : 0;
    if (used + amount > limit) return false;
    this.add(key, amount, windowMs);
    return true;
  }

  async taken(key: string): Promise<number> {
    const window = this.windows.get(key);
    return window && window.endsAt > Date.now() ? window.count : 0;
  }

  close(): void {}

  private add(key: string, amount: number, windowMs: number): number {
    const now = Date.now();
    let window = this.windows.get(key);
    if (!window || window.endsAt <= now) {
      window = { count: 0, endsAt: now + windowMs };
      this.windows.set(key, window);
    }
    window.count += amount;
    return window.count;
  }
}

/** Adds to a fixed window (opened with its TTL at the first add); with a limit, adds only when it stays within. */
const TAKE_SCRIPT = `
local used = tonumber(redis.call('GET', KEYS[1]) or '0')
local amount = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
if limit >= 0 and used + amount > limit then return -1 end
local total = redis.call('INCRBY', KEYS[1], amount)
if redis.call('PTTL', KEYS[1]) < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[3]) end
return total`;

/** Keeps the longer of two cooldowns; probation outlives the cooldown. */
const COOL_SCRIPT = `
local until_ms = tonumber(ARGV[1])
local current = tonumber(redis.call('GET', KEYS[1]) or '0')
if current > until_ms then until_ms = current end
local now = tonumber(ARGV[2])
redis.call('SET', KEYS[1], until_ms, 'PX', until_ms - now + tonumber(ARGV[3]))
redis.call('DEL', KEYS[2])
return until_ms`;

type WithScripts = Redis & {
  routingTake(key: string, amount: number, limit: number, windowMs: number): Promise<number>;
  routingCool(coolKey: string, failKey: string, untilMs: number, nowMs: number, probationMs: number): Promise<number>;
};

/**
 * The Redis twin of MemoryRoutingState. `cool:<id>` holds the cooldown's end and lives on
 * for the probation; `fail:<id>` counts failures in a window. A Redis that cannot be reached
 * makes routing local (no failure counted, no cooldown shared, no budget refused) rather
 * than failing requests: it is logged at most every 10 s.
 */
export class RedisRoutingState implements RoutingState {
  private readonly logger = new Logger('RoutingState');
  private readonly redis: WithScripts;
  private lastErrorLog = 0;

  constructor(url: string) {
    this.redis = new Redis(url, { enableOfflineQueue: false, maxRetriesPerRequest: 1, connectTimeout: 2_000, commandTimeout: 500, disconnectTimeout: 200 }) as WithScripts;
    this.redis.defineCommand('routingTake', { numberOfKeys: 1, lua: TAKE_SCRIPT });
    this.redis.defineCommand('routingCool', { numberOfKeys: 2, lua: COOL_SCRIPT });
    this.redis.on('error', (error: Error) => this.warn(error));
  }

  async failure(id: string, windowMs: number): Promise<number> {
    return this.quietly(() => this.redis.routingTake(`route:{${id}}:fail`, 1, -1, windowMs), 0);
  }

  async coolDown(id: string, ms: number): Promise<void> {
    const now = Date.now();
    await this.quietly(() => this.redis.routingCool(`route:{${id}}:cool`, `route:{${id}}:fail`, now + ms, now, PROBATION_MS), 0);
  }

  async recovered(id: string): Promise<void> {
    await this.quietly(() => this.redis.del(`route:{${id}}:cool`, `route:{${id}}:fail`), 0);
  }

  async health(ids: readonly string[]): Promise<Map<string, SharedHealth>> {
    const result = new Map<string, SharedHealth>();
    if (ids.length === 0) return result;
    const values = await this.quietly(() => this.redis.mget(ids.map((id) => `route:{${id}}:cool`)), [] as (string | null)[]);
    const now = Date.now();
    ids.forEach((id, index) => {
      const until = Number(values[index] ?? 0);
      if (until > 0) result.set(id, { cooldownUntil: until > now ? until : 0, probation: true });
    });
    return result;
  }

  async take(key: string, amount: number, limit: number, windowMs: number): Promise<boolean> {
    return (await this.quietly(() => this.redis.routingTake(`route:{${key}}:budget`, amount, limit, windowMs), 0)) >= 0;
  }

  async taken(key: string): Promise<number> {
    return Number((await this.quietly(() => this.redis.get(`route:{${key}}:budget`), null)) ?? 0);
  }

  close(): void {
    this.redis.disconnect();
  }

  private async quietly<T>(command: () => Promise<T>, fallback: T): Promise<T> {
    try {
      return await command();
    } catch (error) {
      this.warn(error as Error);
      return fallback;
    }
  }

  private warn(error: Error): void {
    if (Date.now() - this.lastErrorLog < 10_000) return;
    this.lastErrorLog = Date.now();
    this.logger.warn(`Redis: ${error.message}; routing goes on with this replica's own view`);
  }
}
