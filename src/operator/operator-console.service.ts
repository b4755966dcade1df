import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { DataSource, EntityManager } from 'typeorm';
import { isUniqueViolation } from '../common/database/unique-violation';
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
    const rows = (await this.db.query(
      `WITH page AS (
         SELECT w.id, w.name, w.tier, w.status, w.custom_rate_limit_rpm, w.created_at
           FROM workspaces w
          WHERE ${where}
          ORDER BY w.created_at DESC, w.id DESC
          LIMIT $3 OFFSET $4
       )
       SELECT p.*, COALESCE(wl.balance_millicents, 0) AS balance, COALESCE(wl.reserved_millicents, 0) AS reserved,
              month.cost, month.requests,
              (SELECT count(*) FROM memberships m WHERE m.workspace_id = p.id)::int AS members
         FROM page p
         LEFT JOIN wallets wl ON wl.workspace_id = p.id
         CROSS JOIN LATERAL (
           SELECT COALESCE(sum(t.cost_millicents), 0)::text AS cost, COALESCE(sum(t.requests), 0)::bigint AS requests
             FROM usage_daily_totals t
            WHERE t.workspace_id = p.id AND t.day >= $5::date
         ) month
        ORDER BY p.created_at DESC, p.id DESC`,
      [namePattern, idPrefix, WORKSPACES_PAGE_SIZE, (current - 1) * WORKSPACES_PAGE_SIZE, monthStart(now)],
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
    return {
      rows: rows.map((row) => ({
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
      })),
      total,
      page: current,
      pages,
    };
  }

  /** One workspace as the list shows it; 404 for an unknown id (or not an id). */
  async workspace(workspaceId: string, now = new Date()): Promise<WorkspaceOverview> {
    if (!isUUID(workspaceId)) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    const found = (await this.listWorkspaces(workspaceId, 1, now)).rows.find((row) => row.id === workspaceId);
    if (!found) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return found;
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
   * one pass over the period's daily totals grouped three ways (day, workspace, model), and
   * failed requests counted from the partial index of failures.
   */
  async figures(startDate: string, endDate: string, top = 10): Promise<PlatformFigures> {
    const [grouped, failures] = (await Promise.all([
      this.db.query(
        `SELECT day::text AS day, workspace_id, model, sum(requests)::bigint AS requests, sum(tokens)::bigint AS tokens,
                sum(cost_millicents)::text AS cost, GROUPING(day, workspace_id, model) AS grouping
           FROM usage_daily_totals
          WHERE day BETWEEN $1::date AND $2::date
          GROUP BY GROUPING SETS ((day), (workspace_id), (model))`,
        [startDate, endDate],
      ),
      this.db.query(
        `SELECT COALESCE(error_code, 'unknown') AS error_code, count(*)::bigint AS requests
           FROM usage_records
          WHERE status = 'error' AND created_at >= $1::date AND created_at < $2::date + 1
          GROUP BY 1
          ORDER BY 2 DESC, 1`,
        [startDate, endDate],
      ),
    ])) as [
      { day: string | null; workspace_id: string | null; model: string | null; requests: string; tokens: string; cost: string; grouping: number }[],
      { error_code: string; requests: string }[],
    ];
    // GROUPING bits, in the order (day, workspace_id, model): 1 = that column is aggregated away.
    const byDay = grouped.filter((row) => row.grouping === 0b011);
    const byWorkspace = grouped.filter((row) => row.grouping === 0b101);
    const byModel = grouped.filter((row) => row.grouping === 0b110);
    const byCost = (a: { cost: string }, b: { cost: string }) => Number(b.cost) - Number(a.cost);
    const topWorkspaces = byWorkspace.sort(byCost).slice(0, top);
    const names = new Map<string, string>(
      topWorkspaces.length === 0
        ? []
        : (
            (await this.db.query(`SELECT id, name FROM workspaces WHERE id = ANY($1::uuid[])`, [
              topWorkspaces.map((row) => row.workspace_id),
            ])) as { id: string; name: string }[]
          ).map((row) => [row.id, row.name]),
    );
    const sumText = (values: string[]) => values.reduce((sum, value) => addDecimal(sum, value), '0');
    return {
      daily: byDay
        .sort((a, b) => (a.day! < b.day! ? 1 : -1))
        .map((row) => ({ date: row.day!, requests: Number(row.requests), tokens: Number(row.tokens), costMillicents: row.cost })),
      totals: {
        requests: byDay.reduce((sum, row) => sum + Number(row.requests), 0),
        tokens: byDay.reduce((sum, row) => sum + Number(row.tokens), 0),
        costMillicents: sumText(byDay.map((row) => row.cost)),
      },
      topWorkspaces: topWorkspaces.map((row) => ({
        id: row.workspace_id!,
        name: names.get(row.workspace_id!) ?? null,
        requests: Number(row.requests),
        costMillicents: row.cost,
      })),
      topModels: byModel
        .sort(byCost)
        .slice(0, top)
        .map((row) => ({ model: row.model!, requests: Number(row.requests), tokens: Number(row.tokens), costMillicents: row.cost })),
      failures: failures.map((row) => ({ errorCode: row.error_code, requests: Number(row.requests) })),
    };
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
   * submitted twice moves the money once; `duplicate` says it had been done.
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
    const idempotencyKey = `operator:${workspaceId}:${nonce}`;
    const done = () => this.db.getRepository(WalletTransaction).findOneBy({ idempotencyKey });
    const existing = await done();
    if (existing) return { transaction: existing, duplicate: true };
    try {
      const transaction = await this.db.transaction(async (manager) => {
        const before = await this.balanceOf(manager, await this.knownId(workspaceId));
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
        return row;
      });
      return { transaction, duplicate: false };
    } catch (error) {
      // The same form submitted twice at once: the other request committed; this one rolled back, audit entry included.
      const winner = isUniqueViolation(error) ? await done() : null;
      if (winner) return { transaction: winner, duplicate: true };
      throw error;
    }
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

  private async balanceOf(manager: EntityManager, workspaceId: string): Promise<number> {
    const [row] = (await manager.query(`SELECT balance_millicents FROM wallets WHERE workspace_id = $1`, [workspaceId])) as {
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
