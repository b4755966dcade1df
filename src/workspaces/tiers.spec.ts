import { effectiveRateLimitRpm, isTierName } from './tiers';

describe('tiers', () => {
  it('uses the tier rate, and a custom rate on enterprise only', () => {
    expect(effectiveRateLimitRpm('free', null)).toBe(5);
    expect(effectiveRateLimitRpm('enterprise', null)).toBe(-1);
    expect(effectiveRateLimitRpm('enterprise', 1200)).toBe(1200);
    expect(effectiveRateLimitRpm('team', 1200)).toBe(300);
  });

  it('knows the tier names', () => {
    expect(isTierName('pro')).toBe(true);
    expect(isTierName('platinum')).toBe(false);
    expect(isTierName(undefined)).toBe(false);
  });
});
