import { refusedUsageRecord, UsageAmounts, usageRecord, UsageSubject } from './usage-record';
import { sameHiddenClass } from '../../test/support/hidden-class';

function subject(index: number): UsageSubject {
  return {
    workspaceId: `workspace-${index}`,
    requestId: `request-${index}`,
    apiKeyId: 'key',
    apiKeyName: 'ci',
    assistantId: null,
    model: 'gpt-4o-mini',
    userId: null,
    subscriptionId: null,
    stream: false,
    source: 'api',
    nerfing: [],
  };
}

const used: UsageAmounts = {
  inputTokens: 12,
  outputTokens: 3,
  totalTokens: 15,
  cachedTokens: 0,
  llmCostMillicents: 9,
  toolCostMillicents: 0,
  totalCostMillicents: 9,
  toolsUsed: [],
  iterations: 1,
  provider: 'openai',
  deployment: 'openai-b',
  attempts: 2,
};

describe('usageRecord', () => {
  it('puts the subject, what was used and how it ended in one record', () => {
    expect(usageRecord(subject(1), 42, { status: 'success', errorCode: null }, used)).toEqual({
      ...subject(1),
      ...used,
      latencyMs: 42,
      status: 'success',
      errorCode: null,
    });
    expect(refusedUsageRecord({ ...subject(2), nerfing: undefined }, 7, 'insufficient_balance')).toMatchObject({
      nerfing: [],
      status: 'error',
      errorCode: 'insufficient_balance',
      chargedMillicents: 0,
      totalCostMillicents: 0,
      provider: null,
      deployment: null,
      attempts: 0,
    });
  });

  it('makes every record with one hidden class, once warm (a record built from a spread made a new one each time: bench/README.md)', () => {
    // Past the first calls, which take the runtime's slow path, as a busy server's do.
    const records = Array.from({ length: 200 }, (_, index) => usageRecord(subject(index), index, { status: 'success', errorCode: null }, used));
    expect(sameHiddenClass(records[150], records[199])).toBe(true);
  });
});
