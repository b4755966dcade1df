import { Injectable } from '@nestjs/common';
import { ApiError } from '../common/errors/api-error';
import { Page, toPage } from '../common/pagination';
import type { UsageRecordDto } from './dto/usage.dto';
import { RecordRow, toRecordDto, UsageRecordsStore, type UsageRecordFilter } from './usage-records-store';
import { UsageStatsStore } from './usage-stats-store';
import { PendingSettlements } from '../common/settlements/pending-settlements';

export type { UsageRecordFilter } from './usage-records-store';

/** Rows per statement when every record of a filter is read (the CSV export). */
const EXPORT_BATCH = 1_000;

/** A usage record as /v1/usage/recent answers it, plus its costs as exact decimal strings (for exports). */
export interface ExploredRecord extends UsageRecordDto {
  /** Who made the request: `api` (a key), `dashboard` (the playground), ... */
  source: string;
  exact: { llmCostMillicents: string; toolCostMillicents: string; totalCostMillicents: string };
}

/**
 * The dashboard's reads of usage records: /v1/usage/recent's list with a date range too.
 * Every filter is a prefix of an index of usage_records ((workspace_id, model | assistant_id
 * | user_id, created_at DESC), the errors' partial index, or (workspace_id, created_at DESC)),
 * and pages go by keyset, so a page costs the same at the first record and the millionth.
 */
@Injectable()
export class UsageExplorerService {
  constructor(
    private readonly recordsStore: UsageRecordsStore,
    private readonly stats: UsageStatsStore,
    /** Absent where no chat request is served (the CLI). */
    private readonly pending: PendingSettlements,
  ) {}

  /** Newest first: `limit` records after the cursor (a record id of this workspace). */
  async page(workspaceId: string, filter: UsageRecordFilter, query: { limit: number; startingAfter?: string }): Promise<Page<ExploredRecord>> {
    await this.pending.written(workspaceId);
    if (query.startingAfter && !(await this.recordsStore.isRecordOf(workspaceId, query.startingAfter))) {
      throw ApiError.badRequest('starting_after does not name a usage record of this workspace.', 'starting_after', 'invalid_cursor');
    }
    const rows = await this.select(workspaceId, filter, query.limit + 1, query.startingAfter);
    return toPage(rows, query.limit);
  }

  /** Every record of the filter, newest first, read in batches: for an export of any length. */
  async *all(workspaceId: string, filter: UsageRecordFilter): AsyncGenerator<ExploredRecord> {
    await this.pending.written(workspaceId);
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
    return this.stats.modelsUsed(workspaceId, since);
  }

  private async select(workspaceId: string, filter: UsageRecordFilter, limit: number, startingAfter?: string): Promise<ExploredRecord[]> {
    const rows = await this.recordsStore.list(workspaceId, filter, limit, startingAfter);
    return rows.map(toRecord);
  }
}

function toRecord(row: RecordRow): ExploredRecord {
  return {
    ...toRecordDto(row),
    exact: {
      llmCostMillicents: row.llm_cost_millicents,
      toolCostMillicents: row.tool_cost_millicents,
      totalCostMillicents: row.total_cost_millicents,
    },
  };
}
