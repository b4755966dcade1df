import type { CanActivate } from '@nestjs/common';
import { apiDirectRoute } from '../chat/chat-direct-route';
import type { DirectRoute } from '../common/http/direct-route';
import { EmbeddingsRefusalFilter } from './embeddings-refusal.filter';
import { EmbeddingsController } from './embeddings.controller';

/**
 * `POST /v1/embeddings` as a direct route, as chat completions are (src/chat/chat-direct-route.ts):
 * through Express's router, Nest's pipeline and Express's ETag (a hash of every answer, and an
 * embeddings answer is kilobytes of base64), a one-text request cost the service about the CPU
 * Portkey spends on it (bench/README.md, "Embeddings"). A request with an Idempotency-Key is
 * left to Nest.
 */
export function embeddingsRoute(controller: EmbeddingsController, guards: CanActivate[], refusals: EmbeddingsRefusalFilter): DirectRoute {
  return apiDirectRoute(
    {
      path: '/v1/embeddings',
      controller: EmbeddingsController,
      method: 'create',
      run: (req, res) => controller.create(req.principal!, req.body, req, res),
      refusals,
      refusalsType: EmbeddingsRefusalFilter,
      source: 'src/embeddings/embeddings-direct-route.ts',
    },
    guards,
  );
}
