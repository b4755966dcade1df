import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { preparedRows } from '../common/database/prepared-rows';
import { UsageRecord } from './entities/usage-record.entity';

export type NewUsageRecord = Omit<UsageRecord, 'id' | 'createdAt'>;

/** Usage records: written with each settlement, read by the statistics endpoints. */
@Injectable()
export class UsageService {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /**
   * The record of a request that failed before any money was held: there is no settlement
   * to join (a settlement inserts its record itself, see `row`). Sent as one JSON parameter
   * and unpacked by PostgreSQL, in the entity's columns, so a column added to it is written too.
   */
  async insert(record: NewUsageRecord): Promise<void> {
    const names = this.insertColumns()
      .map(({ column }) => column)
      .join(', ');
    await preparedRows(
      this.records.manager,
      'usage-record-insert',
      `INSERT INTO usage_records (${names}) SELECT ${names} FROM json_populate_record(NULL::usage_records, $1::json)`,
      [JSON.stringify(this.row(record))],
    );
  }

  /**
   * A record as a usage_records row, keyed by column: what `insert` writes, and what a
   * settlement inserts beside its charge (SettlementOrder.usageRow). A property left out is null.
   */
  row(record: Partial<NewUsageRecord>): Record<string, unknown> {
    return Object.fromEntries(this.insertColumns().map(({ property, column }) => [column, record[property] ?? null]));
  }

  private columns?: { property: keyof NewUsageRecord; column: string }[];

  /** Every column of a usage record but those the database fills (id, created_at). */
  private insertColumns(): { property: keyof NewUsageRecord; column: string }[] {
    this.columns ??= this.records.metadata.columns
      .filter((column) => !column.isGenerated && !column.isCreateDate)
      .map((column) => ({ property: column.propertyName as keyof NewUsageRecord, column: column.databaseName }));
    return this.columns;
  }
}

/** The token, cost, tool and upstream fields of the usage record of a request refused before it cost anything. */
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
  provider: null,
  deployment: null,
  attempts: 0,
} as const;
