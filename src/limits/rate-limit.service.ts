import { Injectable, Logger, Optional } from '@nestjs/common';
import { InjectThrottlerStorage, normalizeIp, ThrottlerStorage } from '@nestjs/throttler';
import type { Response } from 'express';
import { InjectConfig } from '../config/config.module';
import type { AppConfig } from '../config/app-config';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import { MetricsService } from '../metrics/metrics.service';
import type { PeekableStorage, WindowState } from './fixed-window.storage';
import { UNLIMITED } from './tier-policy';

/** The rate window of every tier (the spec's unit is requests per minute). */
export const RATE_WINDOW_MS = 60_000;
const THROTTLER_NAME = 'rpm';

export interface RateLimitState {
  limit: number;
  remaining: number;
  /** Unix seconds at which the window resets. */
  resetAt: number;
  /** Seconds until a blocked caller may retry; 0 when not blocked. */
  retryAfterSeconds: number;
}

/**
 * Counts requests in fixed windows in the throttler storage (in memory by default, in Redis
 * when REDIS_URL is set so that every replica counts against one limit) and answers with the
 * API's headers and 429. Used by the WorkspaceThrottlerGuard (per workspace) and by the
 * ApiKeyGuard (per client address, for requests without a valid key: that count depends on
 * the outcome of the key lookup, so it lives in that guard rather than in a throttler).
 */
@Injectable()
export class RateLimitService {
  private readonly logger = new Logger(RateLimitService.name);
  private lastStorageWarning = 0;

  constructor(
    @InjectThrottlerStorage() private readonly storage: ThrottlerStorage,
    @InjectConfig() private readonly config: AppConfig,
    /** Counts refusals (acs_rate_limit_refusals_total); optional for unit tests. */
    @Optional() private readonly metrics?: MetricsService,
  ) {}

  /** Counts a request that has no valid key against its client address. */
  async limitClientAddress(req: ApiRequest, res: Response): Promise<void> {
    await this.enforce(clientAddressTracker(req), this.config.anonymousRateLimitRpm, RATE_WINDOW_MS, res);
  }

  /**
   * Refuses (429) a request from an address that has used up its limit for requests without
   * a valid key, without counting it. The guard asks this before it looks a key up, so a flood
   * of wrong keys from one address costs no database queries once that address is limited.
   */
  async refuseLimitedClientAddress(req: ApiRequest, res: Response): Promise<void> {
    const limit = this.config.anonymousRateLimitRpm;
    const window = await this.peek(clientAddressTracker(req));
    if (!window || window.totalHits < limit) return;
    const secondsLeft = Math.max(1, window.timeToExpire);
    const resetAt = Math.floor(Date.now() / 1000) + secondsLeft;
    this.apply({ limit, remaining: 0, resetAt, retryAfterSeconds: secondsLeft }, res, 'address');
  }

  /** Counts a request against `key`; sets the `X-RateLimit-*` headers, then throws 429 once it is over `limit`. */
  async enforce(key: string, limit: number, windowMs: number, res: Response): Promise<void> {
    this.apply(await this.consume(key, limit, windowMs), res, key.startsWith('ws:') ? 'workspace' : key.startsWith('key:') ? 'key' : 'address');
  }

  /** Sets the `X-RateLimit-*` headers, and throws 429 when the caller must wait. */
  private apply(state: RateLimitState, res: Response, scope: 'workspace' | 'key' | 'address'): void {
    res.setHeader('X-RateLimit-Limit', String(state.limit));
    res.setHeader('X-RateLimit-Remaining', String(state.remaining));
    res.setHeader('X-RateLimit-Reset', String(state.resetAt));
    if (state.retryAfterSeconds > 0) {
      this.metrics?.rateLimitRefusals.inc({ scope });
      throw ApiError.rateLimited(
        `${scope === 'key' ? "This API key's rate limit" : 'Rate limit'} reached: ${state.limit} requests per minute. Try again in ${state.retryAfterSeconds} seconds.`,
        state.retryAfterSeconds,
      );
    }
  }

  async consume(tracker: string, limit: number, windowMs = RATE_WINDOW_MS): Promise<RateLimitState> {
    const nowSeconds = Math.floor(Date.now() / 1000);
    if (limit === UNLIMITED) {
      return { limit: UNLIMITED, remaining: UNLIMITED, resetAt: nowSeconds + windowMs / 1000, retryAfterSeconds: 0 };
    }
    // Both storages count fixed windows and block while hits exceed the limit; the block
    // duration argument of ThrottlerStorage is unused by them.
    let record: Awaited<ReturnType<ThrottlerStorage['increment']>>;
    try {
      record = await this.storage.increment(tracker, windowMs, limit, 1, THROTTLER_NAME);
    } catch (error) {
      // Failing open: an unreachable Redis must not take the whole API down with it.
      this.warnStorageDown(error);
      return { limit, remaining: limit, resetAt: nowSeconds + windowMs / 1000, retryAfterSeconds: 0 };
    }
    const secondsLeft = Math.max(1, record.timeToExpire);
    return {
      limit,
      remaining: Math.max(0, limit - record.totalHits),
      resetAt: nowSeconds + secondsLeft,
      retryAfterSeconds: record.totalHits > limit ? secondsLeft : 0,
    };
  }

  /**
   * Counts an attempt of something other than an API request (a dashboard sign-in, a
   * reset request) in a window of its own, shared by every replica like the API's counters.
   * Returns the seconds to wait when over the limit, else 0. Fails open like `consume`.
   */
  async countAttempt(tracker: string, limit: number, windowMs: number): Promise<number> {
    try {
      const record = await this.storage.increment(`attempt:${tracker}`, windowMs, limit, 1, THROTTLER_NAME);
      return record.totalHits > limit ? Math.max(1, record.timeToExpire) : 0;
    } catch (error) {
      this.warnStorageDown(error);
      return 0;
    }
  }

  /** The open window of a tracker, without counting a hit; null when none is open (or the storage is down). */
  private async peek(tracker: string): Promise<WindowState | null> {
    try {
      return await (this.storage as ThrottlerStorage & PeekableStorage).peek(tracker);
    } catch (error) {
      this.warnStorageDown(error);
      return null;
    }
  }

  private warnStorageDown(error: unknown): void {
    if (Date.now() - this.lastStorageWarning < 10_000) return;
    this.lastStorageWarning = Date.now();
    this.logger.warn(`Rate-limit storage unavailable, requests are not being limited: ${String(error)}`);
  }
}

export function clientAddressTracker(req: ApiRequest): string {
  return `ip:${normalizeIp(req.ip ?? 'unknown')}`;
}
