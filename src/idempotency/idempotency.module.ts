import { Module } from '@nestjs/common';
import { IdempotencyInterceptor } from './idempotency.interceptor';
import { IdempotencyService } from './idempotency.service';
import { IdempotencyStore } from './idempotency-store';

/**
 * `Idempotency-Key` for the routes marked `@Idempotent()` (common/http): the app module
 * registers the interceptor globally, so a module with such a route imports nothing.
 */
@Module({
  providers: [IdempotencyService, IdempotencyStore, IdempotencyInterceptor],
  exports: [IdempotencyInterceptor],
})
export class IdempotencyModule {}
