import { Injectable } from '@nestjs/common';
import { AssistantsService } from '../../assistants/assistants.service';
import { UsageStatsService } from '../../usage/usage-stats.service';
import { AutoTopupSettingsService, AutoTopupSummary } from '../../wallet/auto-topup-settings.service';
import { WalletBalance, WalletService } from '../../wallet/wallet.service';
import { ApiKeysService } from '../../workspaces/api-keys.service';
import type { TierName } from '../../common/tier-name';
import { effectiveRateLimitRpm, TIERS } from '../../limits/tier-policy';
import { WorkspacesService } from '../../workspaces/workspaces.service';

/** Below this much available money ($1.00) the overview warns, unless auto top-up watches the balance. */
export const LOW_BALANCE_MILLICENTS = 100_000;

export interface Overview {
  tier: TierName;
  wallet: WalletBalance;
  /** This calendar month (UTC) so far. */
  month: { startDate: string; requests: number; costMillicents: string };
  /** Requests per minute; -1: no limit. */
  rateLimitRpm: number;
  assistants: { count: number; max: number };
  /** Auto top-up as it will act: null when it is off or cannot run (no payment provider). */
  autoTopup: AutoTopupSummary | null;
  /** Set when the available money is below the threshold the banner uses. */
  lowBalance: { thresholdMillicents: number } | null;
  steps: { key: boolean; call: boolean; assistant: boolean };
}

/** The numbers of a workspace's front page, read from the services that own them. */
@Injectable()
export class OverviewService {
  constructor(
    private readonly workspaces: WorkspacesService,
    private readonly wallet: WalletService,
    private readonly usage: UsageStatsService,
    private readonly assistants: AssistantsService,
    private readonly apiKeys: ApiKeysService,
    private readonly autoTopups: AutoTopupSettingsService,
  ) {}

  async of(workspaceId: string, now = new Date()): Promise<Overview> {
    const [workspace, wallet, month, assistants, keys, used, autoTopupSettings] = await Promise.all([
      this.workspaces.get(workspaceId),
      this.wallet.balance(workspaceId),
      this.usage.monthToDate(workspaceId, now),
      this.assistants.list(workspaceId),
      this.apiKeys.list(workspaceId),
      this.usage.hasUsage(workspaceId),
      this.autoTopups.summary(workspaceId),
    ]);
    const autoTopup = autoTopupSettings?.enabled && this.autoTopups.providerName ? autoTopupSettings : null;
    const thresholdMillicents = autoTopup ? autoTopup.thresholdMillicents : LOW_BALANCE_MILLICENTS;
    return {
      tier: workspace.tier,
      wallet,
      month: { startDate: month.startDate, requests: month.requests, costMillicents: month.costMillicents },
      rateLimitRpm: effectiveRateLimitRpm(workspace.tier, workspace.customRateLimitRpm),
      assistants: { count: assistants.length, max: TIERS[workspace.tier].maxAssistants },
      autoTopup,
      lowBalance: wallet.availableMillicents < thresholdMillicents ? { thresholdMillicents } : null,
      steps: {
        key: keys.some((key) => key.status !== 'revoked'),
        call: used,
        assistant: assistants.length > 0,
      },
    };
  }
}
