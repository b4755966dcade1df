import { ArgumentsHost, Catch, ExceptionFilter } from '@nestjs/common';
import type { Response } from 'express';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { ApiRequest } from '../common/http/request-context';
import { EmbeddingsService } from './embeddings.service';

/** As ChatRefusalFilter: an embeddings request the rate limit refused gets its usage record too, then the usual answer. */
@Catch(ApiError)
export class EmbeddingsRefusalFilter implements ExceptionFilter {
  private readonly errors = new ApiExceptionFilter();

  constructor(private readonly embeddings: EmbeddingsService) {}

  catch(error: ApiError, host: ArgumentsHost): void {
    const http = host.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    if (error.type === 'rate_limit_exceeded' && req.principal && !this.embeddings.isRecorded(error)) {
      void this.embeddings.recordRefused({ principal: req.principal, requestId: req.id }, req.body, error);
    }
    this.errors.respond(error, req, http.getResponse<Response>());
  }
}
