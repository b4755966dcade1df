import fc from 'fast-check';
import { randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
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
}

/**
 * settle_charges(), the database function that settles a batch of chat requests in one
 * statement (migrations/1764002200000-SettlementFunction.ts), called as WalletService calls
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

  async function settle(workspaceId: string, orders: Order[], options: { checkApplied?: boolean } = {}): Promise<Outcome[]> {
    const keys = orders.map((order) => `${run}.${order.key ?? randomUUID()}`);
    const records = orders.some((order) => order.usageRow !== undefined) ? JSON.stringify(orders.map((order) => order.usageRow ?? null)) : null;
    const rows = (await db.query(`SELECT * FROM settle_charges($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`, [
      keys,
      orders.map(() => workspaceId),
      orders.map((order) => order.holdRowId),
      orders.map((order) => order.leased === true),
      orders.map((order) => order.costMicros.toString()),
      orders.map((order) => order.refund === true),
      orders.map((order) => order.description ?? 'gpt-4o'),
      options.checkApplied === true,
      'on',
      records,
    ])) as Record<string, string | boolean>[];
    return rows.map((row) => ({
      charged: Number(row.charged_millicents),
      kept: Number(row.kept_millicents),
      writtenOff: Number(row.written_off_millicents),
      balanceAfter: Number(row.balance_after_millicents),
      applied: row.applied as boolean,
      releasedFromLease: Number(row.released_from_lease_millicents),
      belowThreshold: row.below_threshold as boolean,
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
    const usageRow = (requestId: string) => ({
      workspace_id: ws,
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
    });
    const outcomes = await settle(
      ws,
      [
        { key: 'a', holdRowId: a, costMicros: 12_500_000n, usageRow: usageRow('req-a') },
        { key: 'b', holdRowId: b, costMicros: 12_500_000n, refund: true, usageRow: usageRow('req-b') },
        { key: 'c', holdRowId: c, costMicros: 5n * M, usageRow: usageRow('req-c') },
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

  it('keeps the money invariants for any batch: balance = start + ledger, reserved = live holds and leases, never below zero', async () => {
    const order = fc.record({
      costMicros: fc.bigInt({ min: 0n, max: 5_000n * M }),
      leased: fc.boolean(),
      refund: fc.boolean(),
      held: fc.integer({ min: 1, max: 3_000 }),
    });
    await fc.assert(
      fc.asyncProperty(fc.integer({ min: 0, max: 20_000 }), fc.integer({ min: 0, max: 999_999 }), fc.array(order, { maxLength: 20 }), async (start, carry, orders) => {
        const leaseAmount = orders.filter((o) => o.leased).reduce((sum, o) => sum + BigInt(o.held), 0n);
        const requestHeld = orders.filter((o) => !o.leased).reduce((sum, o) => sum + BigInt(o.held), 0n);
        const reserved = leaseAmount + requestHeld;
        const balance = BigInt(start) + reserved;
        const ws = await wallet(balance, reserved, BigInt(carry));
        const lease = leaseAmount > 0n ? await hold(ws, leaseAmount, 'lease') : null;
        const batch: Order[] = [];
        for (const o of orders) {
          batch.push({ holdRowId: o.leased ? lease! : await hold(ws, BigInt(o.held)), leased: o.leased, costMicros: o.costMicros, refund: o.refund });
        }
        const outcomes = await settle(ws, batch);
        const after = await walletRow(ws);
        const rows = await ledger(ws);
        expect(after.balance).toBe(balance + rows.reduce((sum, row) => sum + row.amount, 0n));
        expect(after.balance >= 0n).toBe(true);
        // Every request's own hold is released; what is left reserved is the lease.
        const left = await holds(ws);
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
        expect(outcomes.map((o) => o.kept)).toEqual(outcomes.map((o, i) => (orders[i].refund ? 0 : o.charged)));
      }),
      { numRuns: 40 },
    );
  });
});
