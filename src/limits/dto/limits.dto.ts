import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { TIER_NAMES, TierName } from '../../common/tier-name';
import { NERFING_ACTIONS, NERFING_METRICS, NERFING_SCOPES, NERFING_WINDOWS } from '../nerfing/entities/nerfing-rule.entity';
import type { NerfingRuleView } from '../nerfing/nerfing-rule';
import type { TierPolicy } from '../tier-policy';

export class NerfingScopeDto {
  @ApiProperty({
    enum: NERFING_SCOPES,
    description:
      '`all`: every end user, each counted apart by `user_id` (requests without one count together, as one anonymous user); ' +
      '`user`: the one `user_id` below; `widget_visitors`: requests from the chat widget, per visitor.',
    example: 'all',
  })
  type: 'all' | 'user' | 'widget_visitors';

  @ApiPropertyOptional({ description: 'With `user`: the `user_id` the rule applies to.', example: 'user-42' })
  user_id?: string;
}

export class NerfingThresholdDto {
  @ApiProperty({
    enum: NERFING_METRICS,
    description:
      'What is counted per user in the window: `requests` (counted as they arrive), `tokens` (input plus output) or ' +
      '`cost_millicents` (what was charged), both added when a request settles.',
    example: 'requests',
  })
  metric: 'requests' | 'tokens' | 'cost_millicents';

  @ApiProperty({
    type: 'integer',
    minimum: 1,
    description:
      '`requests`: the action applies to requests after this many in the window; `tokens` and `cost_millicents`: once the ' +
      "user's settled requests of the window reach it.",
    example: 100,
  })
  value: number;
}

export class NerfingActionDto {
  @ApiProperty({
    enum: NERFING_ACTIONS,
    description:
      '`block`: 429 `rate_limit_exceeded` with `retry_after_seconds` until the window ends; `cap_output`: `max_tokens` lowered ' +
      'to `max_tokens` below; `downgrade`: `model` below is served (and billed) instead, when it is cheaper than the one asked for.',
    example: 'downgrade',
  })
  type: 'block' | 'cap_output' | 'downgrade';

  @ApiPropertyOptional({ type: 'integer', minimum: 1, description: 'With `cap_output`.', example: 256 })
  max_tokens?: number;

  @ApiPropertyOptional({ description: 'With `downgrade`: a model of `GET /v1/models`.', example: 'gpt-4o-mini' })
  model?: string;
}

/** A nerfing rule: the spec leaves the element shape of `nerfingRules` open; this is ours. */
export class NerfingRuleDto {
  @ApiProperty({ format: 'uuid', example: '3b1f6a0e-58c2-4d7e-9f0a-2c4e8b6d1a57' })
  id: string;

  @ApiProperty({ type: NerfingScopeDto })
  scope: NerfingScopeDto;

  @ApiProperty({
    enum: NERFING_WINDOWS,
    description: 'A calendar window in UTC: the current minute, hour, day or month. Counts start again at zero in the next one.',
    example: 'hour',
  })
  window: 'minute' | 'hour' | 'day' | 'month';

  @ApiProperty({ type: NerfingThresholdDto })
  threshold: NerfingThresholdDto;

  @ApiProperty({ type: NerfingActionDto })
  action: NerfingActionDto;
}

export class WorkspaceLimitsDto {
  @ApiProperty({ enum: TIER_NAMES, example: 'pro' })
  tier: TierName;

  @ApiProperty({ description: 'Requests per minute in force; -1 means no limit.', example: 60 })
  rateLimitRpm: number;

  @ApiProperty({
    type: [NerfingRuleDto],
    description:
      "The workspace's restriction rules for its end users, in the order they apply (managed in the dashboard: Settings, Limits).",
    example: [
      {
        id: '3b1f6a0e-58c2-4d7e-9f0a-2c4e8b6d1a57',
        scope: { type: 'all' },
        window: 'hour',
        threshold: { metric: 'requests', value: 100 },
        action: { type: 'downgrade', model: 'gpt-4o-mini' },
      },
    ],
  })
  nerfingRules: NerfingRuleView[];

  @ApiProperty({ description: 'Nerfing rules allowed by the tier; -1 means no limit.', example: 20 })
  maxNerfingRules: number;

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
