import { ExecutionContext, Logger } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { AppConfig } from '../config/app-config';
import { ApiError } from '../common/errors/api-error';
import { FixedWindowMemoryStorage } from './fixed-window.storage';
import { RateLimitService } from './rate-limit.service';
import { workspaceThrottling, WorkspaceThrottlerGuard } from './workspace-throttler.guard';

class Routes {
  first(): void {}
  second(): void {}
}

describe('WorkspaceThrottlerGuard', () => {
  let storage: FixedWindowMemoryStorage;
  let guard: WorkspaceThrottlerGuard;

  beforeEach(async () => {
    jest.useFakeTimers({ now: new Date('2026-11-22T10:00:00Z') });
    storage = new FixedWindowMemoryStorage();
    const rateLimits = new RateLimitService(storage, { anonymousRateLimitRpm: 3 } as AppConfig);
    guard = new WorkspaceThrottlerGuard({ ...workspaceThrottling, storage }, storage, new Reflector(), rateLimits);
    await guard.onModuleInit();
  });
  afterEach(() => {
    storage.onApplicationShutdown();
    jest.useRealTimers();
  });

  function request(route: keyof Routes, principal?: { workspaceId: string; rateLimitRpm: number }) {
    const headers: Record<string, string> = {};
    const res = { setHeader: (name: string, value: string) => (headers[name] = value) };
    const context = {
      getType: () => 'http',
      getClass: () => Routes,
      getHandler: () => Routes.prototype[route],
      switchToHttp: () => ({ getRequest: () => ({ principal, headers: {} }), getResponse: () => res }),
    } as unknown as ExecutionContext;
    return { run: () => guard.canActivate(context), headers };
  }

  it("counts every route against one window of the workspace, at the workspace's rate, with the headers", async () => {
    const workspace = { workspaceId: 'ws_1', rateLimitRpm: 2 };
    const first = request('first', workspace);
    expect(await first.run()).toBe(true);
    expect(first.headers).toEqual({
      'X-RateLimit-Limit': '2',
      'X-RateLimit-Remaining': '1',
      'X-RateLimit-Reset': String(Math.floor(Date.now() / 1000) + 60),
    });
    expect(await request('second', workspace).run()).toBe(true);
    expect(await request('first', { workspaceId: 'ws_2', rateLimitRpm: 2 }).run()).toBe(true);

    const refused = request('second', workspace);
    const error = await refused.run().catch((e: unknown) => e);
    expect(error).toBeInstanceOf(ApiError);
    expect(error).toMatchObject({ type: 'rate_limit_exceeded', retryAfterSeconds: 60 });
    // Written before the refusal, so the 429 carries them.
    expect(refused.headers).toMatchObject({ 'X-RateLimit-Limit': '2', 'X-RateLimit-Remaining': '0' });
  });

  it('does not count an unlimited workspace, and skips requests without a principal', async () => {
    const unlimited = request('first', { workspaceId: 'ws_3', rateLimitRpm: -1 });
    expect(await unlimited.run()).toBe(true);
    expect(unlimited.headers).toMatchObject({ 'X-RateLimit-Limit': '-1', 'X-RateLimit-Remaining': '-1' });
    expect(await storage.peek('ws:ws_3')).toBeNull();

    const anonymous = request('first');
    expect(await anonymous.run()).toBe(true);
    expect(anonymous.headers).toEqual({});
  });

  it('lets requests through, with full headers, while the storage cannot be reached', async () => {
    jest.spyOn(storage, 'increment').mockRejectedValue(new Error('connection refused'));
    const warn = jest.spyOn(Logger.prototype, 'warn').mockImplementation(() => undefined);
    const workspace = { workspaceId: 'ws_4', rateLimitRpm: 1 };
    for (let i = 0; i < 3; i++) {
      const attempt = request('first', workspace);
      expect(await attempt.run()).toBe(true);
      expect(attempt.headers).toMatchObject({ 'X-RateLimit-Limit': '1', 'X-RateLimit-Remaining': '1' });
    }
    expect(warn).toHaveBeenCalledTimes(1);
    warn.mockRestore();
  });
});
