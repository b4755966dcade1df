import { setTimeout as sleep } from 'node:timers/promises';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { WalletLeases } from '../src/wallet/wallet-leases';
import { WalletService } from '../src/wallet/wallet.service';
import { startTestApp, TestApp } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * A lease retired because it went unconfirmed (a database blip) still has requests in flight
 * that settle against its row: the heartbeat keeps pushing that row's expiry out until they
 * end, so the sweeper cannot take it from under them. And what the heartbeat writes as held
 * is never below zero.
 */
describe('a retired lease with requests in flight', () => {
  let t: TestApp;
  let db: DataSource;
  let leases: WalletLeases;
  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get<DataSource>(getDataSourceToken());
    leases = t.app.get(WalletLeases);
  });
  afterAll(async () => {
    await t?.close();
  });

  // The heartbeat, run now instead of at its interval.
  const heartbeat = () => (leases as unknown as { keepAlive(): Promise<void> }).keepAlive();
  const row = async (id: string) =>
    ((await db.query(`SELECT held_millicents::int AS held, expires_at > now() + interval '5 seconds' AS far FROM wallet_holds WHERE id = $1`, [id])) as {
      held: number;
      far: boolean;
    }[])[0];

  it('keeps its row alive past the sweeper until its requests end, then gives it back', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const old = await leases.admit(workspace.id, 1_000);
    expect(old).not.toBeNull();
    // Unconfirmed for more than half its life (the database was away): the next request retires it and takes a new lease.
    old!.confirmedAt -= 120_000;
    const fresh = await leases.admit(workspace.id, 1_000);
    expect(fresh!.id).not.toBe(old!.id);
    expect(old!.retired).toBe(true);
    // Its row was last extended long ago: it expires in a moment.
    await db.query(`UPDATE wallet_holds SET expires_at = now() + interval '500 milliseconds' WHERE id = $1`, [old!.id]);

    await heartbeat();
    expect((await row(old!.id))?.far).toBe(true);
    await sleep(1_000);
    await t.app.get(WalletService).releaseExpiredHolds();
    expect(await row(old!.id)).toBeDefined();

    // Its request ends: the row goes back, and the wallet is whole.
    await leases.release(old!, 1_000);
    expect(await row(old!.id)).toBeUndefined();
    await leases.release(fresh!, 1_000);
    await leases.returnSpare(workspace.id);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000, reserved: 0, ledger: 1_000_000, holds: 0 });
  });

  it('extends a lease whose count went below zero, writing zero as held', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const lease = (await leases.admit(workspace.id, 1_000))!;
    lease.admitted -= 1_500; // a release counted twice must neither show as negative reserved nor fail the heartbeat
    await db.query(`UPDATE wallet_holds SET expires_at = now() + interval '500 milliseconds' WHERE id = $1`, [lease.id]);
    await heartbeat();
    expect(await row(lease.id)).toEqual({ held: 0, far: true });
    lease.admitted += 1_500;
    await leases.release(lease, 1_000);
    await leases.returnSpare(workspace.id);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000, reserved: 0, ledger: 1_000_000, holds: 0 });
  });
});
