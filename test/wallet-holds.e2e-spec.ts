import { DataSource } from 'typeorm';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/** The hold primitives under the races and edge cases a long or failing request meets. */
describe('wallet holds', () => {
  let t: TestApp;
  let wallet: WalletService;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp();
    wallet = t.app.get(WalletService);
    db = t.app.get(DataSource);
  });
  afterAll(() => t.close());

  const heldSum = async (workspace: TestWorkspace) =>
    Number(
      (await db.query('SELECT coalesce(sum(amount_millicents), 0) AS sum FROM wallet_holds WHERE workspace_id = $1', [workspace.id]))[0].sum,
    );

  it('extends a live hold, and refuses when the wallet cannot cover the extra', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    const hold = (await wallet.hold(workspace.id, 'req', 300, 60_000))!;
    expect(await wallet.extendHold(hold, 500, 60_000)).toBe(true);
    expect(hold.amountMillicents).toBe(800);
    expect(await wallet.extendHold(hold, 300, 60_000)).toBe(false);
    expect(await wallet.balance(workspace.id)).toMatchObject({ reservedMillicents: 800 });
    expect(await heldSum(workspace)).toBe(800);
  });

  it('leaves reserved equal to the live holds when the sweeper takes a hold while it is being extended', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
    const hold = (await wallet.hold(workspace.id, 'req', 100, 60_000))!;
    await db.query(`UPDATE wallet_holds SET expires_at = now() - interval '1 second' WHERE id = $1`, [hold.id]);

    // The sweeper's work, in a transaction kept open while extendHold starts.
    const sweeper = db.createQueryRunner();
    await sweeper.connect();
    await sweeper.startTransaction();
    await sweeper.query(
      `WITH expired AS (DELETE FROM wallet_holds WHERE id = $1 RETURNING workspace_id, amount_millicents)
       UPDATE wallets w SET reserved_millicents = w.reserved_millicents - e.amount_millicents FROM expired e WHERE w.workspace_id = e.workspace_id`,
      [hold.id],
    );
    const extending = wallet.extendHold(hold, 500, 60_000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    await sweeper.commitTransaction();
    await sweeper.release();

    expect(await extending).toBe(false);
    expect((await wallet.balance(workspace.id)).reservedMillicents).toBe(await heldSum(workspace));
    expect(await wallet.balance(workspace.id)).toEqual({ balanceMillicents: 10_000, reservedMillicents: 0, availableMillicents: 10_000 });
  });

  it('keeps a hold alive while its request runs, so the sweeper leaves it', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    const hold = (await wallet.hold(workspace.id, 'req', 400, 60_000))!;
    await db.query(`UPDATE wallet_holds SET expires_at = now() + interval '1 second' WHERE id = $1`, [hold.id]);
    await wallet.keepHoldAlive(hold, 60_000);
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    await wallet.releaseExpiredHolds();
    expect(await heldSum(workspace)).toBe(400);
  });

  it('refunds a failed request exactly, carry included, even when its cost was below a millicent', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
    const carry = async () => Number((await db.query('SELECT carry_millicents FROM wallets WHERE workspace_id = $1', [workspace.id]))[0].carry_millicents);
    for (const costMicros of [400_000n, 2_700_000n]) {
      const hold = (await wallet.hold(workspace.id, 'req', 10, 60_000))!;
      await wallet.settle(hold, { workspaceId: workspace.id, costMicros, description: 'failed' }, undefined, { refund: true });
      expect(await carry()).toBe(0);
      expect(await wallet.balance(workspace.id)).toEqual({ balanceMillicents: 1_000, reservedMillicents: 0, availableMillicents: 1_000 });
    }
    const ledger = await db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at, type DESC', [workspace.id]);
    expect(ledger).toEqual([
      { type: 'topup', amount: 1_000 },
      { type: 'usage', amount: -2 },
      { type: 'refund', amount: 2 },
    ]);
  });
});

/** SETTLEMENT_SYNCHRONOUS_COMMIT reaches the settlement's own transaction, and no other. */
describe('the settlement transaction commit mode', () => {
  for (const mode of ['off', 'on'] as const) {
    it(`runs a settlement with synchronous_commit ${mode} when SETTLEMENT_SYNCHRONOUS_COMMIT=${mode}`, async () => {
      const t = await startTestApp({ config: { settlementSynchronousCommit: mode } });
      try {
        const wallet = t.app.get(WalletService);
        const workspace = await t.createWorkspace({ balanceMillicents: 1_000 });
        const hold = (await wallet.hold(workspace.id, 'req', 300, 60_000))!;
        let inSettlement: string | undefined;
        await wallet.settle(hold, { workspaceId: workspace.id, costMicros: 100_000_000n, description: 'mode' }, async (manager) => {
          [{ synchronous_commit: inSettlement }] = await manager.query('SHOW synchronous_commit');
        });
        expect(inSettlement).toBe(mode);
        // Transaction-local: the connection goes back to the pool with the server's setting.
        const [{ synchronous_commit: afterwards }] = await t.app.get(DataSource).query('SHOW synchronous_commit');
        expect(afterwards).toBe('on');
        expect(await wallet.balance(workspace.id)).toMatchObject({ balanceMillicents: 900, reservedMillicents: 0 });
      } finally {
        await t.close();
      }
    });
  }
});
