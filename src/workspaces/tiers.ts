/** The tier table of the spec. A workspace has exactly one tier. */
export const TIER_NAMES = ['free', 'hobby', 'pro', 'team', 'enterprise'] as const;
export type TierName = (typeof TIER_NAMES)[number];

export interface TierDefinition {
  /** Requests per minute; -1 means no limit. */
  rateLimitRpm: number;
  /** Assistants per workspace; -1 means no limit. */
  maxAssistants: number;
  removeBranding: boolean;
}

export const TIERS: Readonly<Record<TierName, Readonly<TierDefinition>>> = {
  free: { rateLimitRpm: 5, maxAssistants: 1, removeBranding: false },
  hobby: { rateLimitRpm: 10, maxAssistants: 2, removeBranding: false },
  pro: { rateLimitRpm: 60, maxAssistants: 10, removeBranding: true },
  team: { rateLimitRpm: 300, maxAssistants: -1, removeBranding: true },
  enterprise: { rateLimitRpm: -1, maxAssistants: -1, removeBranding: true },
};

export const UNLIMITED = -1;

/** Only enterprise workspaces may have a rate of their own (spec: "Custom rate limits"). */
export function effectiveRateLimitRpm(tier: TierName, customRateLimitRpm: number | null): number {
  if (tier === 'enterprise' && customRateLimitRpm !== null) return customRateLimitRpm;
  return TIERS[tier].rateLimitRpm;
}

export function isTierName(value: unknown): value is TierName {
  return typeof value === 'string' && (TIER_NAMES as readonly string[]).includes(value);
}
