import { ArgumentsHost, Catch, ExceptionFilter, Injectable } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { answerErrorInAnthropicShape } from '../common/errors/anthropic-errors';
import { MessagesService } from './messages.service';

/**
 * Every error of the Messages routes, the guards' refusals (key, rate limit) included, in
 * Anthropic's shape (anthropic-errors.ts): the global filter decides the status, headers and
 * logging as for any route, and its body is rewritten. A message request the rate limit
 * refused never reached the service, yet gets its usage record, as ChatRefusalFilter does.
 */
@Catch()
@Injectable()
export class MessagesErrorFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly messages: MessagesService) {}

  catch(exception: unknown, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    const res = http.getResponse<Response>();
    const countsTokens = req.path.endsWith('/count_tokens');
    if (exception instanceof ApiError && exception.type === 'rate_limit_exceeded' && req.principal && !countsTokens && !this.messages.isRecorded(exception)) {
      void this.messages.recordRefused({ principal: req.principal, requestId: req.id }, req.body, exception);
    }
    answerErrorInAnthropicShape(req, res);
    this.errors.respond(exception, req, res);
  }
}
