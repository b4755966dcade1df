import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { PendingSettlementsModule } from '../common/settlements/pending-settlements';
import { UsageRecord } from './entities/usage-record.entity';
import { UsageController } from './usage.controller';
import { UsageExplorerService } from './usage-explorer.service';
import { UsagePartitions } from './usage-partitions';
import { UsagePartitionsStore } from './usage-partitions-store';
import { UsageRecordsStore } from './usage-records-store';
import { UsageRetention } from './usage-retention';
import { UsageStatsStore } from './usage-stats-store';
import { UsageStatsService } from './usage-stats.service';
import { UsageService } from './usage.service';

/** The usage records (their table and its daily totals), written with each settlement and read by the statistics endpoints. */
@Module({
  // The statistics wait for the settlements this process answered for.
  imports: [TypeOrmModule.forFeature([UsageRecord]), PendingSettlementsModule],
  controllers: [UsageController],
  providers: [UsageService, UsageStatsService, UsagePartitions, UsageRetention, UsageExplorerService, UsageStatsStore, UsageRecordsStore, UsagePartitionsStore],
  exports: [UsageService, UsageStatsService, UsageExplorerService, UsagePartitions, UsageRetention],
})
export class UsageModule {}
