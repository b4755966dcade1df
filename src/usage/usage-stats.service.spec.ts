import { ApiError } from '../common/errors/api-error';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import type { AppConfig } from '../config/app-config';
import type { RecordRow, UsageRecordFilter, UsageRecordsStore } from './usage-records-store';
import type { UsageStatsStore } from './usage-stats-store';
import { UsageStatsService } from './usage-stats.service';

/** The records of one workspace, as far as a page and its cursor go; it notes what was read. */
class FakeRecordsStore implements Pick<UsageRecordsStore, keyof UsageRecordsStore> {
  readonly listed: { filter: UsageRecordFilter; limit: number; startingAfter?: string }[] = [];
  constructor(private readonly ids: string[]) {}

  async isRecordOf(_workspaceId: string, recordId: string): Promise<boolean> {
    return this.ids.includes(recordId);
  }
  async list(_workspaceId: string, filter: UsageRecordFilter, limit: number, startingAfter?: string): Promise<RecordRow[]> {
    this.listed.push({ filter, limit, startingAfter });
    return [];
  }
}

function service(records: FakeRecordsStore, stats: Partial<UsageStatsStore> = {}): UsageStatsService {
  // Nothing pending: `written` resolves at once.
  return new UsageStatsService(stats as UsageStatsStore, records as unknown as UsageRecordsStore, { usageRetentionDays: 30 } as AppConfig, new PendingSettlements());
}

describe('UsageStatsService rules (with stores in memory)', () => {
  it('a cursor that is no record of the workspace is a 400 naming starting_after, and no page is read', async () => {
    const records = new FakeRecordsStore(['rec_1']);
    const error: unknown = await service(records)
      .recent('ws-1', { limit: 10, startingAfter: 'rec_of_another_workspace' })
      .catch((reason: unknown) => reason);
    expect(error).toBeInstanceOf(ApiError);
    expect([(error as ApiError).status, (error as ApiError).param, (error as ApiError).code]).toEqual([400, 'starting_after', 'invalid_cursor']);
    expect(records.listed).toEqual([]);
  });

  it('a page asks for one record more than the limit (whether more follow), with only the filters given', async () => {
    const records = new FakeRecordsStore(['rec_1']);
    const page = await service(records).recent('ws-1', { limit: 10, startingAfter: 'rec_1', model: 'gpt-4o' });
    expect(page).toMatchObject({ data: [], has_more: false });
    expect(records.listed).toEqual([{ filter: { model: 'gpt-4o' }, limit: 11, startingAfter: 'rec_1' }]);
  });

  it('a period without requests sums to zeros, not to NaN', async () => {
    const stats: Partial<UsageStatsStore> = { summary: async () => ({ models: [], providers: [], keys: [] }) };
    const summary = await service(new FakeRecordsStore([]), stats).summary('ws-1', {
      start: '2026-12-01T00:00:00.000Z',
      end: '2026-12-06T00:00:00.000Z',
      startDate: '2026-12-01',
      endDate: '2026-12-05',
    } as never);
    expect(summary.summary).toEqual({ total_requests: 0, total_tokens: 0, total_cost_millicents: 0, average_latency_ms: 0 });
    expect([summary.by_model, summary.by_provider, summary.by_api_key]).toEqual([[], [], []]);
  });
});
