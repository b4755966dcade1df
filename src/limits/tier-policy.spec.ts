import { isTierName, TIER_NAMES } from '../common/tier-name';
import { effectiveRateLimitRpm, TIERS } from './tier-policy';

describe('tier policy', () => {
  it('uses the tier rate, and a custom rate where the tier allows one (enterprise)', () => {
    expect(effectiveRateLimitRpm('free', null)).toBe(5);
    expect(effectiveRateLimitRpm('enterprise', null)).toBe(-1);
    expect(effectiveRateLimitRpm('enterprise', 1200)).toBe(1200);
    expect(effectiveRateLimitRpm('team', 1200)).toBe(300);
    expect(TIER_NAMES.filter((tier) => TIERS[tier].customRateAllowed)).toEqual(['enterprise']);
  });

  it('has a policy for every tier name, in the order of the names', () => {
    expect(Object.keys(TIERS)).toEqual([...TIER_NAMES]);
  });

  it('knows the tier names', () => {
    expect(isTierName('pro')).toBe(true);
    expect(isTierName('platinum')).toBe(false);
    expect(isTierName(undefined)).toBe(false);
  });
});
