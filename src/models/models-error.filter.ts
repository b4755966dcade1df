import { ArgumentsHost, Catch, ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { answerErrorInAnthropicShape, wantsAnthropicShape } from '../common/errors/anthropic-errors';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';

/**
 * The errors of `GET /v1/models` (the guards' refusals included) in Anthropic's shape for a
 * request that carries `anthropic-version`, as Anthropic's SDKs and Claude Code do; in the
 * API's usual shape otherwise.
 */
@Catch()
export class ModelsErrorFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  catch(exception: unknown, host: ArgumentsHost): void {
    const req = host.switchToHttp().getRequest<ApiRequest>();
    const res = host.switchToHttp().getResponse<Response>();
    if (wantsAnthropicShape(req)) answerErrorInAnthropicShape(req, res);
    this.errors.respond(exception, req, res);
  }
}
