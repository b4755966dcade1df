import { Module } from '@nestjs/common';
import { ThrottlerModule } from '@nestjs/throttler';
import type { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.module';
import { FixedWindowRedisStorage } from './fixed-window-redis.storage';
import { FixedWindowMemoryStorage } from './fixed-window.storage';
import { LimitsController } from './limits.controller';
import { RateLimitService } from './rate-limit.service';
import { workspaceThrottling, WorkspaceThrottlerGuard } from './workspace-throttler.guard';

@Module({
  imports: [
    ThrottlerModule.forRootAsync({
      inject: [APP_CONFIG],
      useFactory: (config: AppConfig) => ({
        ...workspaceThrottling,
        storage: config.redisUrl
          ? // While Redis is unreachable a command fails at once and the request goes through unlimited (see RateLimitService).
            new FixedWindowRedisStorage(config.redisUrl)
          : new FixedWindowMemoryStorage(),
      }),
    }),
  ],
  controllers: [LimitsController],
  providers: [RateLimitService, WorkspaceThrottlerGuard],
  exports: [RateLimitService, WorkspaceThrottlerGuard],
})
export class LimitsModule {}
