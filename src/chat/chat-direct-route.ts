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

/** What an API route served directly needs: Nest's route it stands in for, and how it answers. */
export interface ApiRouteSpec<C> {
  path: string;
  controller: Type<C>;
  method: keyof C & string;
  /** Runs the handler: its JSON answer, or undefined when it answered itself (a stream). */
  run(req: ApiRequest, res: Response): Promise<unknown>;
  /** The route's own exception filter (an instance of `refusalsType`), which Nest runs on an ApiError (all errors, with `catchesAll`). */
  refusals: { catch(error: unknown, host: ExecutionContextHost): void };
  refusalsType: KnownEnhancer['type'];
  /** The filter is `@Catch()` with no type: every error goes to it, as in Nest. */
  catchesAll?: boolean;
  /** Where the route is written, for the start's refusal. */
  source: string;
}

/**
 * A JSON API route as a direct route (common/http/direct-route.ts): the API's guards (the API
 * key, then the workspace's rate limit), then the controller's handler, then its answer (200,
 * as `@HttpCode` says, without Express's ETag); an error goes through the controller's
 * filter, as in Nest. Of Nest's pipeline it runs what `runs` lists (apiRouteEnhancers): a
 * request with an `Idempotency-Key` is left to Nest. The controller stays the route's one
 * implementation and its documentation (Swagger); should Nest's route gain a guard, an
 * interceptor, a pipe or a filter, global or its own, that the list does not name, the
 * service refuses to start rather than skip it here.
 */
export function apiDirectRoute<C>(spec: ApiRouteSpec<C>, guards: CanActivate[]): DirectRoute {
  const handler = spec.controller.prototype[spec.method] as (...args: unknown[]) => unknown;
  return {
    method: 'POST',
    path: spec.path,
    handler: { controller: spec.controller, method: spec.method },
    runs: apiRouteEnhancers(spec.controller, spec.method, guards, spec.refusalsType),
    source: spec.source,
    accepts: (req: IncomingMessage) => req.headers['idempotency-key'] === undefined,
    async handle(req: ApiRequest, res: Response): Promise<void> {
      // What guards and filters are given in Nest (the handler for their reflector metadata).
      const context = new ExecutionContextHost([req, res], spec.controller, handler);
      context.setType('http');
      try {
        for (const guard of guards) {
          const verdict = guard.canActivate(context);
          const allowed = isObservable(verdict) ? await lastValueFrom(verdict) : await verdict;
          // The API's guards refuse by throwing; a plain false is Nest's 403.
          if (!allowed) throw new ApiError('permission_denied', 'Forbidden resource');
        }
        const answer = await spec.run(req, res);
        // A stream has answered already.
        if (answer !== undefined) sendJson(res, answer);
      } catch (error) {
        if (!(error instanceof ApiError) && !spec.catchesAll) throw error;
        spec.refusals.catch(error, context);
      }
    },
  };
}

/** `POST /v1/chat/completions` as a direct route. */
export function chatCompletionsRoute(controller: ChatController, guards: CanActivate[], refusals: ChatRefusalFilter): DirectRoute {
  return apiDirectRoute(
    {
      path: '/v1/chat/completions',
      controller: ChatController,
      method: 'create',
      run: (req, res) => controller.create(req.principal!, req.body, req, res),
      refusals,
      refusalsType: ChatRefusalFilter,
      source: 'src/chat/chat-direct-route.ts',
    },
    guards,
  );
}

/**
 * The one list of what Nest runs around an API route's handler that its direct route runs
 * too, or knowingly does without, and why. serveDirectRoutes compares it with the enhancers
 * Nest's route has at start; any other refuses the start.
 */
export function apiRouteEnhancers(controller: Type<unknown>, method: string, guards: readonly CanActivate[], refusals: KnownEnhancer['type']): KnownEnhancer[] {
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
    { kind: 'filter', type: refusals, why: "an error of a guard or of the handler goes to the route's own filter, as in Nest" },
    // Only while the handler takes no class: a DTO parameter would need the pipe's validation here.
    ...(takesNoClass(controller, method)
      ? [
          {
            kind: 'pipe' as const,
            type: ValidationPipe,
            why: 'validates and transforms class-typed parameters only, and the handler has none (its service validates the body): it would pass every argument through',
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
