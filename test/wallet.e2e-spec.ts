import { DataSource } from 'typeorm';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface Transaction {
  id: string;
  type: string;
  amountMillicents: number;
  balanceAfterMillicents: number;
  description: string;
  created_at: string;
}
interface TransactionPage {
  data: Transaction[];
  has_more: boolean;
  next_cursor: string | null;
}

describe('wallet', () => {
  let t: TestApp;
  let wallet: WalletService;

  beforeAll(async () => {
    t = await startTestApp();
    wallet = t.app.get(WalletService);
  });
  afterAll(() => t.close());

  const topup = (workspace: TestWorkspace, amount: number, key = `test:${Math.random()}`) =>
    wallet.credit({ workspaceId: workspace.id, amountMillicents: amount, type: 'topup', idempotencyKey: key });

  it('shows the balance in camelCase without a data wrapper', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 12_345 });
    expect(await workspace.client.get('/wallet')).toEqual({
      balanceMillicents: 12_345,
      reservedMillicents: 0,
      availableMillicents: 12_345,
    });
  });

  it('lists the ledger newest first with balance_after, and pages through it with a cursor', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    for (let i = 1; i <= 4; i++) await topup(workspace, i * 100);
    await wallet.credit({
      workspaceId: workspace.id,
      amountMillicents: -50,
      type: 'adjustment',
      description: 'goodwill reversal',
      idempotencyKey: `adj:${workspace.id}`,
    });

    const first = (await workspace.client.get('/wallet/transactions', { query: { limit: 2 } })) as TransactionPage;
    expect(first.data.map((row) => row.amountMillicents)).toEqual([-50, 400]);
    expect(first.data[0]).toEqual({
      id: expect.any(String),
      type: 'adjustment',
      amountMillicents: -50,
      balanceAfterMillicents: 1_950,
      description: 'goodwill reversal',
      created_at: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/),
    });
    expect(first.has_more).toBe(true);

    const rest: Transaction[] = [];
    let cursor = first.next_cursor;
    while (cursor) {
      const page = (await workspace.client.get('/wallet/transactions', {
        query: { limit: 2, starting_after: cursor },
      })) as TransactionPage;
      rest.push(...page.data);
      cursor = page.next_cursor;
    }
    const all = [...first.data, ...rest];
    expect(all.map((row) => row.amountMillicents)).toEqual([-50, 400, 300, 200, 100, 1_000]);
    // Each row's balance_after is the running sum of the ledger, oldest first.
    const oldestFirst = [...all].reverse();
    let running = 0;
    for (const row of oldestFirst) {
      running += row.amountMillicents;
      expect(row.balanceAfterMillicents).toBe(running);
    }
    expect(((await workspace.client.get('/wallet')) as { balanceMillicents: number }).balanceMillicents).toBe(running);
  });

  it('pages through rows written in the same millisecond without skipping any', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 0 });
    // One statement: every row gets the same created_at, down to the microsecond.
    await t.app.get(DataSource).query(
      `INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, idempotency_key, created_at)
       SELECT $1::uuid, 'adjustment', 0, 0, 'same-ms-' || n || '-' || $1::text, now() FROM generate_series(1, 7) n`,
      [workspace.id],
    );
    const seen: string[] = [];
    let cursor: string | null | undefined;
    do {
      const page = (await workspace.client.get('/wallet/transactions', {
        query: { limit: 2, ...(cursor ? { starting_after: cursor } : {}) },
      })) as TransactionPage;
      seen.push(...page.data.map((row) => row.id));
      cursor = page.next_cursor;
    } while (cursor);
    expect(new Set(seen).size).toBe(7);
  });

  it('filters the ledger by type', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 500 });
    await wallet.credit({ workspaceId: workspace.id, amountMillicents: 7, type: 'adjustment', idempotencyKey: `a:${workspace.id}` });
    const page = (await workspace.client.get('/wallet/transactions', { query: { type: 'adjustment' } })) as TransactionPage;
    expect(page.data.map((row) => row.type)).toEqual(['adjustment']);
  });

  it('refuses a bad cursor or type with 400 naming the parameter', async () => {
    const workspace = await t.createWorkspace();
    const other = await t.createWorkspace();
    const foreign = (await other.client.get('/wallet/transactions')) as TransactionPage;
    const cases: Array<[Record<string, string>, string]> = [
      [{ starting_after: 'nope' }, 'starting_after'],
      [{ starting_after: foreign.data[0].id }, 'starting_after'],
      [{ type: 'gift' }, 'type'],
      [{ limit: '101' }, 'limit'],
    ];
    for (const [query, param] of cases) {
      const error = (await workspace.client.get('/wallet/transactions', { query }).catch((e: unknown) => e)) as {
        status: number;
        error: { param: string };
      };
      expect(error.status).toBe(400);
      expect(error.error.param).toBe(param);
    }
  });

  it('credits an idempotency key once, even when the replays race', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 0 });
    const results = await Promise.all(Array.from({ length: 20 }, () => topup(workspace, 250, `payment:${workspace.id}`)));
    expect(new Set(results.map((row) => row.id)).size).toBe(1);
    expect(await wallet.balance(workspace.id)).toMatchObject({ balanceMillicents: 250 });
    const [{ count }] = await t.app
      .get(DataSource)
      .query('SELECT count(*)::int AS count FROM wallet_transactions WHERE workspace_id = $1', [workspace.id]);
    expect(count).toBe(1);
  });

  it('refuses a used idempotency key for a different movement of money, even in another workspace', async () => {
    const a = await t.createWorkspace({ balanceMillicents: 0 });
    const b = await t.createWorkspace({ balanceMillicents: 0 });
    await topup(a, 500, `shared:${a.id}`);
    await expect(topup(b, 500, `shared:${a.id}`)).rejects.toMatchObject({ type: 'conflict', code: 'idempotency_key_reused' });
    await expect(topup(a, 900, `shared:${a.id}`)).rejects.toMatchObject({ type: 'conflict' });
    expect((await wallet.balance(b.id)).balanceMillicents).toBe(0);
    expect((await wallet.balance(a.id)).balanceMillicents).toBe(500);
  });

  it('keeps balance equal to the sum of the ledger under concurrent credits', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 0 });
    await Promise.all(Array.from({ length: 30 }, (_, i) => topup(workspace, i + 1)));
    const [{ sum }] = await t.app
      .get(DataSource)
      .query('SELECT sum(amount_millicents)::bigint AS sum FROM wallet_transactions WHERE workspace_id = $1', [
        workspace.id,
      ]);
    expect(Number(sum)).toBe((30 * 31) / 2);
    expect((await wallet.balance(workspace.id)).balanceMillicents).toBe(Number(sum));
  });

  it('refuses an adjustment that would take the balance below what is reserved', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    // A request in flight holds 600.
    expect(await wallet.hold(workspace.id, `req_${workspace.id}`, 600, 60_000)).not.toBeNull();
    await expect(
      wallet.credit({ workspaceId: workspace.id, amountMillicents: -500, type: 'adjustment', idempotencyKey: `x:${workspace.id}` }),
    ).rejects.toMatchObject({ type: 'bad_request', param: 'amount' });
    expect(await wallet.balance(workspace.id)).toEqual({
      balanceMillicents: 1_000,
      reservedMillicents: 600,
      availableMillicents: 400,
    });
  });

  it('refuses amounts that are not whole millicents, and negative top-ups', async () => {
    const workspace = await t.createWorkspace();
    for (const amount of [0, 1.5, Number.MAX_SAFE_INTEGER + 2]) {
      await expect(topup(workspace, amount)).rejects.toMatchObject({ type: 'bad_request', param: 'amount' });
    }
    await expect(topup(workspace, -10)).rejects.toMatchObject({ type: 'bad_request' });
  });

  it('shows each workspace only its own wallet', async () => {
    const a = await t.createWorkspace({ balanceMillicents: 111 });
    const b = await t.createWorkspace({ balanceMillicents: 222 });
    expect(((await a.client.get('/wallet')) as { balanceMillicents: number }).balanceMillicents).toBe(111);
    expect(((await b.client.get('/wallet')) as { balanceMillicents: number }).balanceMillicents).toBe(222);
  });
});
