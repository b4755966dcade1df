import { Logger, OnApplicationShutdown } from '@nestjs/common';
import type { ThrottlerStorage } from '@nestjs/throttler';
import type { ThrottlerStorageRecord } from '@nestjs/throttler/dist/throttler-storage-record.interface';
import Redis from 'ioredis';
import type { PeekableStorage, WindowState } from './fixed-window.storage';

/**
 * One fixed window per key: the first hit opens it with a TTL, every hit counts, and the
 * key expiring is the only way a window ends (no separate block key that could reset it).
 */
const HIT_SCRIPT = `
local hits = redis.call('INCR', KEYS[1])
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then
  redis.call('PEXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return { hits, ttl }`;

/** A window's hits and milliseconds left, without counting a hit; nil when no window is open. */
const PEEK_SCRIPT = `
local hits = redis.call('GET', KEYS[1])
if not hits then return nil end
return { tonumber(hits), redis.call('PTTL', KEYS[1]) }`;

type WithHit = Redis & {
  fixedWindowHit(key: string, ttlMs: number): Promise<[number, number]>;
  fixedWindowPeek(key: string): Promise<[number, number] | null>;
};

/** The Redis twin of FixedWindowMemoryStorage: same semantics, shared by every replica. */
export class FixedWindowRedisStorage implements ThrottlerStorage, PeekableStorage, OnApplicationShutdown {
  private readonly logger = new Logger('RateLimitStorage');
  private lastErrorLog = 0;
  readonly redis: WithHit;

  constructor(url: string) {
    this.redis = new Redis(url, {
      // While disconnected a command fails at once (and the request goes through unlimited)
      // instead of waiting in the offline queue for up to two reconnect attempts (~4 s).
      enableOfflineQueue: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 2_000,
      // A Redis that accepts connections but does not answer costs a request at most this.
      commandTimeout: 500,
      disconnectTimeout: 200,
    }) as WithHit;
    this.redis.defineCommand('fixedWindowHit', { numberOfKeys: 1, lua: HIT_SCRIPT });
    this.redis.defineCommand('fixedWindowPeek', { numberOfKeys: 1, lua: PEEK_SCRIPT });
    // Without a listener ioredis prints every reconnect failure to stderr itself.
    this.redis.on('error', (error: Error) => {
      if (Date.now() - this.lastErrorLog < 10_000) return;
      this.lastErrorLog = Date.now();
      this.logger.warn(`Redis: ${error.message}`);
    });
  }

  async increment(key: string, ttl: number, limit: number): Promise<ThrottlerStorageRecord> {
    const [totalHits, ttlMs] = await this.redis.fixedWindowHit(`{${key}}:hits`, ttl);
    const timeToExpire = Math.ceil(ttlMs / 1000);
    const isBlocked = totalHits > limit;
    return { totalHits, timeToExpire, isBlocked, timeToBlockExpire: isBlocked ? timeToExpire : 0 };
  }

  async peek(key: string): Promise<WindowState | null> {
    const window = await this.redis.fixedWindowPeek(`{${key}}:hits`);
    if (!window || window[1] < 0) return null;
    return { totalHits: window[0], timeToExpire: Math.ceil(window[1] / 1000) };
  }

  onApplicationShutdown(): void {
    this.redis.disconnect();
  }
}
