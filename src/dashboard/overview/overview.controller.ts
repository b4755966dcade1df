import { Get, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { AccountsService } from '../../accounts/accounts.service';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { PASSWORD_MIN_LENGTH } from '../../accounts/passwords';
import { UNLIMITED } from '../../limits/tier-policy';
import { WidgetSpendingService } from '../../widget/widget-spending.service';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { OverviewService } from './overview.service';

/** A workspace's front page: money, this month's use, limits, and the first steps until they are done. */
@DashboardController('w/:workspaceId')
export class OverviewController {
  constructor(
    private readonly pages: PagesService,
    private readonly overviews: OverviewService,
    private readonly widgetSpending: WidgetSpendingService,
    private readonly accounts: AccountsService,
  ) {}

  @Get()
  @RequireRole('member')
  async overview(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const workspaceId = req.member!.id;
    req.session.lastWorkspaceId = workspaceId;
    const [overview, widgetsNearCap, hasPassword] = await Promise.all([
      this.overviews.of(workspaceId),
      this.widgetSpending.nearCapToday(workspaceId),
      this.accounts.hasPassword(req.user!.id),
    ]);
    const { steps } = overview;
    await this.pages.render(req, res, 'overview', {
      overview,
      money: {
        balance: formatMillicents(overview.wallet.balanceMillicents),
        reserved: formatMillicents(overview.wallet.reservedMillicents),
        available: formatMillicents(overview.wallet.availableMillicents),
        monthSpend: formatMillicents(overview.month.costMillicents),
        threshold: overview.lowBalance ? formatMillicents(overview.lowBalance.thresholdMillicents) : null,
        autoTopupAmount: overview.autoTopup ? formatMillicents(overview.autoTopup.amountMillicents) : null,
      },
      rateLimit: overview.rateLimitRpm === UNLIMITED ? 'unlimited' : `${overview.rateLimitRpm.toLocaleString('en-US')} per minute`,
      assistantsText:
        overview.assistants.max === UNLIMITED
          ? `${overview.assistants.count} (no limit)`
          : `${overview.assistants.count} of ${overview.assistants.max}`,
      monthName: new Date(`${overview.month.startDate}T00:00:00Z`).toLocaleString('en-US', { month: 'long', timeZone: 'UTC' }),
      canManage: roleAtLeast(req.member!.role, 'admin'),
      // Signed in by the first-start link, without a password yet: asked here, where the link lands.
      setPassword: hasPassword ? null : { minLength: PASSWORD_MIN_LENGTH },
      showFirstSteps: !(steps.key && steps.call && steps.assistant),
      apiBase: this.pages.absoluteUrl(req, '/v1'),
      // Chat widgets near or at their daily cap today: a script may be driving them.
      widgetsNearCap: widgetsNearCap.map((widget) => ({
        title: widget.title,
        path: `/w/${workspaceId}/assistants/${widget.assistantId}/widget`,
        spent: formatMillicents(widget.spentMillicents),
        cap: formatMillicents(widget.capMillicents),
        capReached: widget.capReached,
      })),
    });
  }
}
