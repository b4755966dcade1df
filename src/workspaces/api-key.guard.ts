import { CanActivate, ExecutionContext, Injectable } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import type { Response } from 'express';
import { IS_PUBLIC } from '../common/auth/auth.decorators';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest } from '../common/http/request-context';
import { RateLimitService } from '../limits/rate-limit.service';
import { ApiKeysService } from './api-keys.service';
import { workspaceSuspended } from './workspace-status';
import { addressAllowed } from './key-limits';
import { tracing } from '../telemetry/tracing';

/**
 * Global: every route needs a valid `Authorization: Bearer sk-...` (or `x-api-key: sk-...`,
 * as Anthropic's SDKs send it) unless marked `@Public()`. A request without a valid key is counted against its client address, so key
 * guessing is rate limited too. A valid key is refused with 403 when its workspace is
 * suspended (`workspace_suspended`) or the client address is outside the key's allowed
 * ranges (`ip_not_allowed`).
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
    return tracing.admission('api_key', () => this.admit(context));
  }

  /** The key's workspace, its allowed addresses, and the address's limit on guesses. */
  private async admit(context: ExecutionContext): Promise<boolean> {
    const http = context.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    const res = http.getResponse<Response>();

    const header = req.headers.authorization;
    // Anthropic's SDKs send the key as `x-api-key`; `Authorization` wins when both are sent.
    const xApiKey = req.headers['x-api-key'];
    const apiKey = header ? /^Bearer\s+(\S+)\s*$/i.exec(header)?.[1] : typeof xApiKey === 'string' ? /^\s*(\S+)\s*$/.exec(xApiKey)?.[1] : undefined;
    // A key this process has found valid before is no guess: it is limited per workspace
    // only (WorkspaceThrottlerGuard), never refused for its address. Anything else from an address
    // already at its limit is refused before the lookup, so a flood of wrong keys costs no
    // database queries once limited.
    if (!apiKey || !this.apiKeys.seenValid(apiKey)) await this.rateLimits.refuseLimitedClientAddress(req, res);
    const principal = apiKey ? await this.apiKeys.authenticate(apiKey) : null;
    // A valid key of a suspended workspace: refused with a reason, not counted as a guess.
    if (principal?.suspended) throw workspaceSuspended();
    if (principal) {
      if (principal.allowedFrom && !addressAllowed(principal.allowedFrom, req.ip)) {
        throw ApiError.permissionDenied(
          `This API key may not be used from your address (${req.ip ?? 'unknown'}): its allowed IP ranges do not include it.`,
          'ip_not_allowed',
        );
      }
      req.principal = principal;
      // Memory only; written in batches (ApiKeysService.flushLastUsed).
      this.apiKeys.recordUse(principal.apiKeyId);
      return true;
    }

    // Only requests without a valid key count against their address.
    await this.rateLimits.limitClientAddress(req, res);
    throw ApiError.unauthenticated(
      !header && xApiKey === undefined
        ? 'You did not provide an API key. Send it in the Authorization header: "Authorization: Bearer sk-...".'
        : !apiKey && header
          ? 'The Authorization header must have the form "Bearer sk-...".'
          : 'Incorrect API key provided, or the key has been revoked or has expired.',
      header || xApiKey !== undefined ? 'invalid_api_key' : 'missing_api_key',
    );
  }
}
