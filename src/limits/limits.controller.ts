import { Controller, Get } from '@nestjs/common';
import { ApiExtraModels, ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { TIERS } from '../workspaces/tiers';
import { TierDefinitionDto, TierTableResponseDto, WorkspaceLimitsResponseDto } from './dto/limits.dto';

@ApiTags('Limits')
@ApiExtraModels(TierDefinitionDto)
@Controller('v1/limits')
export class LimitsController {
  @Get()
  @ApiOperation({ summary: "The caller's tier and limits" })
  @ApiStandardResponses({ ok: WorkspaceLimitsResponseDto })
  limits(@CurrentPrincipal() principal: Principal): WorkspaceLimitsResponseDto {
    const tier = TIERS[principal.tier];
    return {
      data: {
        tier: principal.tier,
        rateLimitRpm: principal.rateLimitRpm,
        nerfingRules: [],
        maxAssistants: tier.maxAssistants,
        removeBranding: tier.removeBranding,
      },
    };
  }

  @Get('tiers')
  @ApiOperation({ summary: 'The table of tiers' })
  @ApiStandardResponses({ ok: TierTableResponseDto })
  tiers(): TierTableResponseDto {
    return { data: { tiers: TIERS } };
  }
}
