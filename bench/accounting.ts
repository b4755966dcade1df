import { setTimeout as sleep } from 'node:timers/promises';
import type { Client } from 'pg';

/**
 * The accounting checks of the benchmarks (chat.ts, routing.ts), in SQL on the service's
 * database, over the workspaces a measurement used: nothing reserved, ledger = balance in every
 * wallet, and one usage record per request (at least the 2xx answers, at most the requests sent).
 */
export interface Accounting {
  /** Sum of reserved_millicents over the bench workspaces' wallets. */
  reservedMillicents: number;
  /** Wallets whose balance is not the sum of their ledger rows. */
  ledgerMismatches: { workspaceId: string; balance: string; ledger: string }[];
  usageRecords: number;
  usageByStatus: Record<string, number>;
  /** Rows of wallet_holds and the age of the oldest, when that table exists. */
  holds?: { count: number; oldestAgeSeconds: number | null };
}

export async function readAccounting(db: Client, workspaceIds: string[]): Promise<Accounting> {
  const wallets = await db.query<{ workspace_id: string; balance: string; reserved: string; ledger: string }>(
    `SELECT w.workspace_id, w.balance_millicents::text AS balance, w.reserved_millicents::text AS reserved,
            COALESCE((SELECT SUM(t.amount_millicents) FROM wallet_transactions t WHERE t.workspace_id = w.workspace_id), 0)::text AS ledger
       FROM wallets w WHERE w.workspace_id = ANY($1::uuid[])`,
    [workspaceIds],
  );
  const usage = await db.query<{ status: string; n: string }>(
    'SELECT status, COUNT(*)::text AS n FROM usage_records WHERE workspace_id = ANY($1::uuid[]) GROUP BY status',
    [workspaceIds],
  );
  const usageByStatus = Object.fromEntries(usage.rows.map((r) => [r.status, Number(r.n)]));
  // Where reserved money sits, to tell a leaked hold from a request still running. Only a
  // diagnostic: the table is the wallet's own business and may change.
  const holds = await db
    .query<{ n: string; oldest: Date | null }>('SELECT COUNT(*)::text AS n, MIN(created_at) AS oldest FROM wallet_holds WHERE workspace_id = ANY($1::uuid[])', [workspaceIds])
    .then((r) => ({ count: Number(r.rows[0].n), oldestAgeSeconds: r.rows[0].oldest ? Math.round((Date.now() - r.rows[0].oldest.getTime()) / 1000) : null }))
    .catch(() => undefined);
  return {
    holds,
    // bigint sums as BigInt: 200 wallets of 10^12 exceed nothing, but reserved must be exact.
    reservedMillicents: Number(wallets.rows.reduce((sum, r) => sum + BigInt(r.reserved), 0n)),
    ledgerMismatches: wallets.rows.filter((r) => r.balance !== r.ledger).map((r) => ({ workspaceId: r.workspace_id, balance: r.balance, ledger: r.ledger })),
    usageRecords: Object.values(usageByStatus).reduce((a, b) => a + b, 0),
    usageByStatus,
  };
}

export interface Check {
  measurement: string;
  /** Answers counted 2xx by the clients (warm-up included) and requests they sent. */
  answered2xx: number;
  sent: number;
  /** Usage records written during the measurement, by status. */
  usageRecords: number;
  usageByStatus: Record<string, number>;
  reservedMillicents: number;
  holds?: Accounting['holds'];
  ledgerMismatches: number;
  waitedMs: number;
  nothingReserved: boolean;
  ledgerMatches: boolean;
  /** Every answered request has its record, and no request has two: 2xx <= records <= sent. */
  usageMatches: boolean;
  pass: boolean;
}

/**
 * Waits until nothing is reserved and the number of usage records stops moving (the
 * requests in flight at the clients' cut-off finish on the server; at most `graceMs`), then checks.
 */
export async function settleAndCheck(
  db: Client,
  workspaceIds: string[],
  measurement: string,
  before: Accounting,
  counted: { answered2xx: number; sent: number },
  graceMs = 10_000,
): Promise<Check> {
  const started = Date.now();
  let now = await readAccounting(db, workspaceIds);
  let stableSince = Date.now();
  while (Date.now() - started < graceMs) {
    await sleep(250);
    const next = await readAccounting(db, workspaceIds);
    if (next.usageRecords !== now.usageRecords || next.reservedMillicents !== now.reservedMillicents) stableSince = Date.now();
    now = next;
    if (now.reservedMillicents === 0 && Date.now() - stableSince >= 1_000) break;
  }
  const usageByStatus = Object.fromEntries(
    Object.keys({ ...before.usageByStatus, ...now.usageByStatus }).map((s) => [s, (now.usageByStatus[s] ?? 0) - (before.usageByStatus[s] ?? 0)]),
  );
  const usageRecords = now.usageRecords - before.usageRecords;
  const check = {
    measurement,
    ...counted,
    usageRecords,
    usageByStatus,
    reservedMillicents: now.reservedMillicents,
    holds: now.holds,
    ledgerMismatches: now.ledgerMismatches.length,
    waitedMs: Date.now() - started,
    nothingReserved: now.reservedMillicents === 0,
    ledgerMatches: now.ledgerMismatches.length === 0,
    usageMatches: usageRecords >= counted.answered2xx && usageRecords <= counted.sent,
  };
  return { ...check, pass: check.nothingReserved && check.ledgerMatches && check.usageMatches };
}
