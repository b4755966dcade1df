import { Logger } from '@nestjs/common';
import { SchedulerRegistry } from '@nestjs/schedule';
import { DataSource } from 'typeorm';
import { Billing } from '../src/billing/billing';
import { UsagePartitions } from '../src/usage/usage-partitions';
import { UsageRetention } from '../src/usage/usage-retention';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

const DAY_MS = 86_400_000;
const RETENTION_DAYS = 30;

/** `usage_records_pYYYYMMDD`: the partition of a UTC day. */
const partitionOf = (at: number) => `usage_records_p${new Date(at).toISOString().slice(0, 10).replace(/-/g, '')}`;
const midnightOf = (at: number) => Date.parse(new Date(at).toISOString().slice(0, 10));

describe('usage records partitioned by day', () => {
  let t: TestApp;
  let db: DataSource;
  let retention: UsageRetention;
  let partitions: UsagePartitions;

  beforeAll(async () => {
    t = await startTestApp({ config: { usageRetentionDays: RETENTION_DAYS } });
    db = t.app.get(DataSource);
    retention = t.app.get(UsageRetention);
    partitions = t.app.get(UsagePartitions);
  });
  afterAll(() => t.close());
  afterEach(() => jest.restoreAllMocks());

  const partitionNames = async (): Promise<string[]> =>
    (
      (await db.query(
        `SELECT c.relname AS name FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
          WHERE i.inhparent = 'usage_records'::regclass ORDER BY 1`,
      )) as { name: string }[]
    ).map((row) => row.name);

  /** Inserts one usage record per timestamp, answered by providers in turn (or none), costing 1.5 millicents each. */
  async function insertAt(workspace: TestWorkspace, timestamps: number[], prefix: string): Promise<void> {
    await db.query(
      `INSERT INTO usage_records (workspace_id, request_id, model, status, created_at, provider, total_tokens, total_cost_millicents, llm_cost_millicents)
       SELECT $1, $2 || '_' || ord, 'gpt-4o-mini', 'success', at, (ARRAY['openai', 'azure', NULL])[ord % 3 + 1], 10, 1.5, 1.5
         FROM unnest($3::timestamptz[]) WITH ORDINALITY AS u(at, ord)`,
      [workspace.id, prefix, timestamps.map((at) => new Date(at).toISOString())],
    );
  }

  /** Every daily total of the workspaces, beside the sums of the records it covers (equal when exact). */
  async function totalsAndSums(workspaceIds: string[]): Promise<{ totals: unknown[]; sums: unknown[] }> {
    const totals = (await db.query(
      `SELECT workspace_id, day::text, model, provider, api_key_id, requests::int, tokens::int, cost_millicents::text AS cost
         FROM usage_daily_totals WHERE workspace_id = ANY($1) ORDER BY 1, 2, 3, 4, 5`,
      [workspaceIds],
    )) as unknown[];
    const sums = (await db.query(
      `SELECT workspace_id, ((created_at AT TIME ZONE 'UTC')::date)::text AS day, model, coalesce(provider, '') AS provider,
              coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id, count(*)::int AS requests,
              sum(total_tokens)::int AS tokens, sum(total_cost_millicents)::text AS cost
         FROM usage_records WHERE workspace_id = ANY($1) GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, 4, 5`,
      [workspaceIds],
    )) as unknown[];
    return { totals, sums };
  }

  it("writes each record into its UTC day's partition: requests on both sides of midnight (the clock moved)", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    // A midnight far ahead, whose days no partition covered: the clock of the settlements moves there.
    const midnight = Date.UTC(2031, 2, 15);
    expect(await partitions.ensure(new Date(midnight - DAY_MS), new Date(midnight))).toBe(2);
    const writer = t.app.get(Billing).settlements;
    const ask = () =>
      workspace.client.chat.completions.create({ model: 'gpt-4o-mini', max_tokens: 20, messages: [{ role: 'user', content: 'Hello!' }] });
    try {
      writer.clock = () => midnight - 100;
      const late = await Promise.all([ask(), ask()]);
      writer.clock = () => midnight + 100;
      const early = await ask();
      await t.settled(workspace.id);
      await writer.idle();
      const rows = (await db.query(
        `SELECT request_id, tableoid::regclass::text AS partition, created_at FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
        [workspace.id],
      )) as { request_id: string; partition: string; created_at: Date }[];
      expect(rows.map((row) => row.partition)).toEqual([partitionOf(midnight - 1), partitionOf(midnight - 1), partitionOf(midnight)]);
      expect(rows.map((row) => row.created_at.getTime())).toEqual([midnight - 100, midnight - 100, midnight + 100]);
      expect(late.length + 1).toBe(rows.length);
      expect(early.id).toBeTruthy();
      // The daily totals count each request on its day.
      const days = (await db.query(
        `SELECT day::text, sum(requests)::int AS requests FROM usage_daily_totals WHERE workspace_id = $1 GROUP BY 1 ORDER BY 1`,
        [workspace.id],
      )) as unknown[];
      expect(days).toEqual([
        { day: '2031-03-14', requests: 2 },
        { day: '2031-03-15', requests: 1 },
      ]);
    } finally {
      writer.clock = Date.now;
    }
  });

  it('pages /v1/usage/recent across days (partitions) by keyset, ties of one instant included, as one ordered list', async () => {
    const workspace = await t.createWorkspace();
    const today = midnightOf(Date.now());
    // Four days, with records on both sides of each midnight and several at one instant.
    const at = [3, 2, 1].flatMap((days) => [today - days * DAY_MS - 1, today - days * DAY_MS, today - days * DAY_MS, today - days * DAY_MS + 1]);
    await insertAt(workspace, [...at, today - DAY_MS, today - DAY_MS], 'page');
    const expected = (
      (await db.query('SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC', [workspace.id])) as { id: string }[]
    ).map((row) => row.id);
    expect(expected).toHaveLength(14);
    const seen: string[] = [];
    let cursor: string | null = null;
    do {
      const page = (await workspace.client.get('/usage/recent', { query: { limit: 3, ...(cursor ? { starting_after: cursor } : {}) } })) as {
        data: { id: string }[];
        next_cursor: string | null;
      };
      seen.push(...page.data.map((record) => record.id));
      cursor = page.next_cursor;
    } while (cursor);
    expect(seen).toEqual(expected);
  });

  it('creates each missing day once when every replica asks at the same time, and keeps a week ahead', async () => {
    const from = new Date(Date.UTC(2032, 0, 1));
    const to = new Date(Date.UTC(2032, 0, 5));
    const created = await Promise.all([1, 2, 3, 4].map(() => partitions.ensure(from, to)));
    expect(created.reduce((sum, n) => sum + n, 0)).toBe(5);
    expect((await partitionNames()).filter((name) => name.startsWith('usage_records_p203201'))).toEqual(
      ['01', '02', '03', '04', '05'].map((day) => `usage_records_p203201${day}`),
    );
    const names = await partitionNames();
    for (let day = -1; day <= 7; day += 1) expect(names).toContain(partitionOf(Date.now() + day * DAY_MS));
  });

  it(`drops the days out of the window of USAGE_RETENTION_DAYS (${RETENTION_DAYS}) whole, with their totals; keeps the rest exact and the ledger whole`, async () => {
    const a = await t.createWorkspace({ balanceMillicents: 5_000 });
    const b = await t.createWorkspace({ balanceMillicents: 7_000 });
    // A fixed "now" in the past, so that other tests' fresh rows are not at stake.
    const now = Date.now() - 10 * DAY_MS;
    const cutoff = midnightOf(now) - (RETENTION_DAYS - 1) * DAY_MS;
    expect(retention.cutoff(new Date(now)).getTime()).toBe(cutoff);
    const expired = [cutoff - 200 * DAY_MS, cutoff - DAY_MS, cutoff - 1];
    const kept = [cutoff, cutoff + 1, cutoff + DAY_MS, now];
    for (const at of [...expired, ...kept]) await partitions.ensure(new Date(at), new Date(at));
    await insertAt(a, [...expired, ...kept], 'a');
    await insertAt(b, [...expired, ...kept, ...kept], 'b');

    // Ledger rows as old as the oldest records: never touched by retention.
    const wallet = t.app.get(WalletService);
    await wallet.credit({ workspaceId: a.id, amountMillicents: 100, type: 'topup', idempotencyKey: `retention:${a.id}` });
    await db.query(`UPDATE wallet_transactions SET created_at = $2 WHERE workspace_id = $1`, [a.id, new Date(cutoff - 300 * DAY_MS)]);
    const ledgerBefore = (await db.query('SELECT id, amount_millicents FROM wallet_transactions ORDER BY id')) as unknown[];

    const before = await totalsAndSums([a.id, b.id]);
    expect(before.totals).toEqual(before.sums);
    expect(before.totals.length).toBeGreaterThan(0);
    const keptTotals = (before.totals as { day: string }[]).filter((row) => Date.parse(row.day) >= cutoff);
    const older = (await partitionNames()).filter((name) => /^usage_records_p\d{8}$/.test(name) && name < partitionOf(cutoff));
    expect(older).toContain(partitionOf(cutoff - 200 * DAY_MS));

    const result = await retention.purgeExpired({ now: new Date(now) });
    // Not a row deleted: whole days dropped.
    expect(result).toMatchObject({ deleted: 0, cutoff: new Date(cutoff), ran: true });
    expect(result.droppedPartitions).toEqual(older);
    expect((await partitionNames()).filter((name) => name < partitionOf(cutoff) && /^usage_records_p\d{8}$/.test(name))).toEqual([]);
    expect(await partitionNames()).toContain(partitionOf(cutoff));

    const left = (await db.query(`SELECT workspace_id, created_at FROM usage_records WHERE workspace_id = ANY($1) ORDER BY created_at`, [
      [a.id, b.id],
    ])) as { workspace_id: string; created_at: Date }[];
    expect(left.filter((row) => row.workspace_id === a.id).map((row) => row.created_at.getTime())).toEqual(kept);
    expect(left.filter((row) => row.workspace_id === b.id)).toHaveLength(2 * kept.length);

    // The totals of the days kept did not move; the expired days' went with their records.
    const after = await totalsAndSums([a.id, b.id]);
    expect(after.totals).toEqual(after.sums);
    expect(after.totals).toEqual(keptTotals);
    expect(await db.query('SELECT id, amount_millicents FROM wallet_transactions ORDER BY id')).toEqual(ledgerBefore);
    expect(await wallet.balance(a.id)).toMatchObject({ balanceMillicents: 5_100 });

    // Nothing left to do: a second run drops nothing, and logs nothing.
    const log = jest.spyOn(Logger.prototype, 'log').mockImplementation(() => undefined);
    expect(await retention.purgeExpired({ now: new Date(now) })).toMatchObject({ deleted: 0, droppedPartitions: [], ran: true });
    expect(log).not.toHaveBeenCalled();
  });

  it('runs one purge at a time: concurrent calls skip, and each day is dropped once', async () => {
    const workspace = await t.createWorkspace();
    const now = Date.now() - 15 * DAY_MS;
    const cutoff = midnightOf(now) - (RETENTION_DAYS - 1) * DAY_MS;
    const old = [cutoff - 1, cutoff - DAY_MS - 1, cutoff - 2 * DAY_MS - 1];
    for (const at of old) await partitions.ensure(new Date(at), new Date(at));
    await insertAt(workspace, old, 'race');
    const results = await Promise.all([1, 2, 3].map(() => retention.purgeExpired({ now: new Date(now) })));
    const dropped = results.flatMap((r) => r.droppedPartitions);
    expect(new Set(dropped).size).toBe(dropped.length);
    expect(dropped).toEqual(expect.arrayContaining(old.map(partitionOf)));
    expect(results.filter((r) => r.ran).length).toBeGreaterThanOrEqual(1);
    expect(await db.query('SELECT 1 FROM usage_records WHERE workspace_id = $1', [workspace.id])).toEqual([]);
    // The advisory lock was given back: the next run is not skipped.
    expect((await retention.purgeExpired({ now: new Date(now) })).ran).toBe(true);
  });

  it('is scheduled with @nestjs/schedule: retention at minute 17, the next partitions at minute 7, of every hour', () => {
    const registry = t.app.get(SchedulerRegistry);
    for (const [name, minute] of [
      ['usage-retention', 17],
      ['usage-partitions', 7],
    ] as const) {
      const next = registry.getCronJob(name).nextDate().toJSDate();
      expect(next.getTime()).toBeGreaterThan(Date.now());
      expect(next.getTime() - Date.now()).toBeLessThanOrEqual(3_600_000);
      expect(next.getUTCMinutes()).toBe(minute);
    }
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
