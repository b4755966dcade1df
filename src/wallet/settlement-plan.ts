import { MICROS_PER_MILLICENT, MicroMillicents } from './cost';
import type { TransactionType } from './entities/wallet-transaction.entity';

/** A wallet row as the settling transaction locked it. */
export interface LockedWallet {
  balance: bigint;
  reserved: bigint;
  /** The sub-millicent remainder carried from earlier charges, in micro-millicents (< 1 millicent). */
  carry: MicroMillicents;
}

/** One request's settlement, as the plan needs it. */
export interface PlannedCharge {
  /** Unique per request: the ledger rows are keyed by it, so a replay is a no-op. */
  key: string;
  workspaceId: string;
  /** The row whose money was set aside: the request's own hold, or the lease it was admitted from. */
  holdRowId: string;
  holdKind: 'request' | 'lease';
  costMicros: MicroMillicents;
  /** A failed request: what it used is charged and refunded, so the ledger shows both. */
  refund: boolean;
  description: string;
  /** Its ledger row exists already (an earlier attempt did commit): nothing is written again. */
  alreadyApplied: boolean;
}

export interface PlannedLedgerRow {
  workspaceId: string;
  type: Extract<TransactionType, 'usage' | 'refund'>;
  amountMillicents: bigint;
  balanceAfterMillicents: bigint;
  description: string;
  idempotencyKey: string;
}

export interface ChargeOutcome {
  /** Whole millicents taken from the balance (0 when the cost stayed within the carried fraction). */
  chargedMillicents: number;
  /** Whole millicents of the cost the wallet could not cover; usually 0. */
  writtenOffMillicents: number;
  balanceAfterMillicents: number;
  /** False when this charge had already been settled: nothing was charged again. */
  applied: boolean;
  /** What the charge took out of its lease (and so out of `reserved`): 0 for a request's own hold. */
  releasedFromLeaseMillicents: number;
}

export interface SettlementPlan {
  outcomes: ChargeOutcome[];
  /** The wallets' new state, to write back. */
  wallets: Map<string, LockedWallet>;
  /** Request holds that are released (deleted). */
  releasedHolds: string[];
  /** Leases' new amounts. */
  leases: Map<string, bigint>;
  ledger: PlannedLedgerRow[];
}

/**
 * Works out a batch of settlements on wallets and holds locked by the caller: each request,
 * in order, is charged its cost in whole millicents (the fraction is carried per wallet),
 * but never more than the wallet can cover (its own hold, or its whole lease, plus what no
 * other hold or lease sets aside): a cost past that is written off, so the balance never goes
 * below zero nor below what others hold. A request's own hold is released; a leased request's
 * charge is taken out of its lease, since the lease had set that money aside. A refunded
 * request gets its charge back and the carry put back where it was, so the wallet ends
 * exactly where it was. Pure: the caller reads the rows and writes the plan back.
 */
export function planSettlements(
  wallets: ReadonlyMap<string, LockedWallet>,
  holdAmounts: ReadonlyMap<string, bigint>,
  charges: readonly PlannedCharge[],
): SettlementPlan {
  const state = new Map([...wallets].map(([id, wallet]) => [id, { ...wallet }]));
  const holds = new Map(holdAmounts);
  const releasedHolds: string[] = [];
  const leases = new Map<string, bigint>();
  const ledger: PlannedLedgerRow[] = [];

  const outcomes = charges.map((charge): ChargeOutcome => {
    const wallet = state.get(charge.workspaceId);
    if (!wallet) throw new Error(`No wallet for workspace ${charge.workspaceId}`);
    if (charge.alreadyApplied) {
      return { chargedMillicents: 0, writtenOffMillicents: 0, balanceAfterMillicents: Number(wallet.balance), applied: false, releasedFromLeaseMillicents: 0 };
    }
    // A hold swept meanwhile (its process stalled past the expiry) sets nothing aside any more.
    const held = holds.get(charge.holdRowId) ?? 0n;
    const carryBefore = wallet.carry;
    const total = wallet.carry + charge.costMicros;
    const whole = total / MICROS_PER_MILLICENT;
    const coverable = max(wallet.balance - (wallet.reserved - held), 0n);
    const charged = min(whole, coverable);
    wallet.carry = whole <= coverable ? total % MICROS_PER_MILLICENT : 0n;
    wallet.balance -= charged;

    let releasedFromLease = 0n;
    if (charge.holdKind === 'request') {
      wallet.reserved -= held;
      if (holds.delete(charge.holdRowId)) releasedHolds.push(charge.holdRowId);
    } else if (holds.has(charge.holdRowId)) {
      releasedFromLease = min(charged, held);
      wallet.reserved -= releasedFromLease;
      holds.set(charge.holdRowId, held - releasedFromLease);
      leases.set(charge.holdRowId, held - releasedFromLease);
    }
    if (charged > 0n) {
      ledger.push(ledgerRow(charge, 'usage', -charged, wallet.balance, charge.description, `usage:${charge.key}`));
    }
    if (charge.refund) {
      wallet.balance += charged;
      wallet.carry = carryBefore;
      if (charged > 0n) ledger.push(ledgerRow(charge, 'refund', charged, wallet.balance, `Refund: ${charge.description}`, `refund:${charge.key}`));
    }
    return {
      chargedMillicents: Number(charged),
      writtenOffMillicents: Number(whole - charged),
      balanceAfterMillicents: Number(wallet.balance),
      applied: true,
      releasedFromLeaseMillicents: Number(releasedFromLease),
    };
  });
  return { outcomes, wallets: state, releasedHolds, leases, ledger };
}

/** `"0.250000000"` (numeric(20, 9), always a whole number of micro-millicents) -> 250000n. */
export function carryToMicros(carry: string): MicroMillicents {
  const [whole, fraction = ''] = carry.split('.');
  return BigInt(whole) * MICROS_PER_MILLICENT + BigInt(fraction.padEnd(6, '0').slice(0, 6));
}

function ledgerRow(
  charge: PlannedCharge,
  type: PlannedLedgerRow['type'],
  amount: bigint,
  balanceAfter: bigint,
  description: string,
  idempotencyKey: string,
): PlannedLedgerRow {
  return { workspaceId: charge.workspaceId, type, amountMillicents: amount, balanceAfterMillicents: balanceAfter, description, idempotencyKey };
}

function min(a: bigint, b: bigint): bigint {
  return a < b ? a : b;
}

function max(a: bigint, b: bigint): bigint {
  return a > b ? a : b;
}
