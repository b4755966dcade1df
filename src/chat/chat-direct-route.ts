import { CanActivate } from '@nestjs/common';
import { ExecutionContextHost } from '@nestjs/core/helpers/execution-context-host';
import type { Response } from 'express';
import type { IncomingMessage } from 'node:http';
import { ApiError } from '../common/errors/api-error';
import { clientAbortSignal } from '../common/http/client-abort-signal.decorator';
import type { DirectRoute } from '../common/http/direct-route';
import type { ApiRequest } from '../common/http/request-context';
import { ChatRefusalFilter } from './chat-refusal.filter';
import { ChatController } from './chat.controller';

/**
 * `POST /v1/chat/completions` as a direct route (common/http/direct-route.ts): the API's
 * guards (the API key, then the workspace's rate limit), then ChatController.create, then
 * its answer; an ApiError goes through the controller's ChatRefusalFilter, as in Nest. What
 * Nest would add is nothing for this route, but the idempotency interceptor: a request with
 * an `Idempotency-Key` is left to Nest. The controller stays the route's one implementation
 * and its documentation (Swagger).
 */
export function chatCompletionsRoute(controller: ChatController, guards: CanActivate[], refusals: ChatRefusalFilter): DirectRoute {
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
          // The API's guards refuse by throwing; a plain false is Nest's 403.
          if (!(await guard.canActivate(context))) throw new ApiError('permission_denied', 'Forbidden resource');
        }
        const answer = await controller.create(req.principal!, req.body, req, res, clientAbortSignal(res));
        // A stream has answered already.
        if (answer !== undefined) sendJson(res, 200, answer);
      } catch (error) {
        if (!(error instanceof ApiError)) throw error;
        refusals.catch(error, context);
      }
    },
  };
}

/**
 * What Express's `res.json` sends, without its ETag (a hash of every answer, which nobody
 * revalidates a POST with).
 */
function sendJson(res: Response, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.statusCode = status;
  res.setHeader('Content-Type', 'application/json; charset=utf-8');
  res.setHeader('Content-Length', Buffer.byteLength(text));
  res.end(text);
}
