import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { preparedRows } from '../common/database/prepared-rows';
import { UsageRecord } from './entities/usage-record.entity';

export type NewUsageRecord = Omit<UsageRecord, 'id' | 'createdAt'>;

/** Usage records: written with each settlement, read by the statistics endpoints. */
@Injectable()
export class UsageService {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** A request that failed before any money was held: there is no settlement to join. */
  async insert(record: NewUsageRecord): Promise<void> {
    await this.recordMany(this.records.manager, [record]);
  }

  /**
   * The records of a batch of settlements, in one statement of the batch's transaction (so a
   * charge never stands without its record): sent as one JSON parameter and unpacked by
   * PostgreSQL (json_populate_recordset), since building a many-row INSERT through the query
   * builder cost more CPU than the rest of the settlement. The columns are the entity's, so a
   * column added to it is written too.
   */
  async recordMany(manager: EntityManager, records: NewUsageRecord[]): Promise<void> {
    if (records.length === 0) return;
    const columns = this.insertColumns();
    const rows = records.map((record) => Object.fromEntries(columns.map(({ property, column }) => [column, record[property] ?? null])));
    const names = columns.map(({ column }) => column).join(', ');
    await preparedRows(manager, 'usage-records-insert', `INSERT INTO usage_records (${names}) SELECT ${names} FROM json_populate_recordset(NULL::usage_records, $1::json)`, [
      JSON.stringify(rows),
    ]);
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
