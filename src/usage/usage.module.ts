import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { UsageRecord } from './entities/usage-record.entity';
import { UsageController } from './usage.controller';
import { UsageExplorerService } from './usage-explorer.service';
import { UsageRetention } from './usage-retention';
import { UsageStatsService } from './usage-stats.service';
import { UsageService } from './usage.service';

/** The usage records (their table and its daily totals), written with each settlement and read by the statistics endpoints. */
@Module({
  imports: [TypeOrmModule.forFeature([UsageRecord])],
  controllers: [UsageController],
  providers: [UsageService, UsageStatsService, UsageRetention, UsageExplorerService],
  exports: [UsageService, UsageStatsService, UsageExplorerService],
})
export class UsageModule {}
