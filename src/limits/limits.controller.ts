import { Controller, Get } from '@nestjs/common';
import { ApiExtraModels, ApiOperation, ApiTags } from '@nestjs/swagger';
import { CurrentPrincipal } from '../common/auth/auth.decorators';
import type { Principal } from '../common/http/request-context';
import { ApiStandardResponses } from '../common/openapi/api-responses';
import { TIER_NAMES } from '../common/tier-name';
import { TierDefinitionDto, TierTableResponseDto, WorkspaceLimitsResponseDto } from './dto/limits.dto';
import { viewOf } from './nerfing/nerfing-rule';
import { NerfingRulesService } from './nerfing/nerfing-rules.service';
import { TIERS } from './tier-policy';

@ApiTags('Limits')
@ApiExtraModels(TierDefinitionDto)
@Controller('v1/limits')
export class LimitsController {
  constructor(private readonly nerfingRules: NerfingRulesService) {}

  @Get()
  @ApiOperation({ summary: "The caller's tier and limits", description: "With the workspace's nerfing rules, read fresh from the database." })
  @ApiStandardResponses({ ok: WorkspaceLimitsResponseDto })
  async limits(@CurrentPrincipal() principal: Principal): Promise<WorkspaceLimitsResponseDto> {
    const tier = TIERS[principal.tier];
    const rules = await this.nerfingRules.list(principal.workspaceId);
    return {
      data: {
        tier: principal.tier,
        rateLimitRpm: principal.rateLimitRpm,
        nerfingRules: rules.map(viewOf),
        maxAssistants: tier.maxAssistants,
        removeBranding: tier.removeBranding,
        maxNerfingRules: tier.maxNerfingRules,
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
