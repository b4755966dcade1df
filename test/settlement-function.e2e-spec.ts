import fc from 'fast-check';
import { createHash, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { isUUID } from 'class-validator';
import { DataSource, QueryRunner } from 'typeorm';
import { SettlementRecordIds1764002300000 } from '../migrations/1764002300000-SettlementRecordIds';
import { UsageService } from '../src/usage/usage.service';
import { startTestApp, TestApp } from './support/test-app';

const M = 1_000_000n;

interface Order {
  key?: string;
  holdRowId: string;
  leased?: boolean;
  costMicros: bigint;
  refund?: boolean;
  description?: string;
  usageRow?: Record<string, unknown> | null;
}

interface Outcome {
  charged: number;
  kept: number;
  writtenOff: number;
  balanceAfter: number;
  applied: boolean;
  releasedFromLease: number;
  belowThreshold: boolean;
  recordError: string | null;
}

/**
 * settle_charges(), the database function that settles a batch of chat requests in one
 * statement (migrations/1764002200000-SettlementFunction.ts, as 1764002300000-SettlementRecordIds.ts
 * redefines it), called as WalletService calls
 * it, on wallets and holds set up row by row.
 */
describe('settle_charges()', () => {
  let t: TestApp;
  let db: DataSource;

  /** Ledger keys are unique across the database: each test's keys get a prefix of their own. */
  let run: string;

  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get(DataSource);
  });
  beforeEach(() => (run = randomUUID().slice(0, 8)));
  afterAll(() => t.close());

  /** A workspace whose wallet is exactly this (no ledger row: the tests compare against `balance`). */
  async function wallet(balance: bigint, reserved: bigint, carryMicros: bigint): Promise<string> {
    const workspace = await t.createWorkspace({ balanceMillicents: 1 });
    await db.query(`DELETE FROM wallet_transactions WHERE workspace_id = $1`, [workspace.id]);
    await db.query(`UPDATE wallets SET balance_millicents = $2, reserved_millicents = $3, carry_millicents = $4::numeric / 1000000 WHERE workspace_id = $1`, [
      workspace.id,
      balance.toString(),
      reserved.toString(),
      carryMicros.toString(),
    ]);
    return workspace.id;
  }

  async function hold(workspaceId: string, amount: bigint, kind: 'request' | 'lease' = 'request'): Promise<string> {
    const [{ id }] = (await db.query(
      `INSERT INTO wallet_holds (workspace_id, request_id, amount_millicents, expires_at, kind) VALUES ($1, $2, $3, now() + interval '1 hour', $4) RETURNING id`,
      [workspaceId, randomUUID(), amount.toString(), kind],
    )) as { id: string }[];
    return id;
  }

  interface SettleOptions {
    checkApplied?: boolean;
    recordsOptional?: boolean;
    synchronousCommit?: 'on' | 'off';
    /** Runs the call on this connection (a session with settings of its own). */
    runner?: QueryRunner;
  }

  /** One call of settle_charges(), for orders of one workspace or (`workspaceOf`) of several. */
  async function settle(workspaceId: string | string[], orders: Order[], options: SettleOptions = {}): Promise<Outcome[]> {
    const keys = orders.map((order) => `${run}.${order.key ?? randomUUID()}`);
    const records = orders.some((order) => order.usageRow !== undefined) ? JSON.stringify(orders.map((order) => order.usageRow ?? null)) : null;
    const query = options.runner ? options.runner.query.bind(options.runner) : db.query.bind(db);
    const rows = (await query(`SELECT * FROM settle_charges($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)`, [
      keys,
      orders.map((_, index) => (Array.isArray(workspaceId) ? workspaceId[index] : workspaceId)),
      orders.map((order) => order.holdRowId),
      orders.map((order) => order.leased === true),
      orders.map((order) => order.costMicros.toString()),
      orders.map((order) => order.refund === true),
      orders.map((order) => order.description ?? 'gpt-4o'),
      options.checkApplied === true,
      options.synchronousCommit ?? 'on',
      records,
      options.recordsOptional === true,
    ])) as Record<string, string | boolean | null>[];
    return rows.map((row) => ({
      charged: Number(row.charged_millicents),
      kept: Number(row.kept_millicents),
      writtenOff: Number(row.written_off_millicents),
      balanceAfter: Number(row.balance_after_millicents),
      applied: row.applied as boolean,
      releasedFromLease: Number(row.released_from_lease_millicents),
      belowThreshold: row.below_threshold as boolean,
      recordError: row.record_error as string | null,
    }));
  }

  async function walletRow(workspaceId: string) {
    const [row] = (await db.query(
      `SELECT balance_millicents, reserved_millicents, (carry_millicents * 1000000)::bigint AS carry FROM wallets WHERE workspace_id = $1`,
      [workspaceId],
    )) as { balance_millicents: string; reserved_millicents: string; carry: string }[];
    return { balance: BigInt(row.balance_millicents), reserved: BigInt(row.reserved_millicents), carry: BigInt(row.carry) };
  }

  async function holds(workspaceId: string): Promise<Map<string, bigint>> {
    const rows = (await db.query(`SELECT id, amount_millicents FROM wallet_holds WHERE workspace_id = $1`, [workspaceId])) as {
      id: string;
      amount_millicents: string;
    }[];
    return new Map(rows.map((row) => [row.id, BigInt(row.amount_millicents)]));
  }

  async function ledger(workspaceId: string) {
    const rows = (await db.query(
      `SELECT type, amount_millicents, balance_after_millicents, description, idempotency_key FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at, id`,
      [workspaceId],
    )) as { type: string; amount_millicents: string; balance_after_millicents: string; description: string; idempotency_key: string }[];
    return rows.map((row) => ({
      type: row.type,
      amount: BigInt(row.amount_millicents),
      balanceAfter: BigInt(row.balance_after_millicents),
      description: row.description,
      key: row.idempotency_key.replace(`${run}.`, ''),
    }));
  }

  /** A usage record as UsageService.row keys it; charged_millicents is the function's to set. */
  function usageRow(workspaceId: string, requestId: string, changes: Record<string, unknown> = {}): Record<string, unknown> {
    return {
      workspace_id: workspaceId,
      request_id: requestId,
      model: 'gpt-4o',
      input_tokens: 10,
      output_tokens: 2,
      total_tokens: 12,
      cached_tokens: 0,
      llm_cost_millicents: '12.500000',
      tool_cost_millicents: 0,
      total_cost_millicents: '12.500000',
      latency_ms: 7,
      status: 'success',
      tools_used: ['web_search'],
      stream: false,
      iterations: 1,
      source: 'api',
      nerfing: [],
      charged_millicents: 999,
      ...changes,
    };
  }

  async function usageRecords(workspaceId: string): Promise<{ request_id: string; charged_millicents: string }[]> {
    return (await db.query(`SELECT request_id, charged_millicents FROM usage_records WHERE workspace_id = $1 ORDER BY request_id`, [
      workspaceId,
    ])) as { request_id: string; charged_millicents: string }[];
  }

  it('charges requests in order, carrying the fraction, each ledger row with the balance it left', async () => {
    const ws = await wallet(1_000n, 300n, 0n);
    const [h1, h2] = [await hold(ws, 100n), await hold(ws, 200n)];
    const outcomes = await settle(ws, [
      { key: 'r1', holdRowId: h1, costMicros: 10n * M + 600_000n },
      { key: 'r2', holdRowId: h2, costMicros: 20n * M + 600_000n },
    ]);
    // 10.6 -> 10 charged, 0.6 carried; 0.6 + 20.6 = 21.2 -> 21 charged, 0.2 carried.
    expect(outcomes.map((o) => [o.charged, o.kept, o.balanceAfter, o.applied])).toEqual([
      [10, 10, 990, true],
      [21, 21, 969, true],
    ]);
    expect(await walletRow(ws)).toEqual({ balance: 969n, reserved: 0n, carry: 200_000n });
    expect(await holds(ws)).toEqual(new Map());
    expect((await ledger(ws)).map((row) => [row.key, row.amount, row.balanceAfter])).toEqual([
      ['usage:r1', -10n, 990n],
      ['usage:r2', -21n, 969n],
    ]);
  });

  it('takes a leased request charge out of its lease (and so out of reserved), leaving the rest leased', async () => {
    const ws = await wallet(10_000n, 5_000n, 0n);
    const lease = await hold(ws, 5_000n, 'lease');
    const outcomes = await settle(ws, [
      { holdRowId: lease, leased: true, costMicros: 700n * M },
      { holdRowId: lease, leased: true, costMicros: 300n * M },
    ]);
    expect(outcomes.map((o) => o.releasedFromLease)).toEqual([700, 300]);
    expect(await walletRow(ws)).toEqual({ balance: 9_000n, reserved: 4_000n, carry: 0n });
    expect(await holds(ws)).toEqual(new Map([[lease, 4_000n]]));
  });

  it('writes off what the wallet cannot cover, never taking what other requests hold', async () => {
    const ws = await wallet(500n, 500n, 400_000n);
    const mine = await hold(ws, 100n);
    const other = await hold(ws, 400n);
    const [outcome] = await settle(ws, [{ holdRowId: mine, costMicros: 250n * M }]);
    expect(outcome).toMatchObject({ charged: 100, writtenOff: 150, balanceAfter: 400 });
    // Written off: the carry is dropped with it.
    expect(await walletRow(ws)).toEqual({ balance: 400n, reserved: 400n, carry: 0n });
    expect(await holds(ws)).toEqual(new Map([[other, 400n]]));
  });

  it('refunds a failed request in the same statement, puts the carry back, and keeps nothing', async () => {
    const ws = await wallet(1_000n, 50n, 300_000n);
    const h = await hold(ws, 50n);
    const [outcome] = await settle(ws, [{ key: 'r1', holdRowId: h, costMicros: 40n * M, refund: true, description: 'gpt-4o: 3 tokens' }]);
    expect(outcome).toMatchObject({ charged: 40, kept: 0, balanceAfter: 1_000 });
    expect(await walletRow(ws)).toEqual({ balance: 1_000n, reserved: 0n, carry: 300_000n });
    expect((await ledger(ws)).map((row) => [row.type, row.amount, row.balanceAfter, row.key, row.description])).toEqual([
      ['usage', -40n, 960n, 'usage:r1', 'gpt-4o: 3 tokens'],
      ['refund', 40n, 1_000n, 'refund:r1', 'Refund: gpt-4o: 3 tokens'],
    ]);
  });

  it('on a retry, writes nothing for a settlement already applied, and settles the others', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [done, pending] = [await hold(ws, 50n), await hold(ws, 50n)];
    await settle(ws, [{ key: 'done', holdRowId: done, costMicros: 40n * M }]);
    const outcomes = await settle(
      ws,
      [
        { key: 'done', holdRowId: done, costMicros: 40n * M },
        { key: 'pending', holdRowId: pending, costMicros: 30n * M },
      ],
      { checkApplied: true },
    );
    expect(outcomes.map((o) => [o.applied, o.charged])).toEqual([
      [false, 0],
      [true, 30],
    ]);
    expect(await walletRow(ws)).toEqual({ balance: 930n, reserved: 0n, carry: 0n });
    expect((await ledger(ws)).map((row) => row.key)).toEqual(['usage:done', 'usage:pending']);
  });

  it('fails whole, writing nothing, when a ledger key was used already (a settlement replayed without the retry check)', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [first, second] = [await hold(ws, 50n), await hold(ws, 50n)];
    await settle(ws, [{ key: 'same', holdRowId: first, costMicros: 10n * M }]);
    await expect(settle(ws, [{ key: 'same', holdRowId: second, costMicros: 10n * M }])).rejects.toMatchObject({ code: '23505' });
    expect(await walletRow(ws)).toEqual({ balance: 990n, reserved: 50n, carry: 0n });
    expect(await holds(ws)).toEqual(new Map([[second, 50n]]));
  });

  it('inserts the usage record of each applied settlement with what the wallet kept, and no other', async () => {
    const ws = await wallet(1_000n, 150n, 0n);
    const [a, b, c] = [await hold(ws, 50n), await hold(ws, 50n), await hold(ws, 50n)];
    await settle(ws, [{ key: 'c', holdRowId: c, costMicros: 5n * M }]);
    const outcomes = await settle(
      ws,
      [
        { key: 'a', holdRowId: a, costMicros: 12_500_000n, usageRow: usageRow(ws, 'req-a') },
        { key: 'b', holdRowId: b, costMicros: 12_500_000n, refund: true, usageRow: usageRow(ws, 'req-b') },
        { key: 'c', holdRowId: c, costMicros: 5n * M, usageRow: usageRow(ws, 'req-c') },
      ],
      { checkApplied: true },
    );
    expect(outcomes.map((o) => [o.applied, o.charged, o.kept])).toEqual([
      [true, 12, 12],
      [true, 13, 0],
      [false, 0, 0],
    ]);
    const records = (await db.query(
      `SELECT id, request_id, charged_millicents, tools_used, total_cost_millicents, created_at FROM usage_records WHERE workspace_id = $1 ORDER BY request_id`,
      [ws],
    )) as { id: string; request_id: string; charged_millicents: string; tools_used: string[]; total_cost_millicents: string; created_at: Date }[];
    expect(records.map((r) => [r.request_id, Number(r.charged_millicents), r.tools_used, r.total_cost_millicents])).toEqual([
      ['req-a', 12, ['web_search'], '12.500000'],
      ['req-b', 0, ['web_search'], '12.500000'],
    ]);
    expect(records.every((r) => r.id && r.created_at instanceof Date)).toBe(true);
    // The daily totals' trigger saw them, in the same statement.
    const [totals] = (await db.query(`SELECT requests, tokens FROM usage_daily_totals WHERE workspace_id = $1`, [ws])) as {
      requests: string;
      tokens: string;
    }[];
    expect(totals).toEqual({ requests: '2', tokens: '24' });
  });

  it('keeps who answered and the attempts from the usage row, and 0 attempts for a row that names none (the previous version)', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [a, b] = [await hold(ws, 50n), await hold(ws, 50n)];
    await settle(ws, [
      { key: 'routed', holdRowId: a, costMicros: 5n * M, usageRow: usageRow(ws, 'req-routed', { provider: 'openai', deployment: 'openai-b', attempts: 3 }) },
      { key: 'old', holdRowId: b, costMicros: 5n * M, usageRow: usageRow(ws, 'req-old') },
    ]);
    expect(
      await db.query(`SELECT request_id, provider, deployment, attempts FROM usage_records WHERE workspace_id = $1 ORDER BY request_id`, [ws]),
    ).toEqual([
      { request_id: 'req-old', provider: null, deployment: null, attempts: 0 },
      { request_id: 'req-routed', provider: 'openai', deployment: 'openai-b', attempts: 3 },
    ]);
    expect(
      await db.query(`SELECT provider, requests::int FROM usage_daily_totals WHERE workspace_id = $1 ORDER BY provider`, [ws]),
    ).toEqual([
      { provider: '', requests: 1 },
      { provider: 'openai', requests: 1 },
    ]);
  });

  it('says which orders left their wallet below its auto top-up threshold', async () => {
    const ws = await wallet(1_000n, 200n, 0n);
    await db.query(
      `INSERT INTO auto_topup_settings (workspace_id, enabled, threshold_millicents, amount_millicents) VALUES ($1, true, 950, 10000)`,
      [ws],
    );
    const [h1, h2] = [await hold(ws, 100n), await hold(ws, 100n)];
    const outcomes = await settle(ws, [
      { holdRowId: h1, costMicros: 20n * M },
      { holdRowId: h2, costMicros: 40n * M },
    ]);
    // The wallet ends at 940: below 950, for every order of that wallet.
    expect(outcomes.map((o) => [o.balanceAfter, o.belowThreshold])).toEqual([
      [980, true],
      [940, true],
    ]);
  });

  it('inserts records with every column of usage_records: UsageService.row names each one the function does not set', async () => {
    const columns = (await db.query(`SELECT column_name FROM information_schema.columns WHERE table_name = 'usage_records'`)) as {
      column_name: string;
    }[];
    const named = Object.keys(t.app.get(UsageService).row({}));
    // A column missing from the entity would be inserted as null, not its default.
    expect([...named, 'id', 'created_at'].sort()).toEqual(columns.map((column) => column.column_name).sort());
  });

  it('with optional records, leaves out a record the database refuses as data, commits the charge, and says why', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [bad, overflow] = [await hold(ws, 50n), await hold(ws, 50n)];
    const refused = { key: 'bad', holdRowId: bad, costMicros: 12n * M, usageRow: usageRow(ws, 'req-bad', { status: 'bogus' }) };
    // Not optional: the whole statement fails, and nothing is charged.
    await expect(settle(ws, [refused])).rejects.toMatchObject({ code: '23514' });
    expect(await walletRow(ws)).toEqual({ balance: 1_000n, reserved: 100n, carry: 0n });

    const [outcome] = await settle(ws, [refused], { recordsOptional: true, checkApplied: true });
    expect(outcome).toMatchObject({ applied: true, charged: 12 });
    expect(outcome.recordError).toMatch(/^23514: .*usage_records_status_check/);
    const [second] = await settle(
      ws,
      [{ key: 'overflow', holdRowId: overflow, costMicros: 3n * M, usageRow: usageRow(ws, 'req-overflow', { input_tokens: 'many' }) }],
      { recordsOptional: true, checkApplied: true },
    );
    expect(second).toMatchObject({ applied: true, charged: 3 });
    expect(second.recordError).toMatch(/^22P02: /);
    expect(await walletRow(ws)).toEqual({ balance: 985n, reserved: 0n, carry: 0n });
    expect((await ledger(ws)).map((row) => row.key)).toEqual(['usage:bad', 'usage:overflow']);
    expect(await usageRecords(ws)).toEqual([]);
  });

  it('with optional records, still fails whole when the record fails for any other reason (a lock timeout), writing nothing', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [first, second] = [await hold(ws, 50n), await hold(ws, 50n)];
    // Today's totals row of the workspace and model exists once a record is in.
    await settle(ws, [{ key: 'first', holdRowId: first, costMicros: 10n * M, usageRow: usageRow(ws, 'req-first') }]);
    const blocker = db.createQueryRunner();
    const caller = db.createQueryRunner();
    try {
      await blocker.startTransaction();
      await blocker.query(`UPDATE usage_daily_totals SET requests = requests WHERE workspace_id = $1`, [ws]);
      await caller.query(`SET lock_timeout = '200ms'`);
      await expect(
        settle(ws, [{ key: 'second', holdRowId: second, costMicros: 10n * M, usageRow: usageRow(ws, 'req-second') }], {
          recordsOptional: true,
          checkApplied: true,
          runner: caller,
        }),
      ).rejects.toMatchObject({ code: '55P03' });
    } finally {
      await blocker.rollbackTransaction();
      await blocker.release();
      await caller.query(`RESET lock_timeout`);
      await caller.release();
    }
    expect(await walletRow(ws)).toEqual({ balance: 990n, reserved: 50n, carry: 0n });
    expect((await usageRecords(ws)).map((record) => record.request_id)).toEqual(['req-first']);
  });

  it('on a retry, skips an order charged nothing whose usage record is in (no ledger row tells it): the carry does not move twice', async () => {
    const ws = await wallet(1_000n, 50n, 0n);
    const h = await hold(ws, 50n);
    const order = { key: 'tiny', holdRowId: h, costMicros: 400_000n, usageRow: usageRow(ws, 'req-tiny') };
    const [first] = await settle(ws, [order]);
    expect(first).toMatchObject({ applied: true, charged: 0 });
    const [again] = await settle(ws, [order], { checkApplied: true });
    expect(again).toMatchObject({ applied: false, charged: 0 });
    expect(await walletRow(ws)).toEqual({ balance: 1_000n, reserved: 0n, carry: 400_000n });
    expect(await usageRecords(ws)).toEqual([{ request_id: 'req-tiny', charged_millicents: '0' }]);
  });

  it("on a retry, charges an order whose request id another request's usage record has (a client's X-Request-Id sent twice)", async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [first, second] = [await hold(ws, 50n), await hold(ws, 50n)];
    await settle(ws, [{ key: 'first', holdRowId: first, costMicros: 20n * M, usageRow: usageRow(ws, 'trace-1') }]);
    const [again] = await settle(ws, [{ key: 'second', holdRowId: second, costMicros: 30n * M, usageRow: usageRow(ws, 'trace-1') }], {
      checkApplied: true,
    });
    expect(again).toMatchObject({ applied: true, charged: 30 });
    expect(await walletRow(ws)).toEqual({ balance: 950n, reserved: 0n, carry: 0n });
    expect((await usageRecords(ws)).map((record) => `${record.request_id}: ${record.charged_millicents}`).sort()).toEqual(['trace-1: 20', 'trace-1: 30']);
  });

  it('on a retry, finds the record a first attempt wrote in the day before (another partition): no second record', async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [first, second] = [await hold(ws, 50n), await hold(ws, 50n)];
    const midnight = Date.parse(new Date().toISOString().slice(0, 10));
    // The first attempt committed at 23:59:59.999 unseen; the request settles again after midnight.
    const before = usageRow(ws, 'req-midnight', { created_at: new Date(midnight - 1).toISOString() });
    const after = usageRow(ws, 'req-midnight', { created_at: new Date(midnight + 1).toISOString() });
    await settle(ws, [{ key: 'midnight', holdRowId: first, costMicros: 0n, usageRow: before }]);
    const [again] = await settle(ws, [{ key: 'midnight', holdRowId: second, costMicros: 0n, usageRow: after }], { checkApplied: true });
    expect(again).toMatchObject({ applied: false, charged: 0 });
    const rows = (await db.query(
      `SELECT tableoid::regclass::text AS partition, created_at FROM usage_records WHERE workspace_id = $1 AND request_id = 'req-midnight'`,
      [ws],
    )) as { partition: string; created_at: Date }[];
    expect(rows).toEqual([{ partition: `usage_records_p${new Date(midnight - 1).toISOString().slice(0, 10).replace(/-/g, '')}`, created_at: new Date(midnight - 1) }]);
  });

  it("gives a usage record an id derived from its settlement's key, so that it cannot be inserted twice", async () => {
    const ws = await wallet(1_000n, 100n, 0n);
    const [first, second] = [await hold(ws, 50n), await hold(ws, 50n)];
    // Stamped once by the settlement writer, and written again with the same time (a journal kept it).
    const row = usageRow(ws, 'req-once', { created_at: new Date().toISOString() });
    await settle(ws, [{ key: 'once', holdRowId: first, costMicros: 0n, usageRow: row }]);
    const [{ id }] = (await db.query(`SELECT id FROM usage_records WHERE workspace_id = $1`, [ws])) as { id: string }[];
    // The key's MD5 with the version (8) and variant digits set: a UUID every check accepts (cursors are checked with isUUID).
    const md5 = createHash('md5').update(`usage:${run}.once`).digest('hex');
    const variant = ((parseInt(md5[16], 16) & 3) | 8).toString(16);
    const expected = `${md5.slice(0, 8)}-${md5.slice(8, 12)}-8${md5.slice(13, 16)}-${variant}${md5.slice(17, 20)}-${md5.slice(20)}`;
    expect(id).toBe(expected);
    expect(isUUID(id, 'all')).toBe(true);
    // Without the retry check, a charge of 0 writes no ledger row: the record's key is what refuses it.
    await expect(settle(ws, [{ key: 'once', holdRowId: second, costMicros: 0n, usageRow: row }])).rejects.toMatchObject({
      code: '23505',
    });
  });

  it('on a retry, says what a leased order already applied took out of its lease, and leaves the lease as it is', async () => {
    const ws = await wallet(10_000n, 5_000n, 0n);
    const lease = await hold(ws, 5_000n, 'lease');
    const order = { key: 'leased', holdRowId: lease, leased: true, costMicros: 700n * M };
    await settle(ws, [order]);
    const [again] = await settle(ws, [order], { checkApplied: true });
    expect(again).toMatchObject({ applied: false, charged: 0, releasedFromLease: 700 });
    expect(await holds(ws)).toEqual(new Map([[lease, 4_300n]]));
    expect(await walletRow(ws)).toEqual({ balance: 9_300n, reserved: 4_300n, carry: 0n });
  });

  it('charges a request whose hold was swept meanwhile from what its wallet has free, and no more', async () => {
    const ws = await wallet(1_000n, 900n, 0n);
    const [swept, other] = [await hold(ws, 100n), await hold(ws, 800n)];
    // As the sweeper does: the hold goes, and reserved with it.
    await db.query(`DELETE FROM wallet_holds WHERE id = $1`, [swept]);
    await db.query(`UPDATE wallets SET reserved_millicents = reserved_millicents - 100 WHERE workspace_id = $1`, [ws]);
    const [outcome] = await settle(ws, [{ holdRowId: swept, costMicros: 250n * M }]);
    // 1,000 less the 800 another request holds: 200 free, so 200 charged and 50 written off.
    expect(outcome).toMatchObject({ charged: 200, writtenOff: 50, balanceAfter: 800 });
    expect(await walletRow(ws)).toEqual({ balance: 800n, reserved: 800n, carry: 0n });
    expect(await holds(ws)).toEqual(new Map([[other, 800n]]));
  });

  it('sets synchronous_commit for the transaction it runs in only', async () => {
    const ws = await wallet(1_000n, 50n, 0n);
    const runner = db.createQueryRunner();
    try {
      await runner.startTransaction();
      await settle(ws, [{ holdRowId: await hold(ws, 50n), costMicros: M }], { synchronousCommit: 'off', runner });
      expect(await runner.query(`SHOW synchronous_commit`)).toEqual([{ synchronous_commit: 'off' }]);
      await runner.commitTransaction();
      expect(await runner.query(`SHOW synchronous_commit`)).toEqual([{ synchronous_commit: 'on' }]);
    } finally {
      await runner.release();
    }
  });

  it('applies over either earlier version of the function: as 1764002200000 first made it (down, then up), and over itself', async () => {
    const signatures = async () =>
      (
        (await db.query(
          `SELECT p.proname || '(' || pg_get_function_identity_arguments(p.oid) || ')' AS signature
             FROM pg_proc p WHERE p.proname IN ('settle_charges', 'insert_usage_records', 'usage_record_id') ORDER BY 1`,
        )) as { signature: string }[]
      ).map((row) => row.signature.replace(/p_\w+ /g, ''));
    const now = await signatures();
    expect(now).toEqual([
      'insert_usage_records(jsonb, text[], bigint[], boolean[])',
      'settle_charges(text[], uuid[], uuid[], boolean[], bigint[], boolean[], text[], boolean, text, jsonb)',
      'settle_charges(text[], uuid[], uuid[], boolean[], bigint[], boolean[], text[], boolean, text, jsonb, boolean)',
      'usage_record_id(text)',
    ]);
    const runner = db.createQueryRunner();
    try {
      const migration = new SettlementRecordIds1764002300000();
      await migration.down(runner);
      expect(await signatures()).toEqual(['settle_charges(text[], uuid[], uuid[], boolean[], bigint[], boolean[], text[], boolean, text, jsonb)']);
      await migration.up(runner);
      await migration.up(runner);
      // Its insert_usage_records() is older than the one a later migration (UsageAnswerer) made: the current one back.
      await runner.query(readFileSync(path.join(__dirname, '../src/billing/sql/insert_usage_records.sql'), 'utf8'));
    } finally {
      await runner.release();
    }
    expect(await signatures()).toEqual(now);
    const ws = await wallet(1_000n, 50n, 0n);
    const [outcome] = await settle(ws, [{ holdRowId: await hold(ws, 50n), costMicros: 20n * M, usageRow: usageRow(ws, 'req-after') }]);
    expect(outcome).toMatchObject({ applied: true, charged: 20 });
    expect(await usageRecords(ws)).toEqual([{ request_id: 'req-after', charged_millicents: '20' }]);
  });

  it("settles as before when called as the previous version called it (ten arguments): a replica not yet updated during a rolling update", async () => {
    const ws = await wallet(1_000n, 50n, 0n);
    const h = await hold(ws, 50n);
    const rows = (await db.query(`SELECT * FROM settle_charges($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, [
      [`${run}.old`],
      [ws],
      [h],
      [false],
      [(20n * M).toString()],
      [false],
      ['gpt-4o'],
      false,
      'on',
      JSON.stringify([usageRow(ws, 'req-old')]),
    ])) as Record<string, unknown>[];
    expect(rows).toEqual([
      {
        charged_millicents: '20',
        kept_millicents: '20',
        written_off_millicents: '0',
        balance_after_millicents: '980',
        applied: true,
        released_from_lease_millicents: '0',
        below_threshold: false,
      },
    ]);
    expect(await walletRow(ws)).toEqual({ balance: 980n, reserved: 0n, carry: 0n });
    expect(await usageRecords(ws)).toEqual([{ request_id: 'req-old', charged_millicents: '20' }]);
  });

  it('keeps the money invariants for any batch over several wallets: balance = start + ledger, reserved = live holds and leases, never below zero', async () => {
    const order = fc.record({
      wallet: fc.integer({ min: 0, max: 2 }),
      costMicros: fc.bigInt({ min: 0n, max: 5_000n * M }),
      leased: fc.boolean(),
      refund: fc.boolean(),
      held: fc.integer({ min: 1, max: 3_000 }),
    });
    const start = fc.record({ free: fc.integer({ min: 0, max: 20_000 }), carry: fc.integer({ min: 0, max: 999_999 }) });
    await fc.assert(
      fc.asyncProperty(fc.array(start, { minLength: 3, maxLength: 3 }), fc.array(order, { maxLength: 40 }), async (starts, orders) => {
        const wallets = await Promise.all(
          starts.map(async ({ free, carry }, index) => {
            const mine = orders.filter((o) => o.wallet === index);
            const leaseAmount = mine.filter((o) => o.leased).reduce((sum, o) => sum + BigInt(o.held), 0n);
            const reserved = mine.reduce((sum, o) => sum + BigInt(o.held), 0n);
            const balance = BigInt(free) + reserved;
            const id = await wallet(balance, reserved, BigInt(carry));
            return { id, balance, lease: leaseAmount > 0n ? await hold(id, leaseAmount, 'lease') : null };
          }),
        );
        const batch: Order[] = [];
        for (const o of orders) {
          const { id, lease } = wallets[o.wallet];
          batch.push({ holdRowId: o.leased ? lease! : await hold(id, BigInt(o.held)), leased: o.leased, costMicros: o.costMicros, refund: o.refund });
        }
        const outcomes = await settle(
          orders.map((o) => wallets[o.wallet].id),
          batch,
        );
        for (const { id, balance, lease } of wallets) {
          const after = await walletRow(id);
          const rows = await ledger(id);
          expect(after.balance).toBe(balance + rows.reduce((sum, row) => sum + row.amount, 0n));
          expect(after.balance >= 0n).toBe(true);
          // Every request's own hold is released; what is left reserved is the lease.
          const left = await holds(id);
          expect([...left.keys()]).toEqual(lease ? [lease] : []);
          expect(after.reserved).toBe(lease ? left.get(lease)! : 0n);
          expect(after.balance >= after.reserved).toBe(true);
          expect(after.carry >= 0n && after.carry < M).toBe(true);
          // Each ledger row's balance is the previous one plus its amount, in settlement order.
          let running = balance;
          for (const row of rows) {
            running += row.amount;
            expect(row.balanceAfter).toBe(running);
          }
        }
        expect(outcomes.map((o) => o.kept)).toEqual(outcomes.map((o, i) => (orders[i].refund ? 0 : o.charged)));
      }),
      { numRuns: 60 },
    );
  });
});
