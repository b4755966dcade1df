import { Logger } from '@nestjs/common';
import { DEFAULT_CATALOG, ModelDefinition } from '../../models/model-catalog';
import type { ModelsService } from '../../models/models.service';
import type { NerfingRule } from './entities/nerfing-rule.entity';
import { MemoryNerfingCounters } from './nerfing-counters';
import type { NerfingRulesService } from './nerfing-rules.service';
import { NerfingService, NerfingSubject } from './nerfing.service';

const GPT_4O = DEFAULT_CATALOG.find((model) => model.id === 'gpt-4o')!;
const SUBJECT: NerfingSubject = { workspaceId: 'ws-1', userId: 'user-1', source: 'api' };
const NOW = Date.parse('2026-11-23T12:00:10Z');

let ids = 0;
function rule(fields: Partial<NerfingRule>): NerfingRule {
  ids += 1;
  return {
    id: `rule-${ids}`,
    workspaceId: 'ws-1',
    position: ids,
    scopeType: 'all',
    scopeUserId: null,
    window: 'hour',
    metric: 'requests',
    threshold: 1,
    actionType: 'block',
    actionMaxTokens: null,
    actionModel: null,
    createdAt: new Date(NOW),
    ...fields,
  };
}

describe('NerfingService', () => {
  let counters: MemoryNerfingCounters;
  let rules: NerfingRule[];

  beforeAll(() => Logger.overrideLogger(false));
  afterAll(() => Logger.overrideLogger(['log', 'error', 'warn']));
  beforeEach(() => {
    counters = new MemoryNerfingCounters();
    rules = [];
  });
  afterEach(() => counters.onApplicationShutdown());

  function service(): NerfingService {
    const rulesService = { forRequests: async () => rules } as unknown as NerfingRulesService;
    const models = { find: (id: string) => DEFAULT_CATALOG.find((model) => model.id === id) } as unknown as ModelsService;
    const nerfing = new NerfingService(rulesService, models, counters);
    nerfing.clock = () => NOW;
    return nerfing;
  }

  const apply = (nerfing: NerfingService, model: ModelDefinition = GPT_4O, maxTokens = 1_000) => nerfing.apply(SUBJECT, model, maxTokens);

  it('counts nothing and changes nothing for a workspace without rules', async () => {
    const arrive = jest.spyOn(counters, 'arrive');
    const outcome = await apply(service());
    expect(outcome).toEqual({ applications: [], model: GPT_4O, maxTokens: 1_000 });
    expect(arrive).not.toHaveBeenCalled();
  });

  it('lets `value` requests through in the window, and acts on the next', async () => {
    const block = rule({ threshold: 2 });
    rules = [block];
    const nerfing = service();
    expect((await apply(nerfing)).refusal).toBeUndefined();
    expect((await apply(nerfing)).refusal).toBeUndefined();
    const third = await apply(nerfing);
    // 12:00:10 to the end of the hour.
    expect(third.refusal).toMatchObject({ status: 429, retryAfterSeconds: 3_590, headers: { 'Retry-After': '3590' } });
    expect(third.applications).toEqual([{ rule_id: block.id, action: 'block' }]);
  });

  it('adds tokens to a counter shared with a requests rule of the same window', async () => {
    // Both rules count in the same (user, hour) counter; the last one listed counts requests only.
    const cap = rule({ metric: 'tokens', threshold: 50, actionType: 'cap_output', actionMaxTokens: 32 });
    rules = [cap, rule({ threshold: 100 })];
    const nerfing = service();
    const first = await apply(nerfing);
    expect(first.applications).toEqual([]);
    first.settled!(60, 0n);
    expect((await apply(nerfing)).applications).toEqual([{ rule_id: cap.id, action: 'cap_output', max_tokens: 32 }]);
  });

  it('adds cost exactly, in millionths of a millicent', async () => {
    const downgrade = rule({ metric: 'cost_millicents', threshold: 3, actionType: 'downgrade', actionModel: 'gpt-4o-mini' });
    rules = [downgrade];
    const nerfing = service();
    (await apply(nerfing)).settled!(10, 2_999_999n);
    expect((await apply(nerfing)).model.id).toBe('gpt-4o');
    (await apply(nerfing)).settled!(1, 1n);
    const outcome = await apply(nerfing);
    expect(outcome.model.id).toBe('gpt-4o-mini');
    expect(outcome.applications).toEqual([{ rule_id: downgrade.id, action: 'downgrade', from_model: 'gpt-4o', to_model: 'gpt-4o-mini' }]);
  });

  it('asks no settlement count when no rule reads tokens or cost', async () => {
    rules = [rule({ threshold: 5 })];
    expect((await apply(service())).settled).toBeUndefined();
  });

  it('lets requests through unchanged while the counters cannot be reached', async () => {
    rules = [rule({ threshold: 1 })];
    jest.spyOn(counters, 'arrive').mockRejectedValue(new Error('connection refused'));
    const nerfing = service();
    await apply(nerfing);
    expect(await apply(nerfing)).toEqual({ applications: [], model: GPT_4O, maxTokens: 1_000 });
  });
});
