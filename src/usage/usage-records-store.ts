import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import type { UsageRecordDto } from './dto/usage.dto';
import { type NerfingApplication, UsageRecord, type UsageSource, type UsageStatus } from './entities/usage-record.entity';

/*
 * Listing a workspace's usage records newest first, in keyset pages: the statement, the
 * cursor's check and the row's shape, shared by /v1/usage/recent (UsageStatsService) and the
 * dashboard's usage explorer (UsageExplorerService), so the API and the dashboard cannot
 * come to list different records for the same filter. (UsageService writes the records.)
 */

/** Which records to list; every filter optional. `from` included, `until` excluded. */
export interface UsageRecordFilter {
  model?: string;
  apiKeyId?: string;
  assistantId?: string;
  userId?: string;
  status?: UsageStatus;
  from?: Date;
  until?: Date;
}

/** The costs as text: exact decimal strings of millicents, whatever the driver makes of numerics. */
const RECORD_COLUMNS = `id, request_id, api_key_id, api_key_name, assistant_id, model, provider, deployment, attempts, input_tokens, output_tokens, total_tokens,
  llm_cost_millicents::text AS llm_cost_millicents, tool_cost_millicents::text AS tool_cost_millicents,
  total_cost_millicents::text AS total_cost_millicents, latency_ms, status, error_code,
  user_id, subscription_id, tools_used, source, nerfing, created_at`;

/** A row of `recordsSql`. */
export interface RecordRow {
  id: string;
  request_id: string;
  api_key_id: string | null;
  api_key_name: string | null;
  assistant_id: string | null;
  model: string;
  provider: string | null;
  deployment: string | null;
  attempts: number;
  /** bigint columns: strings from pg. */
  input_tokens: string;
  output_tokens: string;
  total_tokens: string;
  /** Exact decimal strings (numeric(20,6)). */
  llm_cost_millicents: string;
  tool_cost_millicents: string;
  total_cost_millicents: string;
  latency_ms: number;
  status: UsageStatus;
  error_code: string | null;
  user_id: string | null;
  subscription_id: string | null;
  tools_used: string[];
  source: UsageSource;
  nerfing: NerfingApplication[];
  created_at: Date;
}

/**
 * The newest `limit` records of the filter after an optional cursor (a record id of this
 * workspace). Every filter is a prefix of an index of usage_records ending in created_at, and
 * the cursor is a keyset position, so a page costs the same at the first record and the
 * millionth: the days (partitions) are read newest first until the page is full, each in its
 * index's order, and only the ties of one instant are sorted by id.
 */
export function recordsSql(
  workspaceId: string,
  filter: UsageRecordFilter,
  limit: number,
  startingAfter?: string,
): { sql: string; parameters: unknown[] } {
  const parameters: unknown[] = [workspaceId];
  const add = (value: unknown) => `$${parameters.push(value)}`;
  const where = ['workspace_id = $1'];
  if (startingAfter) {
    // The cursor's position is read in SQL: created_at has microseconds, a JS Date only milliseconds.
    where.push(`(created_at, id) < (SELECT c.created_at, c.id FROM usage_records c WHERE c.id = ${add(startingAfter)} AND c.workspace_id = $1)`);
  }
  if (filter.model !== undefined) where.push(`model = ${add(filter.model)}`);
  if (filter.apiKeyId !== undefined) where.push(`api_key_id = ${add(filter.apiKeyId)}`);
  if (filter.assistantId !== undefined) where.push(`assistant_id = ${add(filter.assistantId)}`);
  if (filter.userId !== undefined) where.push(`user_id = ${add(filter.userId)}`);
  if (filter.status !== undefined) where.push(`status = ${add(filter.status)}`);
  if (filter.from) where.push(`created_at >= ${add(filter.from)}`);
  if (filter.until) where.push(`created_at < ${add(filter.until)}`);
  return {
    sql: `SELECT ${RECORD_COLUMNS} FROM usage_records WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${add(limit)}`,
    parameters,
  };
}

/** The reads of a workspace's usage records, one page at a time. */
@Injectable()
export class UsageRecordsStore {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** Whether `recordId` names a usage record of the workspace (a page cursor must; each caller words its own 400). */
  async isRecordOf(workspaceId: string, recordId: string): Promise<boolean> {
    const rows = (await this.records.manager.query('SELECT 1 FROM usage_records WHERE id = $1 AND workspace_id = $2', [recordId, workspaceId])) as unknown[];
    return rows.length > 0;
  }

  /** See `recordsSql`. */
  list(workspaceId: string, filter: UsageRecordFilter, limit: number, startingAfter?: string): Promise<RecordRow[]> {
    const { sql, parameters } = recordsSql(workspaceId, filter, limit, startingAfter);
    return this.records.manager.query(sql, parameters);
  }
}

/** A row as /v1/usage/recent answers it: numbers for counts and costs, the time as ISO 8601. */
export function toRecordDto(row: RecordRow): UsageRecordDto {
  return {
    id: row.id,
    request_id: row.request_id,
    api_key_id: row.api_key_id,
    api_key_name: row.api_key_name,
    assistant_id: row.assistant_id,
    model: row.model,
    provider: row.provider,
    deployment: row.deployment,
    attempts: row.attempts,
    input_tokens: Number(row.input_tokens),
    output_tokens: Number(row.output_tokens),
    total_tokens: Number(row.total_tokens),
    llm_cost_millicents: Number(row.llm_cost_millicents),
    tool_cost_millicents: Number(row.tool_cost_millicents),
    total_cost_millicents: Number(row.total_cost_millicents),
    latency_ms: row.latency_ms,
    status: row.status,
    error_code: row.error_code,
    user_id: row.user_id,
    subscription_id: row.subscription_id,
    tools_used: row.tools_used,
    source: row.source,
    nerfing: row.nerfing,
    created_at: row.created_at.toISOString(),
  };
}
