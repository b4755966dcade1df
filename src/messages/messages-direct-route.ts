import type { CanActivate } from '@nestjs/common';
import { apiDirectRoute } from '../chat/chat-direct-route';
import type { DirectRoute } from '../common/http/direct-route';
import { MessagesController } from './messages.controller';
import { MessagesErrorFilter } from './messages-error.filter';

/**
 * `POST /v1/messages` as a direct route, as chat completions are (src/chat/chat-direct-route.ts):
 * through Express's router and Nest's pipeline a message cost a third more CPU than the same
 * chat completion (bench/README.md, chat.ts). Every error goes to MessagesErrorFilter, which
 * answers in Anthropic's shape, as Nest's `@Catch()` does.
 */
export function messagesRoute(controller: MessagesController, guards: CanActivate[], errors: MessagesErrorFilter): DirectRoute {
  return apiDirectRoute(
    {
      path: '/v1/messages',
      controller: MessagesController,
      method: 'create',
      run: (req, res) => controller.create(req.principal!, req.body, req, res),
      refusals: errors,
      refusalsType: MessagesErrorFilter,
      catchesAll: true,
      source: 'src/messages/messages-direct-route.ts',
    },
    guards,
  );
}
