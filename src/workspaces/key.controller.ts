import { Controller, Get } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { ApiKeysService, limitsOf } from './api-keys.service';
import { ApiKeyInfoDto, ApiKeyInfoResponseDto } from './dto/key.dto';
import { spendPeriodOf } from './key-limits';
import { KeySpendService } from './key-spend';

const MILLICENTS_PER_DOLLAR = 100_000;
const dollars = (millicents: number) => millicents / MILLICENTS_PER_DOLLAR;

@ApiTags('Keys')
@Controller('v1/key')
export class KeyController {
  constructor(
    private readonly apiKeys: ApiKeysService,
    private readonly spend: KeySpendService,
  ) {}

  @Get()
  @ApiOperation({
    summary: 'The calling API key: its limits and what it spent',
    description:
      "Like OpenRouter's `GET /api/v1/key`: the key's spending limit and its reset, what is left in the current period, " +
      'what it spent today, this week and this month, and its other limits (models, assistants, rate, client addresses). ' +
      'Read fresh from the database.',
  })
  @ApiStandardResponses({ ok: ApiKeyInfoResponseDto })
  async key(@CurrentPrincipal() principal: Principal): Promise<ApiKeyInfoResponseDto> {
    const key = await this.apiKeys.describe(principal.apiKeyId);
    const spent = (await this.spend.of(principal.workspaceId, [key.id])).get(key.id)!;
    const limits = limitsOf(key);
    const limit = limits.spendLimitMillicents;
    const remaining = limit === null ? null : Math.max(limit - spent.period - spent.held, 0);
    const resetsAt = limit === null ? null : (spendPeriodOf(limits.spendLimitPeriod)?.end ?? null);
    const data: ApiKeyInfoDto = {
      id: key.id,
      name: key.name,
      label: key.name ?? key.displayPrefix,
      display_prefix: key.displayPrefix,
      workspace_id: key.workspaceId,
      limit: limit === null ? null : dollars(limit),
      limit_millicents: limit,
      limit_reset: limit === null || limits.spendLimitPeriod === 'none' ? null : limits.spendLimitPeriod,
      limit_resets_at: resetsAt?.toISOString() ?? null,
      limit_remaining: remaining === null ? null : dollars(remaining),
      limit_remaining_millicents: remaining,
      usage: dollars(spent.allTime),
      period_usage_millicents: spent.period,
      reserved_millicents: spent.held,
      usage_daily: dollars(spent.today),
      usage_weekly: dollars(spent.week),
      usage_monthly: dollars(spent.month),
      allowed_models: limits.allowedModels,
      allowed_assistants: limits.allowedAssistants,
      rate_limit_rpm: limits.rateLimitRpm,
      allowed_ips: limits.allowedIps,
      expires_at: key.expiresAt?.toISOString() ?? null,
      created_at: key.createdAt.toISOString(),
    };
    return { data };
  }
}
