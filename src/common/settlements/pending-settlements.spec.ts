import { Injectable, Module } from '@nestjs/common';
import { GLOBAL_MODULE_METADATA, OPTIONAL_DEPS_METADATA, PARAMTYPES_METADATA } from '@nestjs/common/constants';
import { Test } from '@nestjs/testing';
import { Billing } from '../../billing/billing';
import { UsageExplorerService } from '../../usage/usage-explorer.service';
import { UsageStatsService } from '../../usage/usage-stats.service';
import { LedgerQueryService } from '../../wallet/ledger-query.service';
import { WalletLeases } from '../../wallet/wallet-leases';
import { WalletService } from '../../wallet/wallet.service';
import { PendingSettlements, PendingSettlementsModule } from './pending-settlements';

/** A reader of balances, as the wallet's and usage's services are. */
@Injectable()
class Reader {
  constructor(readonly pending: PendingSettlements) {}
}

/** The writer's side, as BillingModule is. */
@Injectable()
class Writer {
  constructor(readonly pending: PendingSettlements) {}
}

describe('PendingSettlements', () => {
  afterEach(() => jest.useRealTimers());

  it('waits for the workspace it is asked about', async () => {
    const pending = new PendingSettlements();
    const asked: string[] = [];
    pending.waitWith(async (workspaceId) => void asked.push(workspaceId));
    await pending.written('ws-1');
    expect(asked).toEqual(['ws-1']);
  });

  it('gives up waiting after 5 s: a settlement that cannot commit does not hold reads up', async () => {
    jest.useFakeTimers();
    const pending = new PendingSettlements();
    pending.waitWith(() => new Promise<void>(() => undefined));
    let done = false;
    const read = pending.written('ws-1').then(() => (done = true));
    await jest.advanceTimersByTimeAsync(4_999);
    expect(done).toBe(false);
    await jest.advanceTimersByTimeAsync(1);
    await read;
    expect(done).toBe(true);
  });

  it('is injected without @Optional(), from a module that is not global: a wiring mistake fails the start', () => {
    expect(Reflect.getMetadata(GLOBAL_MODULE_METADATA, PendingSettlementsModule)).toBeFalsy();
    for (const user of [Billing, WalletService, WalletLeases, LedgerQueryService, UsageStatsService, UsageExplorerService]) {
      const index = (Reflect.getMetadata(PARAMTYPES_METADATA, user) as unknown[]).indexOf(PendingSettlements);
      expect({ user: user.name, injected: index >= 0 }).toEqual({ user: user.name, injected: true });
      const optional = (Reflect.getMetadata(OPTIONAL_DEPS_METADATA, user) as number[] | undefined) ?? [];
      expect({ user: user.name, optional: optional.includes(index) }).toEqual({ user: user.name, optional: false });
    }
  });

  it('fails at start in a module that reads it without importing its module', async () => {
    @Module({ providers: [Reader] })
    class Forgetful {}
    await expect(Test.createTestingModule({ imports: [Forgetful] }).compile()).rejects.toThrow(/PendingSettlements/);
  });

  it('is one instance across the modules that import it: what the writer registers, readers wait for', async () => {
    @Module({ imports: [PendingSettlementsModule], providers: [Reader], exports: [Reader] })
    class Readers {}
    @Module({ imports: [PendingSettlementsModule], providers: [Writer], exports: [Writer] })
    class Writers {}
    const app = await Test.createTestingModule({ imports: [Readers, Writers] }).compile();
    const asked: string[] = [];
    app.get(Writer).pending.waitWith(async (workspaceId) => void asked.push(workspaceId));
    await app.get(Reader).pending.written('ws-1');
    expect(asked).toEqual(['ws-1']);
  });
});
