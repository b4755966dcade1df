import { Controller, Get, Query } from '@nestjs/common';
import { ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import {
  DailyUsageResponseDto,
  RecentUsageQueryDto,
  UsageRangeQueryDto,
  UsageRecordPageDto,
  UsageSummaryResponseDto,
} from './dto/usage.dto';
import { UsageStatsService } from './usage-stats.service';

const RANGE_RULES =
  'Dates are UTC days, both included; default: the last 30 days ending today. A range may not start before ' +
  'the retention window (today - (USAGE_RETENTION_DAYS - 1)) nor span more than USAGE_RETENTION_DAYS days. ' +
  'Bad dates, an end before the start, or a range outside the window: `400 bad_request` with `param` naming the parameter.';

@ApiTags('Usage')
@Controller('v1/usage')
export class UsageController {
  constructor(private readonly stats: UsageStatsService) {}

  @Get()
  @ApiStandardResponses({ ok: UsageSummaryResponseDto, errors: [400] })
  @ApiOperation({
    summary: 'Usage summary for a date range',
    description: `Totals of the workspace's requests (successful and failed) and their cost per model, per provider that answered and per API key, highest cost first; with \`api_key_id\`, only that key's. ${RANGE_RULES}`,
  })
  async summary(
    @CurrentPrincipal() principal: Principal,
    @Query() query: UsageRangeQueryDto,
  ): Promise<UsageSummaryResponseDto> {
    return { data: await this.stats.summary(principal.workspaceId, this.stats.period(query), query.api_key_id) };
  }

  @Get('recent')
  @ApiStandardResponses({ ok: UsageRecordPageDto, errors: [400] })
  @ApiOperation({
    summary: 'Recent usage records, newest first',
    description: 'One record per chat request, cursor-paginated like `/v1/wallet/transactions`, optionally filtered.',
  })
  recent(@CurrentPrincipal() principal: Principal, @Query() query: RecentUsageQueryDto): Promise<UsageRecordPageDto> {
    return this.stats.recent(principal.workspaceId, {
      limit: query.limit ?? 20,
      startingAfter: query.starting_after,
      model: query.model,
      apiKeyId: query.api_key_id,
      assistantId: query.assistant_id,
      userId: query.user_id,
      status: query.status,
    });
  }

  @Get('daily')
  @ApiStandardResponses({ ok: DailyUsageResponseDto, errors: [400] })
  @ApiOperation({
    summary: 'Usage per day, newest first',
    description: `One entry per UTC day of the range, days without requests included as zeros. ${RANGE_RULES}`,
  })
  async daily(@CurrentPrincipal() principal: Principal, @Query() query: UsageRangeQueryDto): Promise<DailyUsageResponseDto> {
    return { data: await this.stats.daily(principal.workspaceId, this.stats.period(query), query.api_key_id) };
  }
}
