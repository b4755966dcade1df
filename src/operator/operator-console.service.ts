import { Injectable } from '@nestjs/common';
import { isUUID } from 'class-validator';
import { ApiError } from '../common/errors/api-error';
import { WalletTransaction } from '../wallet/entities/wallet-transaction.entity';
import { WalletService } from '../wallet/wallet.service';
import { ApiKeysService } from '../workspaces/api-keys.service';
import type { Workspace, WorkspaceStatus } from '../workspaces/entities/workspace.entity';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { Actor, OperatorAction } from './audit-log';
import { AuditLogStore } from './audit-log-store';
import { ConsoleWorkspacesStore, MemberRow, WorkspaceOverview } from './console-workspaces-store';
import { emptyTotals, GroupedTotals, PlatformFiguresStore, Sums } from './platform-figures-store';

export type { MemberRow, WorkspaceOverview } from './console-workspaces-store';

/** Workspaces per page of the console's list. */
export const WORKSPACES_PAGE_SIZE = 50;
/** The list's pages are OFFSET pages: bounded, so that no request walks past this many rows. */
export const WORKSPACES_MAX_PAGE = 400;
/** Audit entries per page. */
export const AUDIT_PAGE_SIZE = 50;
/** Periods whose closed days' figures are kept (each at most one map of workspaces). */
const CLOSED_DAYS_CACHE = 8;
/** The longest reason an operator may write. */
export const REASON_MAX_LENGTH = 500;

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
    private readonly consoleWorkspaces: ConsoleWorkspacesStore,
    private readonly figuresStore: PlatformFiguresStore,
    private readonly auditLog: AuditLogStore,
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
    const total = await this.consoleWorkspaces.count({ namePattern, idPrefix });
    const pages = Math.max(1, Math.min(WORKSPACES_MAX_PAGE, Math.ceil(total / WORKSPACES_PAGE_SIZE)));
    const current = Math.min(Math.max(1, page), pages);
    const rows = await this.consoleWorkspaces.page({ namePattern, idPrefix }, WORKSPACES_PAGE_SIZE, (current - 1) * WORKSPACES_PAGE_SIZE, monthStart(now));
    return { rows, total, page: current, pages };
  }

  /** One workspace as the list shows it; 404 for an unknown id (or not an id). */
  async workspace(workspaceId: string, now = new Date()): Promise<WorkspaceOverview> {
    if (!isUUID(workspaceId)) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    const found = await this.consoleWorkspaces.one(workspaceId, monthStart(now));
    if (!found) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return found;
  }

  /** Its members: who to contact. */
  async members(workspaceId: string): Promise<MemberRow[]> {
    return this.consoleWorkspaces.members(workspaceId);
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
      liveStart <= endDate ? this.figuresStore.groupedTotals(liveStart, endDate) : Promise.resolve(emptyTotals()),
      this.figuresStore.failures(startDate, endDate),
    ]);
    const totals = mergeTotals(closed, live);
    const topWorkspaces = largestCosts(totals.byWorkspace, top);
    const names = await this.figuresStore.workspaceNames(topWorkspaces.map(([id]) => id));
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
      failures,
    };
  }

  private closedDays(startDate: string, endDate: string): Promise<GroupedTotals> {
    const key = `${startDate}/${endDate}`;
    let cached = this.closedDaysCache.get(key);
    if (!cached) {
      cached = this.figuresStore.groupedTotals(startDate, endDate);
      // A failed read is not kept: the next page asks again.
      cached.catch(() => this.closedDaysCache.delete(key));
      if (this.closedDaysCache.size >= CLOSED_DAYS_CACHE) this.closedDaysCache.delete(this.closedDaysCache.keys().next().value!);
      this.closedDaysCache.set(key, cached);
    }
    return cached;
  }

  /** The audit log, newest first, one workspace's or everyone's; `after` is the last entry id of the previous page. */
  async audit(options: { workspaceId?: string; after?: string; limit?: number } = {}): Promise<AuditPage> {
    const limit = options.limit ?? AUDIT_PAGE_SIZE;
    const after = options.after && isUUID(options.after) ? options.after : null;
    const workspaceId = options.workspaceId ?? null;
    // One more than the page: whether there is a next page.
    const rows = await this.auditLog.page(workspaceId, after, limit + 1);
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
    const updated = await this.consoleWorkspaces.transaction(async (manager) => {
      const before = await this.workspaces.getLocked(manager, await this.knownId(workspaceId));
      const snapshot = { tier: before.tier, custom_rate_limit_rpm: before.customRateLimitRpm };
      const after = await this.workspaces.setTier(workspaceId, tier, customRateLimitRpm, manager);
      await this.auditLog.append(manager, {
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
    return this.consoleWorkspaces.transaction(async (manager) => {
      const before = await this.consoleWorkspaces.lockedBalance(manager, workspaceId);
      if (before === null) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
      const done = await this.consoleWorkspaces.ledgerRow(manager, idempotencyKey);
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
      await this.auditLog.append(manager, {
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
    const changed = await this.consoleWorkspaces.transaction(async (manager) => {
      const workspace = await this.workspaces.getLocked(manager, await this.knownId(workspaceId));
      if (workspace.status === status) return false;
      await this.workspaces.setStatus(manager, workspaceId, status);
      await this.auditLog.append(manager, {
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
