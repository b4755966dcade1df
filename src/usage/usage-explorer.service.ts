import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import type { UsageRecordDto } from './dto/usage.dto';
import { UsageRecord, type UsageStatus } from './entities/usage-record.entity';

/** Which records to list; every filter optional. `from` included, `until` excluded. */
export interface UsageRecordFilter {
  model?: string;
  assistantId?: string;
  userId?: string;
  status?: UsageStatus;
  from?: Date;
  until?: Date;
}

/** Rows per statement when every record of a filter is read (the CSV export). */
const EXPORT_BATCH = 1_000;

const COLUMNS = `id, request_id, assistant_id, model, input_tokens, output_tokens, total_tokens,
  llm_cost_millicents::text AS llm_cost, tool_cost_millicents::text AS tool_cost, total_cost_millicents::text AS total_cost,
  latency_ms, status, error_code, user_id, subscription_id, tools_used, source, created_at`;

interface RecordRow {
  id: string;
  request_id: string;
  assistant_id: string | null;
  model: string;
  input_tokens: string;
  output_tokens: string;
  total_tokens: string;
  llm_cost: string;
  tool_cost: string;
  total_cost: string;
  latency_ms: number;
  status: UsageStatus;
  error_code: string | null;
  user_id: string | null;
  subscription_id: string | null;
  tools_used: string[];
  source: string;
  created_at: Date;
}

/** A usage record as /v1/usage/recent answers it, plus its costs as exact decimal strings (for exports). */
export interface ExploredRecord extends UsageRecordDto {
  /** Who made the request: `api` (a key), `dashboard` (the playground), ... */
  source: string;
  exact: { llmCostMillicents: string; toolCostMillicents: string; totalCostMillicents: string };
}

/**
 * The dashboard's reads of usage records: /v1/usage/recent's list with a date range too.
 * Every filter is a prefix of an index of usage_records ((workspace_id, model | assistant_id
 * | user_id, created_at DESC, id DESC), the errors' partial index, or (workspace_id,
 * created_at DESC, id DESC)), and pages go by keyset, so a page costs the same at the first
 * record and the millionth.
 */
@Injectable()
export class UsageExplorerService {
  constructor(@InjectRepository(UsageRecord) private readonly records: Repository<UsageRecord>) {}

  /** Newest first: `limit` records after the cursor (a record id of this workspace). */
  async page(workspaceId: string, filter: UsageRecordFilter, query: { limit: number; startingAfter?: string }): Promise<Page<ExploredRecord>> {
    if (query.startingAfter) {
      const [cursor] = (await this.records.manager.query('SELECT 1 FROM usage_records WHERE id = $1 AND workspace_id = $2', [
        query.startingAfter,
        workspaceId,
      ])) as unknown[];
      if (!cursor) throw ApiError.badRequest('starting_after does not name a usage record of this workspace.', 'starting_after', 'invalid_cursor');
    }
    const rows = await this.select(workspaceId, filter, query.limit + 1, query.startingAfter);
    return toPage(rows, query.limit);
  }

  /** Every record of the filter, newest first, read in batches: for an export of any length. */
  async *all(workspaceId: string, filter: UsageRecordFilter): AsyncGenerator<ExploredRecord> {
    let after: string | undefined;
    for (;;) {
      const rows = await this.select(workspaceId, filter, EXPORT_BATCH, after);
      yield* rows;
      if (rows.length < EXPORT_BATCH) return;
      after = rows[rows.length - 1].id;
    }
  }

  /** The models the workspace used in the last `days` days, for a filter's choices (from the daily totals). */
  async modelsUsed(workspaceId: string, since: string): Promise<string[]> {
    const rows = (await this.records.manager.query(
      'SELECT DISTINCT model FROM usage_daily_totals WHERE workspace_id = $1 AND day >= $2::date ORDER BY model',
      [workspaceId, since],
    )) as { model: string }[];
    return rows.map((row) => row.model);
  }

  private async select(workspaceId: string, filter: UsageRecordFilter, limit: number, startingAfter?: string): Promise<ExploredRecord[]> {
    const parameters: unknown[] = [workspaceId];
    const add = (value: unknown) => `$${parameters.push(value)}`;
    const where = ['workspace_id = $1'];
    if (startingAfter) {
      // The cursor's position is read in SQL: created_at has microseconds, a JS Date only milliseconds.
      where.push(`(created_at, id) < (SELECT c.created_at, c.id FROM usage_records c WHERE c.id = ${add(startingAfter)} AND c.workspace_id = $1)`);
    }
    if (filter.model !== undefined) where.push(`model = ${add(filter.model)}`);
    if (filter.assistantId !== undefined) where.push(`assistant_id = ${add(filter.assistantId)}`);
    if (filter.userId !== undefined) where.push(`user_id = ${add(filter.userId)}`);
    if (filter.status !== undefined) where.push(`status = ${add(filter.status)}`);
    if (filter.from) where.push(`created_at >= ${add(filter.from)}`);
    if (filter.until) where.push(`created_at < ${add(filter.until)}`);
    const rows = (await this.records.manager.query(
      `SELECT ${COLUMNS} FROM usage_records WHERE ${where.join(' AND ')} ORDER BY created_at DESC, id DESC LIMIT ${add(limit)}`,
      parameters,
    )) as RecordRow[];
    return rows.map(toRecord);
  }
}

function toRecord(row: RecordRow): ExploredRecord {
  return {
    id: row.id,
    request_id: row.request_id,
    assistant_id: row.assistant_id,
    model: row.model,
    input_tokens: Number(row.input_tokens),
    output_tokens: Number(row.output_tokens),
    total_tokens: Number(row.total_tokens),
    llm_cost_millicents: Number(row.llm_cost),
    tool_cost_millicents: Number(row.tool_cost),
    total_cost_millicents: Number(row.total_cost),
    latency_ms: row.latency_ms,
    status: row.status,
    error_code: row.error_code,
    user_id: row.user_id,
    subscription_id: row.subscription_id,
    tools_used: row.tools_used,
    source: row.source,
    created_at: row.created_at.toISOString(),
    exact: { llmCostMillicents: row.llm_cost, toolCostMillicents: row.tool_cost, totalCostMillicents: row.total_cost },
  };
}
