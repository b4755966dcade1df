import { ArgumentsHost, Catch, ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { ChatService } from './chat.service';

/**
 * Chat requests refused by a guard after authentication (the rate limit) never reach the chat
 * service, yet every authenticated request gets a usage record: this writes it, then answers
 * as the global filter does. A 429 of the chat service itself (a nerfing rule's block) has
 * its record already.
 */
@Catch(ApiError)
export class ChatRefusalFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly chat: ChatService) {}

  catch(error: ApiError, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (error.type === 'rate_limit_exceeded' && req.principal && !this.chat.isRecorded(error)) {
      // Only API requests pass the rate-limit guard; the playground counts its own.
      void this.chat.recordRefusedBeforeValidation({ principal: req.principal, requestId: req.id, source: 'api' }, req.body, 0, error);
    }
    this.errors.respond(error, req, http.getResponse<Response>());
  }
}
