import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource, EntityManager } from 'typeorm';
import { WalletTransaction } from '../wallet/entities/wallet-transaction.entity';
import type { WorkspaceStatus } from '../workspaces/entities/workspace.entity';

/** A row of the console's workspace list: money in whole millicents, this calendar month (UTC) so far. */
export interface WorkspaceOverview {
  id: string;
  name: string;
  tier: string;
  status: WorkspaceStatus;
  customRateLimitRpm: number | null;
  createdAt: Date;
  balanceMillicents: number;
  reservedMillicents: number;
  /** Exact sum of the month's costs, as numeric text (fractions of a millicent). */
  spendMonthMillicents: string;
  requestsMonth: number;
  members: number;
}

export interface MemberRow {
  name: string;
  email: string;
  role: string;
}

/** Workspaces whose name contains the pattern (ILIKE, escaped) or whose id starts with the prefix; both null: every one. */
export interface WorkspaceSearch {
  namePattern: string | null;
  idPrefix: string | null;
}

const SEARCH_WHERE = `($1::text IS NULL OR w.name ILIKE $1 OR ($2::text IS NOT NULL AND w.id::text LIKE $2))`;

/**
 * The operator console's statements on workspaces across the modules' tables: the list with
 * each row's wallet, month of usage and number of members (reads for display, aggregates of
 * the page's rows only), and, in the console's audited transactions, the wallet's row it locks
 * before an adjustment and the ledger row of a form's nonce (statements on the wallet's tables:
 * they belong to the wallet module, another lane today).
 */
@Injectable()
export class ConsoleWorkspacesStore {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  transaction<T>(work: (manager: EntityManager) => Promise<T>): Promise<T> {
    return this.db.transaction(work);
  }

  async count(search: WorkspaceSearch): Promise<number> {
    const [{ total }] = (await this.db.query(`SELECT count(*)::int AS total FROM workspaces w WHERE ${SEARCH_WHERE}`, [
      search.namePattern,
      search.idPrefix,
    ])) as { total: number }[];
    return total;
  }

  /** A page of the workspaces searched, newest first; the month's usage counts from `monthStart` (`YYYY-MM-DD`). */
  page(search: WorkspaceSearch, limit: number, offset: number, monthStart: string): Promise<WorkspaceOverview[]> {
    return this.overviews(SEARCH_WHERE, [search.namePattern, search.idPrefix], limit, offset, monthStart);
  }

  async one(workspaceId: string, monthStart: string): Promise<WorkspaceOverview | null> {
    const [found] = await this.overviews('w.id = $1', [workspaceId], 1, 0, monthStart);
    return found ?? null;
  }

  /**
   * The workspaces `where` selects (its parameters first), newest first, `limit` from
   * `offset`, with their wallet, this month's usage from the daily totals and their number of
   * members: aggregates for the selected rows only.
   */
  private async overviews(where: string, parameters: unknown[], limit: number, offset: number, monthStart: string): Promise<WorkspaceOverview[]> {
    const n = parameters.length;
    const rows = (await this.db.query(
      `WITH page AS (
         SELECT w.id, w.name, w.tier, w.status, w.custom_rate_limit_rpm, w.created_at
           FROM workspaces w
          WHERE ${where}
          ORDER BY w.created_at DESC, w.id DESC
          LIMIT $${n + 1} OFFSET $${n + 2}
       )
       SELECT p.*, COALESCE(wl.balance_millicents, 0) AS balance, COALESCE(wl.reserved_millicents, 0) AS reserved,
              month.cost, month.requests,
              (SELECT count(*) FROM memberships m WHERE m.workspace_id = p.id)::int AS members
         FROM page p
         LEFT JOIN wallets wl ON wl.workspace_id = p.id
         CROSS JOIN LATERAL (
           SELECT COALESCE(sum(t.cost_millicents), 0)::text AS cost, COALESCE(sum(t.requests), 0)::bigint AS requests
             FROM usage_daily_totals t
            WHERE t.workspace_id = p.id AND t.day >= $${n + 3}::date
         ) month
        ORDER BY p.created_at DESC, p.id DESC`,
      [...parameters, limit, offset, monthStart],
    )) as {
      id: string;
      name: string;
      tier: string;
      status: WorkspaceStatus;
      custom_rate_limit_rpm: number | null;
      created_at: Date;
      balance: string;
      reserved: string;
      cost: string;
      requests: string;
      members: number;
    }[];
    return rows.map((row) => ({
      id: row.id,
      name: row.name,
      tier: row.tier,
      status: row.status,
      customRateLimitRpm: row.custom_rate_limit_rpm,
      createdAt: row.created_at,
      balanceMillicents: Number(row.balance),
      reservedMillicents: Number(row.reserved),
      spendMonthMillicents: row.cost,
      requestsMonth: Number(row.requests),
      members: row.members,
    }));
  }

  /** Its members, owners first: who to contact. */
  members(workspaceId: string): Promise<MemberRow[]> {
    return this.db.query(
      `SELECT u.name, u.email, m.role FROM memberships m JOIN users u ON u.id = m.user_id
        WHERE m.workspace_id = $1
        ORDER BY array_position(ARRAY['owner','admin','member'], m.role), lower(u.name), u.email`,
      [workspaceId],
    );
  }

  /** The wallet's balance, its row locked until the transaction ends; null when the workspace has no wallet. */
  async lockedBalance(manager: EntityManager, workspaceId: string): Promise<number | null> {
    const [row] = (await manager.query(`SELECT balance_millicents FROM wallets WHERE workspace_id = $1 FOR UPDATE`, [workspaceId])) as {
      balance_millicents: string;
    }[];
    return row ? Number(row.balance_millicents) : null;
  }

  /** The ledger row an operator's form wrote under this idempotency key, if it was submitted before. */
  ledgerRow(manager: EntityManager, idempotencyKey: string): Promise<WalletTransaction | null> {
    return manager.getRepository(WalletTransaction).findOneBy({ idempotencyKey });
  }
}
