import { Logger } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { DataSource } from 'typeorm';
import { UsageRetention } from '../src/usage/usage-retention';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

const DAY_MS = 86_400_000;
const RETENTION_DAYS = 30;

describe('usage retention', () => {
  let t: TestApp;
  let db: DataSource;
  let retention: UsageRetention;

  beforeAll(async () => {
    t = await startTestApp({ config: { usageRetentionDays: RETENTION_DAYS } });
    db = t.app.get(DataSource);
    retention = t.app.get(UsageRetention);
  });
  afterAll(() => t.close());
  afterEach(() => jest.restoreAllMocks());

  /** Inserts one usage record per timestamp (ISO, up to microseconds), answered by providers in turn (or none). */
  async function insertAt(workspace: TestWorkspace, timestamps: string[], prefix: string): Promise<void> {
    await db.query(
      `INSERT INTO usage_records (workspace_id, request_id, model, status, created_at, provider)
       SELECT $1, $2 || '_' || ord, 'gpt-4o-mini', 'success', at, (ARRAY['openai', 'azure', NULL])[ord % 3 + 1]
         FROM unnest($3::timestamptz[]) WITH ORDINALITY AS u(at, ord)`,
      [workspace.id, prefix, timestamps],
    );
  }
  const remaining = async (workspace: TestWorkspace) =>
    (
      (await db.query('SELECT created_at FROM usage_records WHERE workspace_id = $1 ORDER BY created_at', [workspace.id])) as {
        created_at: Date;
      }[]
    ).length;
  const iso = (ms: number, microseconds = '') => {
    const text = new Date(ms).toISOString();
    return microseconds ? `${text.slice(0, 23)}${microseconds}Z` : text;
  };

  it(`deletes exactly the records older than USAGE_RETENTION_DAYS (${RETENTION_DAYS}), of every workspace, and no ledger row`, async () => {
    const a = await t.createWorkspace({ balanceMillicents: 5_000 });
    const b = await t.createWorkspace({ balanceMillicents: 7_000 });
    const now = new Date(Date.now() - 10 * DAY_MS); // a fixed "now" in the past, so other tests' fresh rows are not at stake
    const cutoff = now.getTime() - RETENTION_DAYS * DAY_MS;
    const expired = [iso(cutoff - 200 * DAY_MS), iso(cutoff - DAY_MS), iso(cutoff - 1), iso(cutoff - 1, '999')]; // the last: 1 µs before
    const kept = [iso(cutoff), iso(cutoff, '001'), iso(cutoff + 1), iso(cutoff + DAY_MS), iso(now.getTime())];
    await insertAt(a, [...expired, ...kept], 'a');
    await insertAt(b, [...expired, ...kept], 'b');

    // Ledger rows, some of them as old as the oldest records: never touched by the purge.
    const wallet = t.app.get(WalletService);
    await wallet.credit({ workspaceId: a.id, amountMillicents: 100, type: 'topup', idempotencyKey: `retention:${a.id}` });
    await db.query(`UPDATE wallet_transactions SET created_at = $2 WHERE workspace_id = $1`, [a.id, iso(cutoff - 300 * DAY_MS)]);
    const ledgerBefore = (await db.query('SELECT id, amount_millicents FROM wallet_transactions ORDER BY id')) as unknown[];
    expect(ledgerBefore.length).toBeGreaterThanOrEqual(3);

    const result = await retention.purgeExpired({ now });
    expect(result).toEqual({ deleted: 2 * expired.length, cutoff: new Date(cutoff), ran: true });

    for (const workspace of [a, b]) {
      const left = (await db.query(
        `SELECT to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US') AS at FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
        [workspace.id],
      )) as { at: string }[];
      expect(left.map((row) => row.at)).toEqual(
        [kept[0], kept[1], kept[2], kept[3], kept[4]].map((at) => (/\.\d{6}Z$/.test(at) ? at.slice(0, 26) : `${at.slice(0, 23)}000`)),
      );
    }
    expect(await db.query('SELECT id, amount_millicents FROM wallet_transactions ORDER BY id')).toEqual(ledgerBefore);
    // The statistics' daily totals lost exactly the purged records, provider by provider.
    expect(
      await db.query(
        `SELECT workspace_id, day, nullif(provider, '') AS provider, requests::int FROM usage_daily_totals
          WHERE workspace_id = ANY($1) ORDER BY 1, 2, 3`,
        [[a.id, b.id]],
      ),
    ).toEqual(
      (await db.query(
        `SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, provider, count(*)::int AS requests FROM usage_records
          WHERE workspace_id = ANY($1) GROUP BY 1, 2, 3 ORDER BY 1, 2, 3`,
        [[a.id, b.id]],
      )) as unknown[],
    );
    expect(await wallet.balance(a.id)).toMatchObject({ balanceMillicents: 5_100 });

    // Nothing left to do: a second run deletes nothing.
    expect(await retention.purgeExpired({ now })).toMatchObject({ deleted: 0, ran: true });
  });

  it('deletes in batches until a batch comes back short, and logs how many it removed', async () => {
    const workspace = await t.createWorkspace();
    // Each test's "now" lies further back than the last's, so its cutoff cannot reach the rows earlier tests kept.
    const now = new Date(Date.now() - 50 * DAY_MS);
    const cutoff = now.getTime() - RETENTION_DAYS * DAY_MS;
    const old = Array.from({ length: 23 }, (_, i) => iso(cutoff - (i + 1) * 60_000));
    await insertAt(workspace, [...old, iso(cutoff + 60_000)], 'batch');
    const messages: string[] = [];
    const log = jest.spyOn(Logger.prototype, 'log').mockImplementation(function (this: Logger, message: unknown) {
      messages.push(String(message));
    });

    const result = await retention.purgeExpired({ now, batchSize: 5 });
    expect(result.deleted).toBe(23);
    expect(await remaining(workspace)).toBe(1);
    expect(log).toHaveBeenCalledTimes(1);
    expect(messages[0]).toMatch(/^Deleted 23 usage record\(s\) created before /);

    log.mockClear();
    await retention.purgeExpired({ now, batchSize: 5 });
    expect(log).not.toHaveBeenCalled(); // nothing removed, nothing logged
  });

  it('runs one purge at a time: a concurrent call skips, and together they delete each record once', async () => {
    const workspace = await t.createWorkspace();
    const now = new Date(Date.now() - 60 * DAY_MS);
    const cutoff = now.getTime() - RETENTION_DAYS * DAY_MS;
    await insertAt(workspace, Array.from({ length: 40 }, (_, i) => iso(cutoff - (i + 1) * 1_000)), 'race');
    const results = await Promise.all([
      retention.purgeExpired({ now, batchSize: 2 }),
      retention.purgeExpired({ now, batchSize: 2 }),
      retention.purgeExpired({ now, batchSize: 2 }),
    ]);
    expect(results.reduce((sum, r) => sum + r.deleted, 0)).toBe(40);
    expect(results.filter((r) => r.ran).length).toBeGreaterThanOrEqual(1);
    expect(await remaining(workspace)).toBe(0);
    // The advisory lock was given back: the next run is not skipped.
    expect((await retention.purgeExpired({ now })).ran).toBe(true);
  });

  it('is scheduled with @nestjs/schedule', () => {
    const job = t.app.get(SchedulerRegistry).getCronJob('usage-retention');
    expect(job).toBeDefined();
    const next = job.nextDate().toJSDate();
    expect(next.getTime()).toBeGreaterThan(Date.now());
    expect(next.getTime() - Date.now()).toBeLessThanOrEqual(3_600_000);
    expect(next.getUTCMinutes()).toBe(17);
  });

  it('does not let the statistics reach before the window of USAGE_RETENTION_DAYS', async () => {
    const workspace = await t.createWorkspace();
    const day = (offset: number) => new Date(Date.now() + offset * DAY_MS).toISOString().slice(0, 10);
    const error = (await workspace.client.get('/usage', { query: { start_date: day(-RETENTION_DAYS) } }).catch((e: unknown) => e)) as {
      status: number;
      error: { param: string; code: string };
    };
    expect(error.status).toBe(400);
    expect(error.error.param).toBe('start_date');
    const widest = (await workspace.client.get('/usage/daily', { query: { start_date: day(-(RETENTION_DAYS - 1)) } })) as {
      data: unknown[];
    };
    expect(widest.data).toHaveLength(RETENTION_DAYS);
  });
});
