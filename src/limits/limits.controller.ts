import { Controller, Get } from '@nestjs/common';
import { ApiExtraModels, ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { TIER_NAMES } from '../common/tier-name';
import { TierDefinitionDto, TierTableResponseDto, WorkspaceLimitsResponseDto } from './dto/limits.dto';
import { TIERS } from './tier-policy';

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
        nerfingRules: [...tier.nerfingRules],
        maxAssistants: tier.maxAssistants,
        removeBranding: tier.removeBranding,
      },
    };
  }

  @Get('tiers')
  @ApiOperation({ summary: 'The table of tiers' })
  @ApiStandardResponses({ ok: TierTableResponseDto })
  tiers(): TierTableResponseDto {
    const tiers = Object.fromEntries(TIER_NAMES.map((name) => [name, TierDefinitionDto.of(TIERS[name])]));
    return { data: { tiers: tiers as TierTableResponseDto['data']['tiers'] } };
  }
}
