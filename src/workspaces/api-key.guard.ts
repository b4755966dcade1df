import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Response } from 'express';
import { IS_PUBLIC } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import { RateLimitService } from '../limits/rate-limit.service';
import { ApiKeysService } from './api-keys.service';

/**
 * Global: every route needs a valid `Authorization: Bearer sk-...` unless marked
 * `@Public()`. A request without a valid key is still counted against its client address
 * (so key guessing is rate limited too) before it is refused.
 */
@Injectable()
export class ApiKeyGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly apiKeys: ApiKeysService,
    private readonly rateLimits: RateLimitService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    if (this.reflector.getAllAndOverride<boolean>(IS_PUBLIC, [context.getHandler(), context.getClass()])) return true;
    const http = context.switchToHttp();
    const req = http.getRequest<ApiRequest>();

    const header = req.headers.authorization;
    const match = header ? /^Bearer\s+(\S+)\s*$/i.exec(header) : null;
    const principal = match ? await this.apiKeys.authenticate(match[1]) : null;
    if (principal) {
      req.principal = principal;
      return true;
    }

    await this.rateLimits.limitClientAddress(req, http.getResponse<Response>());
    throw ApiError.unauthenticated(
      !header
        ? 'You did not provide an API key. Send it in the Authorization header: "Authorization: Bearer sk-...".'
        : !match
          ? 'The Authorization header must have the form "Bearer sk-...".'
          : 'Incorrect API key provided, or the key has been revoked.',
      header ? 'invalid_api_key' : 'missing_api_key',
    );
  }
}
