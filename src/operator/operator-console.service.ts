import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { DataSource, EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { WalletTransaction } from '../wallet/entities/wallet-transaction.entity';
import { WalletService } from '../wallet/wallet.service';
import { ApiKeysService } from '../workspaces/api-keys.service';
import type { Workspace, WorkspaceStatus } from '../workspaces/entities/workspace.entity';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { Actor, OperatorAction, writeAuditEntry } from './audit-log';

/** Workspaces per page of the console's list. */
export const WORKSPACES_PAGE_SIZE = 50;
/** The list's pages are OFFSET pages: bounded, so that no request walks past this many rows. */
export const WORKSPACES_MAX_PAGE = 400;
/** Audit entries per page. */
export const AUDIT_PAGE_SIZE = 50;
/**
 * The figures' statements, exported so that bench/operator-pages.ts explains exactly these.
 * The daily totals of the days $1 to $2 (`YYYY-MM-DD`), per day, per workspace and per model, in one pass.
 */
export const GROUPED_TOTALS_SQL = `
  SELECT day::text AS day, workspace_id, model, sum(requests)::bigint AS requests, sum(tokens)::bigint AS tokens,
         sum(cost_millicents)::text AS cost, GROUPING(day, workspace_id, model) AS grouping
    FROM usage_daily_totals
   WHERE day BETWEEN $1::date AND $2::date
   GROUP BY GROUPING SETS ((day), (workspace_id), (model))`;

/** Failed requests of the days $1 to $2 per error code, from the partial index of failures (created_at, error_code). */
export const FAILURES_SQL = `
  SELECT COALESCE(error_code, 'unknown') AS error_code, count(*)::bigint AS requests
    FROM usage_records
   WHERE status = 'error' AND created_at >= $1::date AND created_at < $2::date + 1
   GROUP BY 1
   ORDER BY 2 DESC, 1`;

/** Periods whose closed days' figures are kept (each at most one map of workspaces). */
const CLOSED_DAYS_CACHE = 8;
/** The longest reason an operator may write. */
export const REASON_MAX_LENGTH = 500;

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

export interface WorkspaceList {
  rows: WorkspaceOverview[];
  total: number;
  page: number;
  pages: number;
}

export interface PlatformFigures {
  daily: { date: string; requests: number; tokens: number; costMillicents: string }[];
  totals: { requests: number; tokens: number; costMillicents: string };
  topWorkspaces: { id: string; name: string | null; requests: number; costMillicents: string }[];
  topModels: { model: string; requests: number; tokens: number; costMillicents: string }[];
  failures: { errorCode: string; requests: number }[];
}

export interface AuditRow {
  id: string;
  operatorEmail: string;
  action: OperatorAction;
  workspaceId: string | null;
  workspaceName: string | null;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
  reason: string | null;
  at: Date;
}

export interface AuditPage {
  rows: AuditRow[];
  nextCursor: string | null;
}

export interface MemberRow {
  name: string;
  email: string;
  role: string;
}

/**
 * The reads and actions of the operator console, across every workspace. Figures come from
 * usage_daily_totals (and a partial index of failed requests), never from a scan of
 * usage_records. Conversation contents are never read here: operators see money, usage,
 * keys and members, not what a workspace's people and customers wrote. Every action writes
 * its audit entry in the transaction of its change.
 */
@Injectable()
export class OperatorConsoleService {
  /** `start/end` -> the figures of those closed days (see `figures`). */
  private readonly closedDaysCache = new Map<string, Promise<GroupedTotals>>();

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly workspaces: WorkspacesService,
    private readonly wallet: WalletService,
    private readonly apiKeys: ApiKeysService,
  ) {}

  /**
   * A page of workspaces, newest first, those whose name contains `search` (any case) or
   * whose id starts with it. Aggregates are computed for the page's rows only.
   */
  async listWorkspaces(search: string, page: number, now = new Date()): Promise<WorkspaceList> {
    const term = search.trim();
    const namePattern = term ? `%${term.replace(/[\\%_]/g, (c) => `\\${c}`)}%` : null;
    const idPrefix = term && /^[0-9a-f-]{1,36}$/i.test(term) ? `${term.toLowerCase()}%` : null;
    const where = `($1::text IS NULL OR w.name ILIKE $1 OR ($2::text IS NOT NULL AND w.id::text LIKE $2))`;
    const [{ total }] = (await this.db.query(`SELECT count(*)::int AS total FROM workspaces w WHERE ${where}`, [
      namePattern,
      idPrefix,
    ])) as { total: number }[];
    const pages = Math.max(1, Math.min(WORKSPACES_MAX_PAGE, Math.ceil(total / WORKSPACES_PAGE_SIZE)));
    const current = Math.min(Math.max(1, page), pages);
    const rows = await this.overviews(where, [namePattern, idPrefix], WORKSPACES_PAGE_SIZE, (current - 1) * WORKSPACES_PAGE_SIZE, now);
    return { rows, total, page: current, pages };
  }

  /** One workspace as the list shows it; 404 for an unknown id (or not an id). */
  async workspace(workspaceId: string, now = new Date()): Promise<WorkspaceOverview> {
    if (!isUUID(workspaceId)) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    const [found] = await this.overviews('w.id = $1', [workspaceId], 1, 0, now);
    if (!found) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return found;
  }

  /**
   * The workspaces `where` selects (its parameters first), newest first, `limit` from
   * `offset`, with their wallet, this month's usage from the daily totals and their number of
   * members: aggregates for the selected rows only.
   */
  private async overviews(where: string, parameters: unknown[], limit: number, offset: number, now: Date): Promise<WorkspaceOverview[]> {
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
      [...parameters, limit, offset, monthStart(now)],
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

  /** Its members: who to contact. */
  async members(workspaceId: string): Promise<MemberRow[]> {
    return this.db.query(
      `SELECT u.name, u.email, m.role FROM memberships m JOIN users u ON u.id = m.user_id
        WHERE m.workspace_id = $1
        ORDER BY array_position(ARRAY['owner','admin','member'], m.role), lower(u.name), u.email`,
      [workspaceId],
    );
  }

  /**
   * Platform-wide figures of the days from `startDate` to `endDate` (UTC, both included):
   * the daily totals grouped three ways (day, workspace, model) in one pass, and failed
   * requests counted from the partial index of failures. The days before yesterday no longer
   * change (a request settles within seconds of its day), so their part is computed once per
   * period and day and kept (CLOSED_DAYS_CACHE entries); yesterday and today are read each time,
   * through the index on the day.
   */
  async figures(startDate: string, endDate: string, top = 10, now = new Date()): Promise<PlatformFigures> {
    const lastClosed = addDays(now.toISOString().slice(0, 10), -2);
    const closedEnd = endDate < lastClosed ? endDate : lastClosed;
    const liveStart = startDate > closedEnd ? startDate : addDays(closedEnd, 1);
    const [closed, live, failures] = await Promise.all([
      startDate <= closedEnd ? this.closedDays(startDate, closedEnd) : Promise.resolve(emptyTotals()),
      liveStart <= endDate ? this.groupedTotals(liveStart, endDate) : Promise.resolve(emptyTotals()),
      this.db.query(FAILURES_SQL, [startDate, endDate]) as Promise<{ error_code: string; requests: string }[]>,
    ]);
    const totals = mergeTotals(closed, live);
    const topWorkspaces = largestCosts(totals.byWorkspace, top);
    const names = new Map<string, string>(
      topWorkspaces.length === 0
        ? []
        : (
            (await this.db.query(`SELECT id, name FROM workspaces WHERE id = ANY($1::uuid[])`, [topWorkspaces.map(([id]) => id)])) as {
              id: string;
              name: string;
            }[]
          ).map((row) => [row.id, row.name]),
    );
    const days = [...totals.byDay].sort(([a], [b]) => (a < b ? 1 : -1));
    return {
      daily: days.map(([date, sums]) => ({ date, requests: sums.requests, tokens: sums.tokens, costMillicents: sums.cost })),
      totals: days.reduce(
        (sum, [, sums]) => ({
          requests: sum.requests + sums.requests,
          tokens: sum.tokens + sums.tokens,
          costMillicents: addDecimal(sum.costMillicents, sums.cost),
        }),
        { requests: 0, tokens: 0, costMillicents: '0' },
      ),
      topWorkspaces: topWorkspaces.map(([id, sums]) => ({ id, name: names.get(id) ?? null, requests: sums.requests, costMillicents: sums.cost })),
      topModels: largestCosts(totals.byModel, top).map(([model, sums]) => ({ model, requests: sums.requests, tokens: sums.tokens, costMillicents: sums.cost })),
      failures: failures.map((row) => ({ errorCode: row.error_code, requests: Number(row.requests) })),
    };
  }

  private closedDays(startDate: string, endDate: string): Promise<GroupedTotals> {
    const key = `${startDate}/${endDate}`;
    let cached = this.closedDaysCache.get(key);
    if (!cached) {
      cached = this.groupedTotals(startDate, endDate);
      // A failed read is not kept: the next page asks again.
      cached.catch(() => this.closedDaysCache.delete(key));
      if (this.closedDaysCache.size >= CLOSED_DAYS_CACHE) this.closedDaysCache.delete(this.closedDaysCache.keys().next().value!);
      this.closedDaysCache.set(key, cached);
    }
    return cached;
  }

  private async groupedTotals(startDate: string, endDate: string): Promise<GroupedTotals> {
    const rows = (await this.db.query(GROUPED_TOTALS_SQL, [startDate, endDate])) as { day: string | null; workspace_id: string | null; model: string | null; requests: string; tokens: string; cost: string; grouping: number }[];
    const totals = emptyTotals();
    for (const row of rows) {
      const sums = { requests: Number(row.requests), tokens: Number(row.tokens), cost: row.cost };
      // GROUPING bits, in the order (day, workspace_id, model): 1 = that column is aggregated away.
      if (row.grouping === 0b011) totals.byDay.set(row.day!, sums);
      else if (row.grouping === 0b101) totals.byWorkspace.set(row.workspace_id!, sums);
      else if (row.grouping === 0b110) totals.byModel.set(row.model!, sums);
    }
    return totals;
  }

  /** The audit log, newest first, one workspace's or everyone's; `after` is the last entry id of the previous page. */
  async audit(options: { workspaceId?: string; after?: string; limit?: number } = {}): Promise<AuditPage> {
    const limit = options.limit ?? AUDIT_PAGE_SIZE;
    const after = options.after && isUUID(options.after) ? options.after : null;
    const workspaceId = options.workspaceId ?? null;
    const rows = (await this.db.query(
      `SELECT a.id, a.operator_email, a.action, a.workspace_id, w.name AS workspace_name, a.before, a.after, a.reason, a.at
         FROM operator_audit_log a
         LEFT JOIN workspaces w ON w.id = a.workspace_id
        WHERE ($1::uuid IS NULL OR a.workspace_id = $1)
          AND ($2::uuid IS NULL OR (a.at, a.id) < (SELECT at, id FROM operator_audit_log WHERE id = $2))
        ORDER BY a.at DESC, a.id DESC
        LIMIT $3`,
      [workspaceId, after, limit + 1],
    )) as {
      id: string;
      operator_email: string;
      action: OperatorAction;
      workspace_id: string | null;
      workspace_name: string | null;
      before: Record<string, unknown> | null;
      after: Record<string, unknown> | null;
      reason: string | null;
      at: Date;
    }[];
    const page = rows.slice(0, limit).map((row) => ({
      id: row.id,
      operatorEmail: row.operator_email,
      action: row.action,
      workspaceId: row.workspace_id,
      workspaceName: row.workspace_name,
      before: row.before,
      after: row.after,
      reason: row.reason,
      at: row.at,
    }));
    return { rows: page, nextCursor: rows.length > limit ? page[page.length - 1].id : null };
  }

  /**
   * Moves a workspace to a tier (and custom rate), through WorkspacesService.setTier as the
   * CLI's `workspace set-tier`. Applies on this replica at once, on the others within the
   * key cache's lifetime.
   */
  async setTier(actor: Actor, workspaceId: string, tier: string, customRateLimitRpm: number | undefined, reason: string | null): Promise<Workspace> {
    const updated = await this.db.transaction(async (manager) => {
      const before = await this.workspaces.getLocked(manager, await this.knownId(workspaceId));
      const snapshot = { tier: before.tier, custom_rate_limit_rpm: before.customRateLimitRpm };
      const after = await this.workspaces.setTier(workspaceId, tier, customRateLimitRpm, manager);
      await writeAuditEntry(manager, {
        operator: actor,
        action: 'set_tier',
        workspaceId,
        before: snapshot,
        after: { tier: after.tier, custom_rate_limit_rpm: after.customRateLimitRpm },
        reason: optionalReason(reason),
      });
      return after;
    });
    this.apiKeys.forgetCachedLookups();
    return updated;
  }

  /**
   * Credits (positive) or debits (negative) the wallet: an `adjustment` ledger row whose
   * description names the operator and the reason. The form's nonce keys it, so a form
   * submitted twice moves the money once; `duplicate` says it had been done. The wallet's row
   * is locked before the nonce is looked up: concurrent submits of one form take turns, so
   * only the one that moves the money writes the audit entry, with the balance it changed.
   */
  async adjustBalance(
    actor: Actor,
    workspaceId: string,
    amountMillicents: number,
    reason: string,
    nonce: string,
  ): Promise<{ transaction: WalletTransaction; duplicate: boolean }> {
    const why = requiredReason(reason);
    if (!isUUID(nonce)) throw ApiError.badRequest('This form has no valid nonce: reload the page and try again.', 'nonce');
    const idempotencyKey = `operator:${await this.knownId(workspaceId)}:${nonce}`;
    return this.db.transaction(async (manager) => {
      const before = await this.lockedBalance(manager, workspaceId);
      const done = await manager.getRepository(WalletTransaction).findOneBy({ idempotencyKey });
      if (done) return { transaction: done, duplicate: true };
      const row = await this.wallet.credit(
        {
          workspaceId,
          amountMillicents,
          type: 'adjustment',
          description: `Operator ${amountMillicents > 0 ? 'credit' : 'debit'} by ${actor.email}: ${why}`,
          idempotencyKey,
        },
        manager,
      );
      await writeAuditEntry(manager, {
        operator: actor,
        action: 'adjust_balance',
        workspaceId,
        before: { balance_millicents: before },
        after: { balance_millicents: row.balanceAfterMillicents, amount_millicents: amountMillicents, transaction_id: row.id },
        reason: why,
      });
      return { transaction: row, duplicate: false };
    });
  }

  /**
   * Suspends or resumes a workspace. A suspended workspace's keys get 403
   * `workspace_suspended`: at once on this replica (its key cache is cleared), within
   * KEY_CACHE_TTL_MS on the others. Setting the status it already has changes nothing and
   * writes no entry; `changed` says which.
   */
  async setStatus(actor: Actor, workspaceId: string, status: WorkspaceStatus, reason: string | null): Promise<{ changed: boolean }> {
    const changed = await this.db.transaction(async (manager) => {
      const workspace = await this.workspaces.getLocked(manager, await this.knownId(workspaceId));
      if (workspace.status === status) return false;
      await manager.query(`UPDATE workspaces SET status = $2, updated_at = now() WHERE id = $1`, [workspaceId, status]);
      await writeAuditEntry(manager, {
        operator: actor,
        action: status === 'suspended' ? 'suspend' : 'resume',
        workspaceId,
        before: { status: workspace.status },
        after: { status },
        reason: optionalReason(reason),
      });
      return true;
    });
    if (changed) this.apiKeys.forgetCachedLookups();
    return { changed };
  }

  private async knownId(workspaceId: string): Promise<string> {
    if (!isUUID(workspaceId)) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return workspaceId;
  }

  /** The wallet's balance, its row locked until the transaction ends. */
  private async lockedBalance(manager: EntityManager, workspaceId: string): Promise<number> {
    const [row] = (await manager.query(`SELECT balance_millicents FROM wallets WHERE workspace_id = $1 FOR UPDATE`, [workspaceId])) as {
      balance_millicents: string;
    }[];
    if (!row) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return Number(row.balance_millicents);
  }
}

/** The first day (`YYYY-MM-DD`, UTC) of the month of `now`. */
export function monthStart(now: Date): string {
  return `${now.toISOString().slice(0, 8)}01`;
}

function requiredReason(reason: string): string {
  const why = optionalReason(reason);
  if (!why) throw ApiError.badRequest('Write the reason for this change: it goes to the ledger and the audit log.', 'reason');
  return why;
}

function optionalReason(reason: string | null): string | null {
  const why = (reason ?? '').trim();
  if (why.length > REASON_MAX_LENGTH) throw ApiError.badRequest(`A reason has at most ${REASON_MAX_LENGTH} characters.`, 'reason');
  return why || null;
}

/** Requests, tokens and exact cost (numeric text) of a group of daily totals. */
interface Sums {
  requests: number;
  tokens: number;
  cost: string;
}

/** Daily totals of a range of days, summed per day, per workspace and per model. */
interface GroupedTotals {
  byDay: Map<string, Sums>;
  byWorkspace: Map<string, Sums>;
  byModel: Map<string, Sums>;
}

function emptyTotals(): GroupedTotals {
  return { byDay: new Map(), byWorkspace: new Map(), byModel: new Map() };
}

/** The totals of two disjoint ranges of days, as one. */
function mergeTotals(a: GroupedTotals, b: GroupedTotals): GroupedTotals {
  const merge = (x: Map<string, Sums>, y: Map<string, Sums>) => {
    const merged = new Map(x);
    for (const [key, sums] of y) {
      const other = merged.get(key);
      merged.set(
        key,
        other ? { requests: other.requests + sums.requests, tokens: other.tokens + sums.tokens, cost: addDecimal(other.cost, sums.cost) } : sums,
      );
    }
    return merged;
  };
  return { byDay: merge(a.byDay, b.byDay), byWorkspace: merge(a.byWorkspace, b.byWorkspace), byModel: merge(a.byModel, b.byModel) };
}

/** `YYYY-MM-DD` plus `days` (UTC). */
function addDays(date: string, days: number): string {
  return new Date(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000).toISOString().slice(0, 10);
}

/**
 * The `top` entries of the largest cost, largest first. Ranked by the cost as a float, parsed
 * once per entry (10,000 workspaces): the amounts shown stay the exact text.
 */
function largestCosts(sums: Map<string, Sums>, top: number): [string, Sums][] {
  return [...sums]
    .map((entry) => ({ entry, cost: Number(entry[1].cost) }))
    .sort((a, b) => b.cost - a.cost || (a.entry[0] < b.entry[0] ? -1 : 1))
    .slice(0, top)
    .map(({ entry }) => entry);
}

/** Sum of two non-negative decimal strings, exactly (costs have fractions of a millicent). */
function addDecimal(a: string, b: string): string {
  const [ai, af = ''] = a.split('.');
  const [bi, bf = ''] = b.split('.');
  const scale = Math.max(af.length, bf.length);
  const sum = BigInt(ai + af.padEnd(scale, '0')) + BigInt(bi + bf.padEnd(scale, '0'));
  if (scale === 0) return sum.toString();
  const digits = sum.toString().padStart(scale + 1, '0');
  return `${digits.slice(0, -scale)}.${digits.slice(-scale)}`.replace(/\.?0+$/, '');
}
