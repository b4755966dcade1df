import { Body, Get, Param, ParseUUIDPipe, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { randomUUID } from 'node:crypto';
import { parseDollars } from '../../common/dollars';
import { ApiError } from '../../common/errors/api-error';
import { TIER_NAMES } from '../../common/tier-name';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { TIERS } from '../../limits/tier-policy';
import { Actor } from '../../operator/audit-log';
import { AuditRow, OperatorConsoleService, REASON_MAX_LENGTH, WorkspaceOverview } from '../../operator/operator-console.service';
import { UsageStatsService } from '../../usage/usage-stats.service';
import { LedgerQueryService } from '../../wallet/ledger-query.service';
import { ApiKeysService } from '../../workspaces/api-keys.service';
import { queryString } from '../billing/billing-form';
import { DashboardController, OperatorOnly } from '../dashboard.decorators';
import { FormFields, formText } from '../form-fields';
import { formatDateTime, formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';
import { allowedPeriods, dailyChartRow, lastDays, periodDays } from '../usage/usage-query';

/** The `:id` of a console route is a workspace id: anything else (a NUL, say) is a 400 before it reaches a query or a redirect. */
const WORKSPACE_ID = new ParseUUIDPipe({ exceptionFactory: () => ApiError.badRequest('id must be the id of a workspace (a UUID).', 'id') });

/** Ledger rows and audit entries shown on a workspace's page (the newest). */
const WORKSPACE_PAGE_ROWS = 20;
/** Days of usage shown on a workspace's page. */
const WORKSPACE_USAGE_DAYS = 30;

/**
 * The operator console (docs/dashboard.md, "Operator console"): every workspace with its
 * money and this month's usage, one workspace's ledger, usage and keys (never its
 * conversations), the audited actions on it, platform-wide figures and the audit log. Every
 * route is `@OperatorOnly()`: 404 to anyone else, signed in or not.
 */
@DashboardController('operator')
export class OperatorPagesController {
  constructor(
    private readonly pages: PagesService,
    private readonly console: OperatorConsoleService,
    private readonly stats: UsageStatsService,
    private readonly ledger: LedgerQueryService,
    private readonly apiKeys: ApiKeysService,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  @Get()
  @OperatorOnly()
  async workspaces(@Req() req: PageRequest, @Res() res: Response, @Query('q') q: unknown, @Query('page') page: unknown): Promise<void> {
    const search = typeof q === 'string' ? q.slice(0, 200) : '';
    const asked = Number(page);
    const list = await this.console.listWorkspaces(search, Number.isSafeInteger(asked) ? asked : 1);
    const href = (to: number) => `/operator${queryString({ q: search || undefined, page: to === 1 ? undefined : String(to) })}`;
    await this.pages.render(req, res, 'operator-workspaces', {
      search,
      total: list.total.toLocaleString('en-US'),
      page: list.page,
      pages: list.pages,
      rows: list.rows.map(workspaceRow),
      previousHref: list.page > 1 ? href(list.page - 1) : null,
      nextHref: list.page < list.pages ? href(list.page + 1) : null,
    });
  }

  @Get('workspaces/:id')
  @OperatorOnly()
  async workspace(@Req() req: PageRequest, @Res() res: Response, @Param('id', WORKSPACE_ID) id: string): Promise<void> {
    const workspace = await this.console.workspace(id);
    const period = this.stats.period(lastDays(WORKSPACE_USAGE_DAYS));
    const [members, keys, ledger, summary, daily, audit] = await Promise.all([
      this.console.members(id),
      this.apiKeys.list(id),
      this.ledger.page(id, {}, { limit: WORKSPACE_PAGE_ROWS }),
      this.stats.summary(id, period),
      this.stats.daily(id, period),
      this.console.audit({ workspaceId: id, limit: WORKSPACE_PAGE_ROWS }),
    ]);
    await this.pages.render(req, res, 'operator-workspace', {
      workspace: workspaceRow(workspace),
      tiers: TIER_NAMES.map((name) => ({ name, customRate: TIERS[name].customRateAllowed })),
      reasonMax: REASON_MAX_LENGTH,
      // A new nonce per page shown: the same form submitted twice moves the money once.
      nonce: randomUUID(),
      members,
      keys: keys.map((key) => ({
        name: key.name ?? '(no name)',
        prefix: `${key.displayPrefix}…`,
        status: key.status,
        created: formatDateTime(key.createdAt),
        lastUsed: key.lastUsedAt ? formatDateTime(key.lastUsedAt) : 'never',
      })),
      ledger: ledger.data.map((row) => ({
        at: formatDateTime(row.createdAt),
        type: row.type,
        amount: formatMillicents(row.amountMillicents),
        balance: formatMillicents(row.balanceAfterMillicents),
        description: row.description,
      })),
      usage: {
        start: period.startDate,
        end: period.endDate,
        requests: summary.summary.total_requests.toLocaleString('en-US'),
        tokens: summary.summary.total_tokens.toLocaleString('en-US'),
        cost: formatMillicents(summary.summary.total_cost_millicents),
        byModel: summary.by_model.map((row) => ({
          model: row.model,
          requests: row.requests.toLocaleString('en-US'),
          cost: formatMillicents(row.cost_millicents),
        })),
        daily: daily.map((row) => dailyChartRow({ ...row, costMillicents: row.cost_millicents })),
      },
      audit: audit.rows.map(auditRow),
    });
  }

  @Post('workspaces/:id/tier')
  @OperatorOnly()
  async setTier(@Req() req: PageRequest, @Res() res: Response, @Param('id', WORKSPACE_ID) id: string, @Body() form: FormFields): Promise<void> {
    const back = `/operator/workspaces/${id}`;
    const [tier, rpmText, reason] = [formText(form, 'tier'), formText(form, 'rpm').trim(), formText(form, 'reason')];
    if (rpmText !== '' && !/^-?\d+$/.test(rpmText)) {
      return this.pages.redirect(req, res, back, { kind: 'error', text: 'The custom rate limit must be a whole number (-1 for no limit), or empty.' });
    }
    try {
      const updated = await this.console.setTier(actorOf(req), id, tier, rpmText === '' ? undefined : Number(rpmText), reason);
      const rate = updated.customRateLimitRpm === null ? '' : `, custom rate ${updated.customRateLimitRpm === -1 ? 'unlimited' : `${updated.customRateLimitRpm} requests a minute`}`;
      await this.pages.redirect(req, res, back, { kind: 'success', text: `The workspace is now on the ${updated.tier} tier${rate}.` });
    } catch (error) {
      await this.pages.redirect(req, res, back, { kind: 'error', text: errorText(error) });
    }
  }

  @Post('workspaces/:id/balance')
  @OperatorOnly()
  async adjustBalance(@Req() req: PageRequest, @Res() res: Response, @Param('id', WORKSPACE_ID) id: string, @Body() form: FormFields): Promise<void> {
    const back = `/operator/workspaces/${id}`;
    const [amount, directionText, reason, nonce] = ['amount', 'direction', 'reason', 'nonce'].map((name) => formText(form, name));
    const millicents = parseDollars(amount);
    const direction = directionText === 'debit' ? -1 : directionText === 'credit' ? 1 : 0;
    if (!millicents || direction === 0) {
      return this.pages.redirect(req, res, back, { kind: 'error', text: 'Choose credit or debit and enter an amount in dollars, such as 5 or 12.50.' });
    }
    try {
      const { transaction, duplicate } = await this.console.adjustBalance(actorOf(req), id, direction * millicents, reason, nonce);
      const text = duplicate
        ? `This form had already been submitted: ${formatMillicents(Math.abs(transaction.amountMillicents))} was ${transaction.amountMillicents > 0 ? 'credited' : 'debited'} once.`
        : `${direction > 0 ? 'Credited' : 'Debited'} ${formatMillicents(millicents)}; the balance is now ${formatMillicents(transaction.balanceAfterMillicents)}.`;
      await this.pages.redirect(req, res, back, { kind: duplicate ? 'info' : 'success', text });
    } catch (error) {
      await this.pages.redirect(req, res, back, { kind: 'error', text: errorText(error) });
    }
  }

  @Post('workspaces/:id/suspend')
  @OperatorOnly()
  async suspend(@Req() req: PageRequest, @Res() res: Response, @Param('id', WORKSPACE_ID) id: string, @Body() form: FormFields): Promise<void> {
    await this.changeStatus(req, res, id, 'suspended', formText(form, 'reason'));
  }

  @Post('workspaces/:id/resume')
  @OperatorOnly()
  async resume(@Req() req: PageRequest, @Res() res: Response, @Param('id', WORKSPACE_ID) id: string, @Body() form: FormFields): Promise<void> {
    await this.changeStatus(req, res, id, 'active', formText(form, 'reason'));
  }

  @Get('figures')
  @OperatorOnly()
  async figures(@Req() req: PageRequest, @Res() res: Response, @Query('days') daysAsked: unknown): Promise<void> {
    const days = periodDays(daysAsked, this.config.usageRetentionDays);
    const { start_date, end_date } = lastDays(days);
    const figures = await this.console.figures(start_date, end_date);
    await this.pages.render(req, res, 'operator-figures', {
      days,
      periods: allowedPeriods(this.config.usageRetentionDays).map((value) => ({ days: value, href: `/operator/figures${value === 30 ? '' : `?days=${value}`}` })),
      period: { start: start_date, end: end_date },
      totals: {
        requests: figures.totals.requests.toLocaleString('en-US'),
        tokens: figures.totals.tokens.toLocaleString('en-US'),
        cost: formatMillicents(figures.totals.costMillicents),
        failed: figures.failures.reduce((sum, row) => sum + row.requests, 0).toLocaleString('en-US'),
      },
      daily: figures.daily.map(dailyChartRow),
      topWorkspaces: figures.topWorkspaces.map((row) => ({
        id: row.id,
        name: row.name ?? '(deleted workspace)',
        requests: row.requests.toLocaleString('en-US'),
        cost: formatMillicents(row.costMillicents),
      })),
      topModels: figures.topModels.map((row) => ({
        model: row.model,
        requests: row.requests.toLocaleString('en-US'),
        tokens: row.tokens.toLocaleString('en-US'),
        cost: formatMillicents(row.costMillicents),
      })),
      failures: figures.failures.map((row) => ({ errorCode: row.errorCode, requests: row.requests.toLocaleString('en-US') })),
    });
  }

  @Get('audit')
  @OperatorOnly()
  async audit(@Req() req: PageRequest, @Res() res: Response, @Query('after') after: unknown): Promise<void> {
    const page = await this.console.audit({ after: typeof after === 'string' ? after : undefined });
    await this.pages.render(req, res, 'operator-audit', {
      rows: page.rows.map(auditRow),
      nextHref: page.nextCursor ? `/operator/audit?after=${page.nextCursor}` : null,
      firstHref: typeof after === 'string' && after ? '/operator/audit' : null,
    });
  }

  private async changeStatus(req: PageRequest, res: Response, id: string, status: 'active' | 'suspended', reason: string | null): Promise<void> {
    const back = `/operator/workspaces/${id}`;
    try {
      const { changed } = await this.console.setStatus(actorOf(req), id, status, reason);
      const text = status === 'suspended'
        ? changed ? 'The workspace is suspended: its API keys and widgets are refused (403 workspace_suspended).' : 'The workspace was already suspended.'
        : changed ? 'The workspace is resumed: its API keys work again.' : 'The workspace was not suspended.';
      await this.pages.redirect(req, res, back, { kind: changed ? 'success' : 'info', text });
    } catch (error) {
      await this.pages.redirect(req, res, back, { kind: 'error', text: errorText(error) });
    }
  }
}

function actorOf(req: PageRequest): Actor {
  return { id: req.user!.id, email: req.user!.email };
}

/** A client error's message for a flash; a 404 (unknown workspace) too. Anything else is rethrown. */
function errorText(error: unknown): string {
  if (error instanceof Error && 'status' in error && (error as { status: number }).status === 404) return error.message;
  return Object.values(formErrors(error))[0] ?? 'That did not work.';
}

function workspaceRow(row: WorkspaceOverview) {
  return {
    id: row.id,
    name: row.name,
    tier: row.tier,
    customRate: row.customRateLimitRpm === null ? null : row.customRateLimitRpm === -1 ? 'unlimited' : `${row.customRateLimitRpm} rpm`,
    customRateValue: row.customRateLimitRpm === null ? '' : String(row.customRateLimitRpm),
    status: row.status,
    created: formatDateTime(row.createdAt),
    balance: formatMillicents(row.balanceMillicents),
    reserved: formatMillicents(row.reservedMillicents),
    spend: formatMillicents(row.spendMonthMillicents),
    requests: row.requestsMonth.toLocaleString('en-US'),
    members: row.members,
  };
}

const ACTION_LABELS: Record<string, string> = {
  set_tier: 'Changed the tier',
  adjust_balance: 'Credit or debit',
  suspend: 'Suspended',
  resume: 'Resumed',
  operator_grant: 'Made an operator',
  operator_revoke: 'Removed an operator',
};

function auditRow(row: AuditRow) {
  return {
    at: formatDateTime(row.at),
    operator: row.operatorEmail,
    action: ACTION_LABELS[row.action] ?? row.action,
    workspaceId: row.workspaceId,
    workspaceName: row.workspaceName,
    before: row.before ? JSON.stringify(row.before) : '',
    after: row.after ? JSON.stringify(row.after) : '',
    reason: row.reason ?? '',
  };
}
