import { ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import {
  InjectThrottlerOptions,
  InjectThrottlerStorage,
  ThrottlerGuard,
  ThrottlerModuleOptions,
  ThrottlerOptions,
  ThrottlerRequest,
  ThrottlerStorage,
} from '@nestjs/throttler';
import type { Response } from 'express';
import type { ApiRequest } from '../common/http/request-context';
import { RATE_WINDOW_MS, RateLimitService } from './rate-limit.service';
import { tracing } from '../telemetry/tracing';

/** The one throttler: requests per minute of a workspace. */
export const WORKSPACE_THROTTLER = 'rpm';

function callerOf(context: ExecutionContext): ApiRequest['principal'] {
  return context.switchToHttp().getRequest<ApiRequest>().principal;
}

/**
 * What the throttler resolves per request, given to ThrottlerModule: the limit is the
 * caller's workspace rate (its tier's, or its own where the tier allows one), the tracker
 * is the workspace, and the key is the tracker alone, so that every route counts against
 * one window per workspace (the stock key is per route). Requests without a principal are
 * skipped: public routes, and requests the ApiKeyGuard refused, which it counts against
 * their address itself.
 */
export const workspaceThrottling = {
  throttlers: [
    {
      name: WORKSPACE_THROTTLER,
      ttl: RATE_WINDOW_MS,
      limit: (context: ExecutionContext) => callerOf(context)!.rateLimitRpm,
    },
  ] satisfies ThrottlerOptions[],
  skipIf: (context: ExecutionContext) => !callerOf(context),
  getTracker: (req: Record<string, unknown>) => `ws:${(req as unknown as ApiRequest).principal!.workspaceId}`,
  generateKey: (_context: ExecutionContext, tracker: string) => tracker,
};

/**
 * `@nestjs/throttler`'s guard, run after the ApiKeyGuard, with the API's own way of
 * counting and answering: a rate of -1 is not counted, a storage that cannot be reached lets
 * the request through (a Redis outage must not take the API down), and the `X-RateLimit-*`
 * headers (the reset as Unix time) are set before the 429 is thrown, so they are on every
 * /v1 answer, refusals included, and in place before the first byte of a stream. The 429 is
 * the API's `rate_limit_exceeded` error with `Retry-After`. The resolution (limit, window,
 * tracker, key, `@SkipThrottle()`, `@Throttle()`) is the stock guard's.
 */
@Injectable()
export class WorkspaceThrottlerGuard extends ThrottlerGuard {
  constructor(
    @InjectThrottlerOptions() options: ThrottlerModuleOptions,
    @InjectThrottlerStorage() storage: ThrottlerStorage,
    reflector: Reflector,
    private readonly rateLimits: RateLimitService,
  ) {
    super(options, storage, reflector);
  }

  protected override handleRequest(request: ThrottlerRequest): Promise<boolean> {
    return tracing.admission('rate_limit', () => this.enforceRates(request));
  }

  /** The workspace's rate, then the key's own. */
  private async enforceRates({ context, limit, ttl, throttler, getTracker, generateKey }: ThrottlerRequest): Promise<boolean> {
    const { req, res } = this.getRequestResponse(context);
    const key = generateKey(context, await getTracker(req, context), throttler.name!);
    await this.rateLimits.enforce(key, limit, ttl, res as unknown as Response);
    // A key's own rate, within its workspace's: its headers are then the key's, the tighter of the two.
    const caller = (req as unknown as ApiRequest).principal;
    const keyRpm = caller?.keyLimits?.rateLimitRpm;
    if (caller && keyRpm) await this.rateLimits.enforce(`key:${caller.apiKeyId}`, keyRpm, ttl, res as unknown as Response);
    return true;
  }
}
