import { CanActivate } from '@nestjs/common';
import { EXCEPTION_FILTERS_METADATA, GUARDS_METADATA, INTERCEPTORS_METADATA, PIPES_METADATA } from '@nestjs/common/constants';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import type { Response } from 'express';
import type { IncomingMessage } from 'node:http';
import { isObservable, lastValueFrom } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import type { DirectRoute } from '../common/http/direct-route';
import type { ApiRequest } from '../common/http/request-context';
import { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatController } from './chat.controller';

/**
 * `POST /v1/chat/completions` as a direct route (common/http/direct-route.ts): the API's
 * guards (the API key, then the workspace's rate limit), then ChatController.create, then
 * its answer (200, as `@HttpCode` says, without Express's ETag); an ApiError goes through the
 * controller's ChatRefusalFilter, as in Nest. Of Nest's pipeline this route uses only the
 * global guards and the idempotency interceptor: a request with an `Idempotency-Key` is left
 * to Nest. The controller stays the route's one implementation and its documentation
 * (Swagger); should it gain a guard, an interceptor, a pipe or another filter of its own, the
 * service refuses to start rather than skip it here.
 */
export function chatCompletionsRoute(controller: ChatController, guards: CanActivate[], refusals: ChatRefusalFilter): DirectRoute {
  assertNothingElseApplies();
  return {
    method: 'POST',
    path: '/v1/chat/completions',
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

/** Nest metadata on the controller or its handler that this route would not apply. */
function assertNothingElseApplies(): void {
  const on = [ChatController, ChatController.prototype.create];
  const unexpected = [GUARDS_METADATA, INTERCEPTORS_METADATA, PIPES_METADATA].filter((key) =>
    on.some((target) => ((Reflect.getMetadata(key, target) as unknown[] | undefined) ?? []).length > 0),
  );
  const filters = on.flatMap((target) => (Reflect.getMetadata(EXCEPTION_FILTERS_METADATA, target) as unknown[] | undefined) ?? []);
  if (filters.length !== 1 || filters[0] !== ChatRefusalFilter) unexpected.push(EXCEPTION_FILTERS_METADATA);
  if (unexpected.length > 0) {
    throw new Error(`ChatController has ${unexpected.join(', ')} that the direct route of chat completions does not apply (src/chat/chat-direct-route.ts)`);
  }
}

/** What Express's `res.json` sends with status 200, without its ETag (a hash of every answer, which nobody revalidates a POST with). */
function sendJson(res: Response, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = 200;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}
