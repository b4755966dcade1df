import { CallHandler, ExecutionContext, HttpStatus, Injectable, NestInterceptor, RequestMethod } from '@nestjs/common';
import { HTTP_CODE_METADATA } from '@nestjs/common/constants';
import { Reflector } from '@nestjs/core';
import type { Response } from 'express';
import { defer, lastValueFrom, map, Observable } from 'rxjs';
import { IDEMPOTENT, IdempotentOptions } from '../common/http/idempotent.decorator';
import type { ApiRequest } from '../common/http/request-context';
import { IdempotencyService } from './idempotency.service';

/**
 * Global, and idle except on routes marked `@Idempotent()` that receive an
 * `Idempotency-Key`: there the handler runs inside IdempotencyService.run (claim the key,
 * run, store the answer; or replay the stored answer with `Idempotent-Replayed: true`).
 * An interceptor because it must wrap the handler's result; it runs after the guards, so a
 * request refused for its key or its rate claims nothing.
 */
@Injectable()
export class IdempotencyInterceptor implements NestInterceptor {
  constructor(
    private readonly reflector: Reflector,
    private readonly idempotency: IdempotencyService,
  ) {}

  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const options = this.reflector.get<IdempotentOptions | undefined>(IDEMPOTENT, context.getHandler());
    if (!options || context.getType() !== 'http') return next.handle();
    const http = context.switchToHttp();
    const req = http.getRequest<ApiRequest>();
    const key = req.header('Idempotency-Key');
    if (key === undefined || !req.principal || (options.when && !options.when(req))) return next.handle();

    const claim = {
      workspaceId: req.principal.workspaceId,
      apiKeyId: req.principal.apiKeyId ?? null,
      requestId: req.id,
      key,
      body: req.body as unknown,
      scope: options.scope,
      statusCode: this.statusCodeOf(context, req),
    };
    const res = http.getResponse<Response>();
    return defer(() => this.idempotency.run(claim, () => lastValueFrom(next.handle(), { defaultValue: undefined }))).pipe(
      map(({ response, replayed }) => {
        if (replayed) res.setHeader('Idempotent-Replayed', 'true');
        return response;
      }),
    );
  }

  /** The status Nest answers the route with: its `@HttpCode()`, else 201 for POST and 200 for the rest. */
  private statusCodeOf(context: ExecutionContext, req: ApiRequest): number {
    const declared = this.reflector.get<number | undefined>(HTTP_CODE_METADATA, context.getHandler());
    if (declared !== undefined) return declared;
    return req.method === RequestMethod[RequestMethod.POST] ? HttpStatus.CREATED : HttpStatus.OK;
  }
}
