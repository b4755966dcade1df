import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import type { Response } from 'express';
import type { ApiRequest } from '../common/http/request-context';
import { RateLimitService } from './rate-limit.service';

/**
 * Runs after the ApiKeyGuard: counts the request against its workspace and sets the
 * `X-RateLimit-*` headers before the handler runs, so they are in place before the
 * first byte of a stream. Public routes have no principal and are not counted.
 */
@Injectable()
export class RateLimitGuard implements CanActivate {
  constructor(private readonly rateLimits: RateLimitService) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const http = context.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (req.principal) await this.rateLimits.limitWorkspace(req.principal, http.getResponse<Response>());
    return true;
  }
}
