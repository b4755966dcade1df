import { ApiProperty } from '@nestjs/swagger';
import { TIER_NAMES, TierName } from '../../common/tier-name';
import type { TierPolicy } from '../tier-policy';

export class WorkspaceLimitsDto {
  @ApiProperty({ enum: TIER_NAMES, example: 'pro' })
  tier: TierName;

  @ApiProperty({ description: 'Requests per minute in force; -1 means no limit.', example: 60 })
  rateLimitRpm: number;

  @ApiProperty({
    type: 'array',
    items: { type: 'object' },
    description: 'Restriction rules applied to the workspace. None are defined yet: always empty.',
    example: [],
  })
  nerfingRules: unknown[];

  @ApiProperty({ description: 'Assistants allowed by the tier; -1 means no limit.', example: 10 })
  maxAssistants: number;

  @ApiProperty({ example: true })
  removeBranding: boolean;
}

export class WorkspaceLimitsResponseDto {
  @ApiProperty({ type: WorkspaceLimitsDto })
  data: WorkspaceLimitsDto;
}

/** The spec's columns of the tier table; the policy's other rules are not part of this answer. */
export class TierDefinitionDto {
  @ApiProperty({ description: '-1 means unlimited', example: 60 })
  rateLimitRpm: number;

  @ApiProperty({ description: '-1 means unlimited', example: 10 })
  maxAssistants: number;

  @ApiProperty({ example: true })
  removeBranding: boolean;

  static of(policy: TierPolicy): TierDefinitionDto {
    return { rateLimitRpm: policy.rateLimitRpm, maxAssistants: policy.maxAssistants, removeBranding: policy.removeBranding };
  }
}

export class TierTableDto {
  @ApiProperty({
    type: 'object',
    additionalProperties: { $ref: '#/components/schemas/TierDefinitionDto' },
    example: {
      free: { rateLimitRpm: 5, maxAssistants: 1, removeBranding: false },
      hobby: { rateLimitRpm: 10, maxAssistants: 2, removeBranding: false },
      pro: { rateLimitRpm: 60, maxAssistants: 10, removeBranding: true },
      team: { rateLimitRpm: 300, maxAssistants: -1, removeBranding: true },
      enterprise: { rateLimitRpm: -1, maxAssistants: -1, removeBranding: true },
    },
  })
  tiers: Record<TierName, TierDefinitionDto>;
}

export class TierTableResponseDto {
  @ApiProperty({ type: TierTableDto })
  data: TierTableDto;
}
