import { Module } from '@nestjs/common';
import { ThrottlerModule } from '@nestjs/throttler';
import type { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.module';
import { FixedWindowRedisStorage } from './fixed-window-redis.storage';
import { FixedWindowMemoryStorage } from './fixed-window.storage';
import { LimitsController } from './limits.controller';
import { RATE_WINDOW_MS, RateLimitService } from './rate-limit.service';
import { RateLimitGuard } from './rate-limit.guard';

@Module({
  imports: [
    ThrottlerModule.forRootAsync({
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => ({
        // Limits are per tier and resolved per request by RateLimitService; this entry only names the window.
        throttlers: [{ name: 'rpm', ttl: RATE_WINDOW_MS, limit: 1 }],
        storage: config.redisUrl
          ? // While Redis is unreachable a command fails at once and the request goes through unlimited (see RateLimitService).
            new FixedWindowRedisStorage(config.redisUrl)
          : new FixedWindowMemoryStorage(),
      }),
    }),
  ],
  controllers: [LimitsController],
  providers: [RateLimitService, RateLimitGuard],
  exports: [RateLimitService, RateLimitGuard],
})
export class LimitsModule {}
