import { Module } from '@nestjs/common';
import { UsageController } from './usage.controller';
import { UsageRetention } from './usage-retention';
import { UsageStatsService } from './usage-stats.service';
import { UsageService } from './usage.service';

@Module({
  controllers: [UsageController],
  providers: [UsageService, UsageStatsService, UsageRetention],
  exports: [UsageService, UsageStatsService],
})
export class UsageModule {}
