import { addressAllowed, addressRanges, assertKeyMayRun, assertKnownAssistants, checkedKeyLimits, NO_KEY_LIMITS, spendPeriodOf } from './key-limits';

describe('key limits', () => {
  it('starts each period at UTC midnight, weeks on Monday, months on the 1st', () => {
    const sunday = new Date('2026-11-29T23:30:00Z');
    expect(spendPeriodOf('daily', sunday)).toEqual({ start: new Date('2026-11-29T00:00:00Z'), end: new Date('2026-11-30T00:00:00Z') });
    expect(spendPeriodOf('weekly', sunday)).toEqual({ start: new Date('2026-11-23T00:00:00Z'), end: new Date('2026-11-30T00:00:00Z') });
    expect(spendPeriodOf('weekly', new Date('2026-11-30T00:00:00Z'))!.start).toEqual(new Date('2026-11-30T00:00:00Z'));
    expect(spendPeriodOf('monthly', new Date('2026-12-31T12:00:00Z'))).toEqual({ start: new Date('2026-12-01T00:00:00Z'), end: new Date('2027-01-01T00:00:00Z') });
    expect(spendPeriodOf('none', sunday)).toBeNull();
  });

  it('matches client addresses against IPv4 and IPv6 ranges, IPv4 mapped into IPv6 too', () => {
    const ranges = addressRanges(['203.0.113.0/24', '2001:db8::/32', '198.51.100.7']);
    expect(addressAllowed(ranges, '203.0.113.200')).toBe(true);
    expect(addressAllowed(ranges, '::ffff:203.0.113.9')).toBe(true);
    expect(addressAllowed(ranges, '203.0.114.1')).toBe(false);
    expect(addressAllowed(ranges, '2001:db8:1::5')).toBe(true);
    expect(addressAllowed(ranges, '198.51.100.7')).toBe(true);
    expect(addressAllowed(ranges, '198.51.100.8')).toBe(false);
    expect(addressAllowed(ranges, undefined)).toBe(false);
  });

  it('refuses what a person could get wrong, naming the field', () => {
    for (const [change, param] of [
      [{ spendLimitMillicents: 1.5 }, 'spend_limit'],
      [{ spendLimitPeriod: 'hourly' }, 'spend_limit_period'],
      [{ rateLimitRpm: 0 }, 'rate_limit_rpm'],
      [{ allowedModels: ['  '] }, 'allowed_models'],
      [{ allowedAssistants: Array.from({ length: 101 }, (_, i) => `a${i}`) }, 'allowed_assistants'],
      [{ allowedIps: ['10.0.0.0/8/8'] }, 'allowed_ips'],
      [{ allowedIps: ['example.com'] }, 'allowed_ips'],
      [{ allowedIps: ['10.0.0.0/'] }, 'allowed_ips'],
    ] as const) {
      expect(() => checkedKeyLimits(NO_KEY_LIMITS, change as never)).toThrow(expect.objectContaining({ param }));
    }
    expect(checkedKeyLimits(NO_KEY_LIMITS, { allowedModels: [' gpt-4o ', 'gpt-4o', 'o4-mini'] }).allowedModels).toEqual(['gpt-4o', 'o4-mini']);
  });

  it('refuses a model outside the catalog and an impossible assistant slug, naming the entry; an old entry stays', () => {
    const catalog = { isModel: (id: string) => ['gpt-4o', 'gpt-4o-mini'].includes(id) };
    expect(() => checkedKeyLimits(NO_KEY_LIMITS, { allowedModels: ['gpt-4o', 'no-such-model'] }, catalog)).toThrow(
      expect.objectContaining({ param: 'allowed_models', message: expect.stringContaining('"no-such-model" is not a model of the catalog') }),
    );
    expect(() => checkedKeyLimits(NO_KEY_LIMITS, { allowedAssistants: ['NoSuchSlug'] }, catalog)).toThrow(
      expect.objectContaining({ param: 'allowed_assistants', message: expect.stringContaining('"NoSuchSlug" is not an assistant slug') }),
    );
    // A model since removed from the catalog does not block a change of another limit.
    const stored = { ...NO_KEY_LIMITS, allowedModels: ['retired-model'] };
    expect(checkedKeyLimits(stored, { rateLimitRpm: 10 }, catalog).allowedModels).toEqual(['retired-model']);
    expect(() => assertKnownAssistants(['support', 'sales'], ['support'])).toThrow(/"sales" is not an assistant of this workspace/);
    expect(() => assertKnownAssistants(['support'], ['support'])).not.toThrow();
  });

  it("refuses an assistant or a model outside the key's lists, and allows what is in them", () => {
    const limits = { ...NO_KEY_LIMITS, allowedModels: ['gpt-4o-mini'], allowedAssistants: ['support'] };
    expect(() => assertKeyMayRun(limits, { models: ['gpt-4o-mini'], assistant: null })).not.toThrow();
    expect(() => assertKeyMayRun(limits, { models: ['gpt-4o-mini', 'gpt-4o'], assistant: null })).toThrow(expect.objectContaining({ code: 'model_not_allowed', status: 403 }));
    expect(() => assertKeyMayRun(limits, { models: ['gpt-4o-mini'], assistant: { slug: 'sales', model: 'gpt-4o-mini' } })).toThrow(
      expect.objectContaining({ code: 'assistant_not_allowed' }),
    );
    expect(() => assertKeyMayRun(limits, { models: ['gpt-4o'], assistant: { slug: 'support', model: 'gpt-4o' } })).toThrow(/the assistant "support" runs on it/);
  });
});
