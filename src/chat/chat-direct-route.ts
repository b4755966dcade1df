import { CanActivate, type Type, ValidationPipe } from '@nestjs/common';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import type { Response } from 'express';
import type { IncomingMessage } from 'node:http';
import { isObservable, lastValueFrom } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import { ApiExceptionFilter } from '../common/errors/api-exception.filter';
import type { DirectRoute, KnownEnhancer } from '../common/http/direct-route';
import type { ApiRequest } from '../common/http/request-context';
import { IdempotencyInterceptor } from '../idempotency/idempotency.interceptor';
import { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatController } from './chat.controller';

/**
 * `POST /v1/chat/completions` as a direct route (common/http/direct-route.ts): the API's
 * guards (the API key, then the workspace's rate limit), then ChatController.create, then
 * its answer (200, as `@HttpCode` says, without Express's ETag); an ApiError goes through the
 * controller's ChatRefusalFilter, as in Nest. Of Nest's pipeline it runs what `runs` lists
 * (chatCompletionsEnhancers): a request with an `Idempotency-Key` is left to Nest. The
 * controller stays the route's one implementation and its documentation (Swagger); should
 * Nest's route gain a guard, an interceptor, a pipe or a filter, global or its own, that the
 * list does not name, the service refuses to start rather than skip it here.
 */
export function chatCompletionsRoute(controller: ChatController, guards: CanActivate[], refusals: ChatRefusalFilter): DirectRoute {
  return {
    method: 'POST',
    path: '/v1/chat/completions',
    handler: { controller: ChatController, method: 'create' },
    runs: chatCompletionsEnhancers(guards),
    source: 'src/chat/chat-direct-route.ts',
    accepts: (req: IncomingMessage) => req.headers['idempotency-key'] === undefined,
    async handle(req: ApiRequest, res: Response): Promise<void> {
      // What guards and filters are given in Nest (the handler for their reflector metadata).
      const context = new ExecutionContextHost([req, res], ChatController, ChatController.prototype.create);
      context.setType('http');
      try {
        for (const guard of guards) {
          const verdict = guard.canActivate(context);
          const allowed = isObservable(verdict) ? await lastValueFrom(verdict) : await verdict;
          // The API's guards refuse by throwing; a plain false is Nest's 403.
          if (!allowed) throw new ApiError('permission_denied', 'Forbidden resource');
        }
        const answer = await controller.create(req.principal!, req.body, req, res);
        // A stream has answered already.
        if (answer !== undefined) sendJson(res, answer);
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        refusals.catch(error, context);
      }
    },
  };
}

/**
 * The one list of what Nest runs around ChatController.create that this route runs too, or
 * knowingly does without, and why. serveDirectRoutes compares it with the enhancers Nest's
 * route has at start; any other refuses the start.
 */
export function chatCompletionsEnhancers(guards: readonly CanActivate[]): KnownEnhancer[] {
  return [
    ...guards.map((guard) => ({
      kind: 'guard' as const,
      type: guard.constructor as KnownEnhancer['type'],
      why: 'run before the handler in the order of API_GUARDS (app.module.ts), the order Nest registers them in as APP_GUARD',
    })),
    {
      kind: 'interceptor',
      type: IdempotencyInterceptor,
      why: 'a request with an Idempotency-Key is left to Nest (accepts); without one the interceptor only calls the handler',
    },
    {
      kind: 'filter',
      type: ApiExceptionFilter,
      why: "every error this route does not answer itself goes to its respond() (the routing's onError, app.factory.ts)",
    },
    { kind: 'filter', type: ChatRefusalFilter, why: "an ApiError of a guard or of the handler goes to its catch(), as in Nest" },
    // Only while create takes no class: a DTO parameter would need the pipe's validation here.
    ...(takesNoClass(ChatController, 'create')
      ? [
          {
            kind: 'pipe' as const,
            type: ValidationPipe,
            why: 'validates and transforms class-typed parameters only, and create has none (the chat service validates the body): it would pass every argument through',
          },
        ]
      : []),
  ];
}

/** Whether every parameter of the method is typed with no class (an interface, `unknown`), so that ValidationPipe leaves it as it is. */
function takesNoClass(controller: Type<unknown>, method: string): boolean {
  const types = Reflect.getMetadata('design:paramtypes', controller.prototype as object, method) as unknown[] | undefined;
  return types !== undefined && types.every((type) => type === Object);
}

/** What Express's `res.json` sends with status 200, without its ETag (a hash of every answer, which nobody revalidates a POST with). */
function sendJson(res: Response, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = 200;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}
