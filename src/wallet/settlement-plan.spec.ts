import fc from 'fast-check';
import { carryToMicros, LockedWallet, PlannedCharge, planSettlements } from './settlement-plan';

const M = 1_000_000n;

function charge(fields: Partial<PlannedCharge> & Pick<PlannedCharge, 'key' | 'holdRowId'>): PlannedCharge {
  return { workspaceId: 'ws', holdKind: 'request', costMicros: 0n, refund: false, description: 'gpt-4o', alreadyApplied: false, ...fields };
}

describe('planSettlements', () => {
  it('charges requests in order, carrying the fraction, each ledger row with the balance it left', () => {
    const wallets = new Map<string, LockedWallet>([['ws', { balance: 1_000n, reserved: 300n, carry: 0n }]]);
    const holds = new Map([
      ['h1', 100n],
      ['h2', 200n],
    ]);
    const plan = planSettlements(wallets, holds, [
      charge({ key: 'r1', holdRowId: 'h1', costMicros: 10n * M + 600_000n }),
      charge({ key: 'r2', holdRowId: 'h2', costMicros: 20n * M + 600_000n }),
    ]);
    // 10.6 -> 10 charged, 0.6 carried; 0.6 + 20.6 = 21.2 -> 21 charged, 0.2 carried.
    expect(plan.outcomes.map((o) => o.chargedMillicents)).toEqual([10, 21]);
    expect(plan.wallets.get('ws')).toEqual({ balance: 969n, reserved: 0n, carry: 200_000n });
    expect(plan.releasedHolds).toEqual(['h1', 'h2']);
    expect(plan.ledger.map((row) => [row.idempotencyKey, row.amountMillicents, row.balanceAfterMillicents])).toEqual([
      ['usage:r1', -10n, 990n],
      ['usage:r2', -21n, 969n],
    ]);
  });

  it('takes a leased request charge out of its lease (and so out of reserved), leaving the rest leased', () => {
    const wallets = new Map<string, LockedWallet>([['ws', { balance: 10_000n, reserved: 5_000n, carry: 0n }]]);
    const plan = planSettlements(wallets, new Map([['lease', 5_000n]]), [
      charge({ key: 'r1', holdRowId: 'lease', holdKind: 'lease', costMicros: 700n * M }),
      charge({ key: 'r2', holdRowId: 'lease', holdKind: 'lease', costMicros: 300n * M }),
    ]);
    expect(plan.wallets.get('ws')).toEqual({ balance: 9_000n, reserved: 4_000n, carry: 0n });
    expect(plan.leases.get('lease')).toBe(4_000n);
    expect(plan.releasedHolds).toEqual([]);
    expect(plan.outcomes.map((o) => o.releasedFromLeaseMillicents)).toEqual([700, 300]);
  });

  it('writes off what the wallet cannot cover, never taking what other requests hold', () => {
    const wallets = new Map<string, LockedWallet>([['ws', { balance: 500n, reserved: 500n, carry: 400_000n }]]);
    const plan = planSettlements(wallets, new Map([['mine', 100n], ['other', 400n]]), [
      charge({ key: 'r1', holdRowId: 'mine', costMicros: 250n * M }),
    ]);
    expect(plan.outcomes[0]).toMatchObject({ chargedMillicents: 100, writtenOffMillicents: 150, balanceAfterMillicents: 400 });
    // Written off: the carry is dropped with it.
    expect(plan.wallets.get('ws')).toEqual({ balance: 400n, reserved: 400n, carry: 0n });
  });

  it('refunds a failed request in the same plan and puts the carry back', () => {
    const wallets = new Map<string, LockedWallet>([['ws', { balance: 1_000n, reserved: 50n, carry: 300_000n }]]);
    const plan = planSettlements(wallets, new Map([['h', 50n]]), [charge({ key: 'r1', holdRowId: 'h', costMicros: 40n * M, refund: true })]);
    expect(plan.wallets.get('ws')).toEqual({ balance: 1_000n, reserved: 0n, carry: 300_000n });
    expect(plan.ledger.map((row) => [row.type, row.amountMillicents, row.balanceAfterMillicents, row.idempotencyKey])).toEqual([
      ['usage', -40n, 960n, 'usage:r1'],
      ['refund', 40n, 1_000n, 'refund:r1'],
    ]);
  });

  it('writes nothing for a settlement already applied', () => {
    const wallets = new Map<string, LockedWallet>([['ws', { balance: 1_000n, reserved: 0n, carry: 0n }]]);
    const plan = planSettlements(wallets, new Map(), [charge({ key: 'r1', holdRowId: 'h', costMicros: 40n * M, alreadyApplied: true })]);
    expect(plan.outcomes[0]).toMatchObject({ applied: false, chargedMillicents: 0 });
    expect(plan.ledger).toEqual([]);
    expect(plan.wallets.get('ws')!.balance).toBe(1_000n);
  });

  it('keeps the money invariants for any batch: balance = start + ledger, reserved = live holds and leases, never below zero', () => {
    const order = fc.record({
      costMicros: fc.bigInt({ min: 0n, max: 5_000n * M }),
      leased: fc.boolean(),
      refund: fc.boolean(),
      held: fc.integer({ min: 0, max: 3_000 }),
    });
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 20_000 }), fc.integer({ min: 0, max: 999_999 }), fc.array(order, { maxLength: 30 }), (start, carry, orders) => {
        const holds = new Map<string, bigint>();
        let leaseAmount = 0n;
        orders.forEach((o, i) => {
          if (o.leased) leaseAmount += BigInt(o.held);
          else holds.set(`h${i}`, BigInt(o.held));
        });
        if (leaseAmount > 0n) holds.set('lease', leaseAmount);
        const reserved = [...holds.values()].reduce((a, b) => a + b, 0n);
        const balance = BigInt(start) + reserved;
        const wallets = new Map<string, LockedWallet>([['ws', { balance, reserved, carry: BigInt(carry) }]]);
        const plan = planSettlements(
          wallets,
          holds,
          orders.map((o, i) =>
            charge({ key: `r${i}`, holdRowId: o.leased ? 'lease' : `h${i}`, holdKind: o.leased ? 'lease' : 'request', costMicros: o.costMicros, refund: o.refund }),
          ),
        );
        const after = plan.wallets.get('ws')!;
        const ledger = plan.ledger.reduce((sum, row) => sum + row.amountMillicents, 0n);
        expect(after.balance).toBe(balance + ledger);
        expect(after.balance >= 0n).toBe(true);
        // Every request's own hold is released; what is left reserved is the lease.
        expect(plan.releasedHolds.length).toBe(holds.size - (holds.has('lease') ? 1 : 0));
        expect(after.reserved).toBe(plan.leases.get('lease') ?? 0n);
        expect(after.balance >= after.reserved).toBe(true);
        expect(after.carry >= 0n && after.carry < M).toBe(true);
        // Each ledger row's balance is the previous one plus its amount.
        let running = balance;
        for (const row of plan.ledger) {
          running += row.amountMillicents;
          expect(row.balanceAfterMillicents).toBe(running);
        }
      }),
    );
  });
});

describe('carryToMicros', () => {
  it('reads numeric(20, 9) carries', () => {
    expect(carryToMicros('0.250000000')).toBe(250_000n);
    expect(carryToMicros('0')).toBe(0n);
    expect(carryToMicros('0.000001000')).toBe(1n);
  });
});
