import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource, EntityManager } from 'typeorm';
import { UsageRecord } from './entities/usage-record.entity';

export type NewUsageRecord = Omit<UsageRecord, 'id' | 'createdAt'>;

/** Usage records: written with each settlement, read by the statistics endpoints. */
@Injectable()
export class UsageService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** A request that failed before any money was held: there is no settlement to join. */
  async insert(record: NewUsageRecord): Promise<void> {
    await this.record(this.dataSource.manager, record);
  }

  /** Inside the settlement's transaction, so a charge never stands without its record. */
  async record(manager: EntityManager, record: NewUsageRecord): Promise<void> {
    await manager.insert(UsageRecord, record);
  }
}

/** The token, cost and tool fields of the usage record of a request refused before it cost anything. */
export const NOTHING_USED = {
  inputTokens: 0,
  outputTokens: 0,
  totalTokens: 0,
  cachedTokens: 0,
  llmCostMillicents: 0,
  toolCostMillicents: 0,
  totalCostMillicents: 0,
  chargedMillicents: 0,
  toolsUsed: [] as string[],
  iterations: 0,
} as const;
