import { OnApplicationShutdown } from '@nestjs/common';
import type { ThrottlerStorage } from '@nestjs/throttler';
import type { ThrottlerStorageRecord } from '@nestjs/throttler/dist/throttler-storage-record.interface';

interface Window {
  hits: number;
  expiresAt: number;
}

export interface WindowState {
  totalHits: number;
  /** Seconds until the window closes. */
  timeToExpire: number;
}

/** Both storages can read a window without counting a hit (ThrottlerStorage cannot). */
export interface PeekableStorage {
  /** The open window of a key, or null when none is open. */
  peek(key: string): Promise<WindowState | null>;
}

/**
 * In-process counters with the same fixed-window semantics as the Redis storage's script:
 * the window opens at its first hit and every hit counts. `@nestjs/throttler`'s own memory
 * storage keeps one timestamp per hit and scans them on every request, which costs O(rpm)
 * per request on a high custom rate; this costs O(1).
 */
export class FixedWindowMemoryStorage implements ThrottlerStorage, PeekableStorage, OnApplicationShutdown {
  private readonly windows = new Map<string, Window>();
  private readonly sweeper = setInterval(() => this.sweep(), 60_000).unref();

  async increment(key: string, ttl: number, limit: number): Promise<ThrottlerStorageRecord> {
    const now = Date.now();
    let window = this.windows.get(key);
    if (!window || window.expiresAt <= now) {
      window = { hits: 0, expiresAt: now + ttl };
      this.windows.set(key, window);
    }
    window.hits += 1;
    const timeToExpire = Math.ceil((window.expiresAt - now) / 1000);
    const isBlocked = window.hits > limit;
    return { totalHits: window.hits, timeToExpire, isBlocked, timeToBlockExpire: isBlocked ? timeToExpire : 0 };
  }

  async peek(key: string): Promise<WindowState | null> {
    const now = Date.now();
    const window = this.windows.get(key);
    if (!window || window.expiresAt <= now) return null;
    return { totalHits: window.hits, timeToExpire: Math.ceil((window.expiresAt - now) / 1000) };
  }

  onApplicationShutdown(): void {
    clearInterval(this.sweeper);
  }

  private sweep(now = Date.now()): void {
    for (const [key, window] of this.windows) if (window.expiresAt <= now) this.windows.delete(key);
  }
}
