import { ArgumentsHost, Catch, ExceptionFilter, Logger } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { NOTHING_USED, UsageService } from '../usage/usage.service';

/**
 * Chat requests refused by a guard after authentication (the rate limit) never reach the chat
 * service, yet every authenticated request gets a usage record: this writes it, then answers
 * as the global filter does.
 */
@Catch(ApiError)
export class ChatRefusalFilter implements ExceptionFilter {
  private readonly logger = new Logger('Chat');
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly usage: UsageService) {}

  catch(error: ApiError, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (error.type === 'rate_limit_exceeded' && req.principal) {
      const body = (req.body ?? {}) as { model?: unknown; user_id?: unknown; subscription_id?: unknown; stream?: unknown };
      const text = (value: unknown) => (typeof value === 'string' ? value.slice(0, 256) : null);
      void this.usage
        .insert({
          workspaceId: req.principal.workspaceId,
          requestId: req.id,
          apiKeyId: req.principal.apiKeyId,
          assistantId: null,
          model: text(body.model) ?? 'unknown',
          ...NOTHING_USED,
          toolsUsed: [],
          latencyMs: 0,
          status: 'error',
          errorCode: error.code,
          userId: text(body.user_id),
          subscriptionId: text(body.subscription_id),
          stream: body.stream === true,
        })
        .catch((recordError) => this.logger.error(`Could not record a rate-limited request: ${String(recordError)}`));
    }
    this.errors.respond(error, req, http.getResponse<Response>());
  }
}
