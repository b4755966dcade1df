import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { UsageRecord } from './entities/usage-record.entity';

export type NewUsageRecord = Omit<UsageRecord, 'id' | 'createdAt'>;

/** Usage records: written with each settlement, read by the statistics endpoints. */
@Injectable()
export class UsageService {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** A request that failed before any money was held: there is no settlement to join. */
  async insert(record: NewUsageRecord): Promise<void> {
    await this.record(this.records.manager, record);
  }

  /** Inside the settlement's transaction, so a charge never stands without its record. */
  async record(manager: EntityManager, record: NewUsageRecord): Promise<void> {
    await manager.insert(UsageRecord, record);
  }

  /** The records of a batch of settlements, in one statement of the batch's transaction. */
  async recordMany(manager: EntityManager, records: NewUsageRecord[]): Promise<void> {
    await manager.insert(UsageRecord, records);
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
