import type { AppConfig } from '../config/app-config';
import type { UsagePartitions } from './usage-partitions';
import type { RetentionSession, UsagePartition, UsagePartitionsStore } from './usage-partitions-store';
import { UsageRetention } from './usage-retention';

/** The retention's connection in memory: a lock another replica may hold, rows deleted a batch at a time. */
class FakeSession implements Pick<RetentionSession, keyof RetentionSession> {
  readonly calls: string[] = [];
  constructor(
    private readonly lockFree: boolean,
    private expiredRecords: number,
  ) {}

  async tryLock(): Promise<boolean> {
    this.calls.push('lock');
    return this.lockFree;
  }
  async unlock(): Promise<void> {
    this.calls.push('unlock');
  }
  async withTimeouts<T>(timeout: string, work: () => Promise<T>): Promise<T> {
    this.calls.push(`timeouts ${timeout}`);
    return work();
  }
  async detachAndDrop(partition: Pick<UsagePartition, 'name'>): Promise<void> {
    this.calls.push(`drop ${partition.name}`);
  }
  async deleteRecordsBefore(cutoff: Date, limit: number): Promise<number> {
    const count = Math.min(limit, this.expiredRecords);
    this.expiredRecords -= count;
    this.calls.push(`delete records before ${cutoff.toISOString()}: ${count}`);
    return count;
  }
  async deleteTotalsBefore(day: string): Promise<number> {
    this.calls.push(`delete totals before ${day}`);
    return 0;
  }
  async release(): Promise<void> {
    this.calls.push('release');
  }
}

function partition(name: string, from: string | null, to: string): UsagePartition {
  return { name, from, to, rows_estimate: 0, bytes: 0, detaching: false };
}

function retention(session: FakeSession, partitions: UsagePartition[]): UsageRetention {
  const store = { session: async () => session } as unknown as UsagePartitionsStore;
  const list = { list: async () => partitions } as unknown as UsagePartitions;
  return new UsageRetention(store, { usageRetentionDays: 3 } as AppConfig, list);
}

const NOW = new Date('2026-12-06T10:00:00Z');

describe('UsageRetention rules (with its store in memory)', () => {
  it('keeps the last USAGE_RETENTION_DAYS UTC days: drops the days wholly before, deletes the rest in batches, then unlocks', async () => {
    const session = new FakeSession(true, 25);
    const days = [
      partition('usage_records_legacy', null, '2026-12-03T12:00:00.000Z'),
      partition('usage_records_20261203', '2026-12-03T00:00:00.000Z', '2026-12-04T00:00:00.000Z'),
      partition('usage_records_20261204', '2026-12-04T00:00:00.000Z', '2026-12-05T00:00:00.000Z'),
    ];
    const result = await retention(session, days).purgeExpired({ now: NOW, batchSize: 10 });

    expect(result).toEqual({ deleted: 25, droppedPartitions: ['usage_records_legacy', 'usage_records_20261203'], cutoff: new Date('2026-12-04T00:00:00Z'), ran: true });
    expect(session.calls).toEqual([
      'lock',
      'timeouts 5min',
      'drop usage_records_legacy',
      'drop usage_records_20261203',
      'delete records before 2026-12-04T00:00:00.000Z: 10',
      'delete records before 2026-12-04T00:00:00.000Z: 10',
      'delete records before 2026-12-04T00:00:00.000Z: 5',
      'delete totals before 2026-12-04',
      'unlock',
      'release',
    ]);
  });

  it('does nothing while another replica holds the lock, and gives its connection back', async () => {
    const session = new FakeSession(false, 25);
    const result = await retention(session, [partition('usage_records_20261201', '2026-12-01T00:00:00.000Z', '2026-12-02T00:00:00.000Z')]).purgeExpired({
      now: NOW,
    });
    expect(result).toMatchObject({ deleted: 0, droppedPartitions: [], ran: false });
    expect(session.calls).toEqual(['lock', 'release']);
  });
});
