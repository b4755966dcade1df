import { ArgumentsHost, Catch, ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { Billing } from './billing/billing';

/**
 * Chat requests refused by a guard after authentication (the rate limit) never reach the chat
 * service, yet every authenticated request gets a usage record: this writes it, then answers
 * as the global filter does. A 429 of the chat service itself (a nerfing rule's block) has
 * its record already.
 */
@Catch(ApiError)
export class ChatRefusalFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly billing: Billing) {}

  catch(error: ApiError, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (error.type === 'rate_limit_exceeded' && req.principal && !this.billing.isRecorded(error)) {
      // The body was not validated: only what it says of the request is kept, cut to size.
      const body = (req.body ?? {}) as { model?: unknown; user_id?: unknown; subscription_id?: unknown; stream?: unknown };
      const text = (value: unknown) => (typeof value === 'string' ? value.slice(0, 256) : null);
      const subject = {
        workspaceId: req.principal.workspaceId,
        requestId: req.id,
        apiKeyId: req.principal.apiKeyId,
        assistantId: null,
        model: text(body.model) ?? 'unknown',
        userId: text(body.user_id),
        subscriptionId: text(body.subscription_id),
        stream: body.stream === true,
        // Only API requests pass the rate-limit guard; the playground counts its own.
        source: 'api' as const,
      };
      void this.billing.recordRefused(subject, 0, error);
    }
    this.errors.respond(error, req, http.getResponse<Response>());
  }
}
