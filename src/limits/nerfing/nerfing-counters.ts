import { OnApplicationShutdown } from '@nestjs/common';
import type Redis from 'ioredis';

/** One counter: a user's requests, tokens and cost in one window, kept until `ttlMs` after it opened. */
export interface CounterKey {
  key: string;
  /** How long the counter must live: until its window ends (plus a margin). */
  ttlMs: number;
}

/** What one user has used in one window. */
export interface WindowUsage {
  requests: number;
  tokens: number;
  /** Exact cost of the settled requests, in millionths of a millicent. */
  costMicros: bigint;
}

/**
 * The counters of nerfing rules, beside the rate-limit storage and of the same kind: in
 * memory for one process, in Redis (the rate limits' connection) when several replicas must
 * share them. A request costs one round trip when it arrives (`arrive`) and one, not
 * awaited by the request, when it settles (`add`); never a database query.
 */
export interface NerfingCounters {
  /** Counts one request in each counter, and returns each counter's usage with this request counted. */
  arrive(keys: CounterKey[]): Promise<WindowUsage[]>;
  /** Adds a settled request's tokens and cost to each counter. */
  add(keys: CounterKey[], tokens: number, costMicros: bigint): Promise<void>;
}

export const NERFING_COUNTERS = Symbol('NERFING_COUNTERS');

interface Counter {
  requests: number;
  tokens: number;
  costMicros: bigint;
  expiresAt: number;
}

/** In-process counters for a single replica. */
export class MemoryNerfingCounters implements NerfingCounters, OnApplicationShutdown {
  private readonly counters = new Map<string, Counter>();
  private readonly sweeper = setInterval(() => this.sweep(), 60_000).unref();

  async arrive(keys: CounterKey[]): Promise<WindowUsage[]> {
    return keys.map(({ key, ttlMs }) => {
      const counter = this.open(key, ttlMs);
      counter.requests += 1;
      return { requests: counter.requests, tokens: counter.tokens, costMicros: counter.costMicros };
    });
  }

  async add(keys: CounterKey[], tokens: number, costMicros: bigint): Promise<void> {
    for (const { key, ttlMs } of keys) {
      const counter = this.open(key, ttlMs);
      counter.tokens += tokens;
      counter.costMicros += costMicros;
    }
  }

  onApplicationShutdown(): void {
    clearInterval(this.sweeper);
  }

  private open(key: string, ttlMs: number): Counter {
    const now = Date.now();
    let counter = this.counters.get(key);
    if (!counter || counter.expiresAt <= now) {
      counter = { requests: 0, tokens: 0, costMicros: 0n, expiresAt: now + ttlMs };
      this.counters.set(key, counter);
    }
    return counter;
  }

  private sweep(now = Date.now()): void {
    for (const [key, counter] of this.counters) if (counter.expiresAt <= now) this.counters.delete(key);
  }
}

/**
 * Each counter is a hash (`r` requests, `t` tokens, `c` cost in micro-millicents) that
 * expires after its window. All counters of one request share a hash tag (the workspace and
 * user), so one script touches them all, also on a Redis Cluster.
 */
const ARRIVE_SCRIPT = `
local out = {}
for i, key in ipairs(KEYS) do
  local requests = redis.call('HINCRBY', key, 'r', 1)
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, ARGV[i]) end
  local used = redis.call('HMGET', key, 't', 'c')
  out[#out + 1] = requests
  out[#out + 1] = used[1] or '0'
  out[#out + 1] = used[2] or '0'
end
return out`;

const ADD_SCRIPT = `
for i, key in ipairs(KEYS) do
  redis.call('HINCRBY', key, 't', ARGV[1])
  redis.call('HINCRBY', key, 'c', ARGV[2])
  if redis.call('PTTL', key) < 0 then redis.call('PEXPIRE', key, ARGV[i + 2]) end
end
return 1`;

type WithNerfing = Redis & {
  nerfingArrive(count: number, ...args: (string | number)[]): Promise<(number | string)[]>;
  nerfingAdd(count: number, ...args: (string | number)[]): Promise<number>;
};

/** Counters shared by every replica, on the rate-limit storage's Redis connection. */
export class RedisNerfingCounters implements NerfingCounters {
  private readonly redis: WithNerfing;

  constructor(redis: Redis) {
    this.redis = redis as WithNerfing;
    // numberOfKeys varies per call: given as the first argument.
    this.redis.defineCommand('nerfingArrive', { lua: ARRIVE_SCRIPT });
    this.redis.defineCommand('nerfingAdd', { lua: ADD_SCRIPT });
  }

  async arrive(keys: CounterKey[]): Promise<WindowUsage[]> {
    const reply = await this.redis.nerfingArrive(keys.length, ...keys.map((k) => k.key), ...keys.map((k) => k.ttlMs));
    return keys.map((_, i) => ({
      requests: Number(reply[3 * i]),
      tokens: Number(reply[3 * i + 1]),
      costMicros: BigInt(reply[3 * i + 2]),
    }));
  }

  async add(keys: CounterKey[], tokens: number, costMicros: bigint): Promise<void> {
    await this.redis.nerfingAdd(keys.length, ...keys.map((k) => k.key), tokens, costMicros.toString(), ...keys.map((k) => k.ttlMs));
  }
}
