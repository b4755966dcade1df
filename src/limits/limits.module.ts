import { Module } from '@nestjs/common';
import { getStorageToken, ThrottlerModule, ThrottlerStorage } from '@nestjs/throttler';
import { TypeOrmModule } from '@nestjs/typeorm';
import type { AppConfig } from '../config/app-config';
import { APP_CONFIG } from '../config/config.module';
import { MetricsModule } from '../metrics/metrics.module';
import { ModelsModule } from '../models/models.module';
import { FixedWindowRedisStorage } from './fixed-window-redis.storage';
import { FixedWindowMemoryStorage } from './fixed-window.storage';
import { LimitsController } from './limits.controller';
import { NerfingRule } from './nerfing/entities/nerfing-rule.entity';
import { MemoryNerfingCounters, NERFING_COUNTERS, RedisNerfingCounters } from './nerfing/nerfing-counters';
import { NerfingRulesService } from './nerfing/nerfing-rules.service';
import { NerfingRulesStore } from './nerfing/nerfing-rules-store';
import { NerfingService } from './nerfing/nerfing.service';
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
    TypeOrmModule.forFeature([NerfingRule]),
    MetricsModule,
    ModelsModule,
  ],
  controllers: [LimitsController],
  providers: [
    RateLimitService,
    WorkspaceThrottlerGuard,
    NerfingRulesService,
    NerfingRulesStore,
    NerfingService,
    {
      // Nerfing counters live where the rate limits' do: on the same Redis connection when there is one.
      provide: NERFING_COUNTERS,
      inject: [getStorageToken()],
      useFactory: (storage: ThrottlerStorage) =>
        storage instanceof FixedWindowRedisStorage ? new RedisNerfingCounters(storage.redis) : new MemoryNerfingCounters(),
    },
  ],
  exports: [RateLimitService, WorkspaceThrottlerGuard, NerfingRulesService, NerfingService],
})
export class LimitsModule {}
