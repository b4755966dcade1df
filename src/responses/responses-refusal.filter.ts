import { ArgumentsHost, Catch, ExceptionFilter, Injectable } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { ResponsesService } from './responses.service';

/**
 * Responses requests refused by the rate limit never reach the service, yet every
 * authenticated request gets a usage record (as ChatRefusalFilter does for chat
 * completions): this writes it, then answers as the global filter does. A 429 of the service
 * itself (a nerfing rule's block, through the chat core) has its record already.
 */
@Catch(ApiError)
@Injectable()
export class ResponsesRefusalFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly responses: ResponsesService) {}

  catch(error: ApiError, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (error.type === 'rate_limit_exceeded' && req.principal && req.method === 'POST' && !this.responses.isRecorded(error)) {
      void this.responses.recordRefused({ principal: req.principal, requestId: req.id }, req.body, 0, error);
    }
    this.errors.respond(error, req, http.getResponse<Response>());
  }
}
