import type { DataSource } from 'typeorm';

/**
 * The wallet invariants of docs/architecture.md, "Money (contract)", once nothing is in flight: the balance
 * is the sum of the ledger, nothing is reserved, no hold is left, and the balance is not
 * negative.
 */
export async function walletInvariants(db: DataSource, workspaceId: string) {
  const [row] = await db.query(
    `SELECT w.balance_millicents::bigint AS balance, w.reserved_millicents::bigint AS reserved,
            (SELECT coalesce(sum(amount_millicents), 0) FROM wallet_transactions t WHERE t.workspace_id = w.workspace_id)::bigint AS ledger,
            (SELECT count(*) FROM wallet_holds h WHERE h.workspace_id = w.workspace_id)::int AS holds
       FROM wallets w WHERE w.workspace_id = $1`,
    [workspaceId],
  );
  return { balance: Number(row.balance), reserved: Number(row.reserved), ledger: Number(row.ledger), holds: row.holds as number };
}

/**
 * Nothing reserved and no hold row left. A budget lease drawn down to 0 by its settlements
 * keeps its row until it has been idle for WALLET_LEASE_IDLE_MS: `reserved` alone reaches 0 first.
 */
export async function nothingHeld(db: DataSource, workspaceId: string): Promise<boolean> {
  const { reserved, holds } = await walletInvariants(db, workspaceId);
  return reserved === 0 && holds === 0;
}
