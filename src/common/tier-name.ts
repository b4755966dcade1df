/**
 * The tiers of the spec; a workspace has exactly one. Only the names live here, because the
 * principal of every request and the configuration carry one; what each tier allows is the
 * tier policy (`limits/tier-policy.ts`).
 */
export const TIER_NAMES = ['free', 'hobby', 'pro', 'team', 'enterprise'] as const;
export type TierName = (typeof TIER_NAMES)[number];

export function isTierName(value: unknown): value is TierName {
  return typeof value === 'string' && (TIER_NAMES as readonly string[]).includes(value);
}
