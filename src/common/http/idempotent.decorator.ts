import { applyDecorators, SetMetadata } from '@nestjs/common';
import { ApiHeader } from '@nestjs/swagger';
import type { ApiRequest } from './request-context';

export const IDEMPOTENT = 'acs:idempotent';

export interface IdempotentOptions {
  /**
   * Kept apart from other routes' keys: a key used here and on another route is a different
   * request (409). The chat route has none: its fingerprints predate scopes, and claims of
   * requests in flight across an upgrade must still match.
   */
  scope?: string;
  /** Which requests of the route take part (default: all); others ignore the header. */
  when?: (req: ApiRequest) => boolean;
  /** The Swagger description of the header. */
  description?: string;
}

/**
 * The route honours an `Idempotency-Key` header: a retry with the same key and body within
 * 24 hours gets the stored answer (with `Idempotent-Replayed: true`) instead of running
 * again. Only metadata: the global IdempotencyInterceptor (src/idempotency) acts on it.
 */
export const Idempotent = (options: IdempotentOptions = {}): MethodDecorator =>
  applyDecorators(
    SetMetadata(IDEMPOTENT, options),
    ApiHeader({
      name: 'Idempotency-Key',
      required: false,
      example: '8e03978e-40d5-43e8-bc93-6894a57f9324',
      description:
        options.description ??
        'A retry with the same key and body within 24 hours returns the stored response (with ' +
          '`Idempotent-Replayed: true`) instead of running again. The same key with another body: 409.',
    }),
  );
