import { startTestApp, TestApp } from './support/test-app';

describe('limits', () => {
  let t: TestApp;
  beforeAll(async () => {
    t = await startTestApp();
  });
  afterAll(() => t.close());

  it('returns exactly the spec tier table under data.tiers', async () => {
    const { client } = await t.createWorkspace({ tier: 'free' });
    expect(await client.get('/limits/tiers')).toEqual({
      data: {
        tiers: {
          free: { rateLimitRpm: 5, maxAssistants: 1, removeBranding: false },
          hobby: { rateLimitRpm: 10, maxAssistants: 2, removeBranding: false },
          pro: { rateLimitRpm: 60, maxAssistants: 10, removeBranding: true },
          team: { rateLimitRpm: 300, maxAssistants: -1, removeBranding: true },
          enterprise: { rateLimitRpm: -1, maxAssistants: -1, removeBranding: true },
        },
      },
    });
  });

  // maxNerfingRules is ours (issue 14): how many nerfing rules the tier allows (test/nerfing covers the rules).
  it.each([
    ['free', 5, 1, false, 2],
    ['hobby', 10, 2, false, 5],
    ['pro', 60, 10, true, 20],
    ['team', 300, -1, true, -1],
    ['enterprise', -1, -1, true, -1],
  ])("returns the %s workspace's limits", async (tier, rateLimitRpm, maxAssistants, removeBranding, maxNerfingRules) => {
    const { client } = await t.createWorkspace({ tier: tier as string });
    expect(await client.get('/limits')).toEqual({
      data: { tier, rateLimitRpm, nerfingRules: [], maxAssistants, removeBranding, maxNerfingRules },
    });
  });
});
