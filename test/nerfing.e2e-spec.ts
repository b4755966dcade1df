import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { ApiError } from '../src/common/errors/api-error';
import type { NerfingRuleInput } from '../src/limits/nerfing/nerfing-rule';
import { NerfingRulesService } from '../src/limits/nerfing/nerfing-rules.service';
import { NerfingService } from '../src/limits/nerfing/nerfing.service';
import { defaultWidgetSettings } from '../src/widget/widget-settings';
import { WidgetsService } from '../src/widget/widgets.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/** Prices of the catalog, millicents per million tokens. */
const GPT_4O = { input: 250_000, output: 1_000_000 };
const GPT_4O_MINI = { input: 15_000, output: 60_000 };

/** Ten seconds into a minute: a minute window has 50 seconds left. */
const START = Date.parse('2026-11-23T12:00:10.000Z');

/**
 * Nerfing rules through the official OpenAI SDK, with `user_id` as end users send it: what
 * each action does to a request (seen by the client, by the fake upstream and in the usage
 * record), counting per user in calendar windows (the rules' clock is moved, never slept on),
 * and `GET /v1/limits`.
 */
describe('nerfing rules', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let now = START;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, llmSimulator: 'off' },
    });
    db = t.app.get(DataSource);
    t.app.get(NerfingService).clock = () => now;
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });
  beforeEach(() => {
    now = START;
  });

  /** Rules are made through the service the dashboard uses (test/nerfing-dashboard covers the pages). */
  const addRule = (workspace: TestWorkspace, rule: NerfingRuleInput) => t.app.get(NerfingRulesService).add(workspace.id, rule);

  /**
   * One request, as a user sends them one after the other: its charge commits before the
   * next one (the token and cost counters move when a charge commits, a moment after its
   * answer; usage records committed together would share their created_at).
   */
  async function ask(workspace: TestWorkspace, userId: string | undefined, extra: Record<string, unknown> = {}) {
    const answer = await workspace.client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'Hello' }],
      ...(userId === undefined ? {} : { user_id: userId }),
      ...extra,
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    await t.settled(workspace.id);
    return answer;
  }

  async function refusal(promise: Promise<unknown>): Promise<InstanceType<typeof OpenAI.RateLimitError>> {
    const error = await promise.then(
      () => {
        throw new Error('expected the request to be refused');
      },
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    return error as InstanceType<typeof OpenAI.RateLimitError>;
  }

  const records = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return (await db.query(
      `SELECT model, status, error_code, user_id, nerfing, llm_cost_millicents::text AS llm_cost, ${TOKENS_AS_INT}
         FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
      [workspace.id],
    )) as { model: string; status: string; error_code: string | null; user_id: string | null; nerfing: unknown[]; llm_cost: string }[];
  };

  it('blocks a user past the threshold with RateLimitError until the window ends, counting each user apart', async () => {
    const workspace = await t.createWorkspace();
    const rule = await addRule(workspace, { scope: 'all', window: 'minute', metric: 'requests', threshold: '2', action: 'block' });

    await ask(workspace, 'alice');
    await ask(workspace, 'alice');
    const refused = await refusal(ask(workspace, 'alice'));
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('50');
    expect(refused.error).toMatchObject({ type: 'rate_limit_exceeded', code: 'rate_limit_exceeded', retry_after_seconds: 50 });
    // Bob has his own count.
    await ask(workspace, 'bob');
    // Still refused later in the same minute, and the refusal is counted too.
    now = START + 40_000;
    expect((await refusal(ask(workspace, 'alice'))).error).toMatchObject({ retry_after_seconds: 10 });

    // The next minute starts from zero.
    now = START + 50_000;
    const answer = await ask(workspace, 'alice');
    expect(answer.model).toBe('gpt-4o');

    const upstreamCalls = upstream.requests.filter((r) => (r.body.messages as { content: string }[])[0]?.content === 'Hello');
    expect(upstreamCalls.length).toBeGreaterThanOrEqual(4);
    const history = await records(workspace);
    expect(history.map((r) => [r.user_id, r.status, r.error_code, r.nerfing])).toEqual([
      ['alice', 'success', null, []],
      ['alice', 'success', null, []],
      ['alice', 'error', 'rate_limit_exceeded', [{ rule_id: rule.id, action: 'block' }]],
      ['bob', 'success', null, []],
      ['alice', 'error', 'rate_limit_exceeded', [{ rule_id: rule.id, action: 'block' }]],
      ['alice', 'success', null, []],
    ]);
  });

  it('lowers max_tokens for the upstream once the user is past the threshold, and keeps a lower cap of the request', async () => {
    const workspace = await t.createWorkspace();
    const rule = await addRule(workspace, { scope: 'all', window: 'hour', metric: 'requests', threshold: '1', action: 'cap_output', max_tokens: '40' });

    await ask(workspace, 'carol', { max_tokens: 500 });
    expect(upstream.requests.at(-1)!.body.max_tokens).toBe(500);
    await ask(workspace, 'carol', { max_tokens: 500 });
    expect(upstream.requests.at(-1)!.body.max_tokens).toBe(40);
    // Without a cap of its own the request would run with the model's 16384: the rule's cap goes up instead.
    await ask(workspace, 'carol');
    expect(upstream.requests.at(-1)!.body.max_tokens).toBe(40);
    // A request that asks for less keeps its own cap, and nothing was applied to it.
    await ask(workspace, 'carol', { max_tokens: 10 });
    expect(upstream.requests.at(-1)!.body.max_tokens).toBe(10);

    expect((await records(workspace)).map((r) => r.nerfing)).toEqual([
      [],
      [{ rule_id: rule.id, action: 'cap_output', max_tokens: 40 }],
      [{ rule_id: rule.id, action: 'cap_output', max_tokens: 40 }],
      [],
    ]);
  });

  it("serves and bills the downgrade's model past the threshold, visible in the response's model (plain and streamed)", async () => {
    const workspace = await t.createWorkspace();
    const rule = await addRule(workspace, { scope: 'user', user_id: 'dave', window: 'day', metric: 'requests', threshold: '1', action: 'downgrade', model: 'gpt-4o-mini' });
    const usage = { prompt_tokens: 1_000, completion_tokens: 100 };

    upstream.script({ kind: 'text', text: 'First.', usage });
    expect((await ask(workspace, 'dave')).model).toBe('gpt-4o');
    upstream.script({ kind: 'text', text: 'Second.', usage });
    const downgraded = await ask(workspace, 'dave');
    expect(downgraded.model).toBe('gpt-4o-mini');
    expect(upstream.requests.at(-1)!.body.model).toBe('gpt-4o-mini');
    const miniCost = (1_000 * GPT_4O_MINI.input + 100 * GPT_4O_MINI.output) / 1_000_000;
    expect((downgraded as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents).toBe(miniCost);

    // Another user is not named by the rule.
    upstream.script({ kind: 'text', text: 'Other.', usage });
    expect((await ask(workspace, 'erin')).model).toBe('gpt-4o');

    const stream = await workspace.client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'Hello' }],
      stream: true,
      user_id: 'dave',
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    const models = new Set<string>();
    for await (const chunk of stream) models.add(chunk.model);
    expect([...models]).toEqual(['gpt-4o-mini']);

    const history = await records(workspace);
    expect(history.slice(0, 3).map((r) => [r.user_id, r.model, r.llm_cost])).toEqual([
      ['dave', 'gpt-4o', ((1_000 * GPT_4O.input + 100 * GPT_4O.output) / 1_000_000).toFixed(6)],
      ['dave', 'gpt-4o-mini', miniCost.toFixed(6)],
      ['erin', 'gpt-4o', ((1_000 * GPT_4O.input + 100 * GPT_4O.output) / 1_000_000).toFixed(6)],
    ]);
    const application = { rule_id: rule.id, action: 'downgrade', from_model: 'gpt-4o', to_model: 'gpt-4o-mini' };
    expect(history.map((r) => r.nerfing)).toEqual([[], [application], [], [application]]);
  });

  it("does not 'downgrade' a request to a model that costs more than the one asked for", async () => {
    const workspace = await t.createWorkspace();
    await addRule(workspace, { scope: 'all', window: 'minute', metric: 'requests', threshold: '1', action: 'downgrade', model: 'gpt-4o' });
    const cheap = (user: string) =>
      workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], user_id: user } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    await cheap('frank');
    expect((await cheap('frank')).model).toBe('gpt-4o-mini');
    expect((await ask(workspace, 'frank')).model).toBe('gpt-4o');
    expect((await records(workspace)).map((r) => r.nerfing)).toEqual([[], [], []]);
  });

  it('counts tokens and cost when requests settle, and applies the rules in order', async () => {
    const workspace = await t.createWorkspace();
    // Order matters: the cap (rule 1) applies with the downgrade (rule 2); the block (rule 3) ends the list.
    const cap = await addRule(workspace, { scope: 'all', window: 'hour', metric: 'tokens', threshold: '1500', action: 'cap_output', max_tokens: '64' });
    const downgrade = await addRule(workspace, { scope: 'all', window: 'hour', metric: 'cost_millicents', threshold: '400', action: 'downgrade', model: 'gpt-4o-mini' });
    const block = await addRule(workspace, { scope: 'all', window: 'hour', metric: 'tokens', threshold: '3000', action: 'block' });
    const usage = { prompt_tokens: 1_000, completion_tokens: 100 };

    // 1100 tokens, 350 millicents: nothing yet.
    upstream.script({ kind: 'text', text: 'One.', usage });
    expect((await ask(workspace, 'gina')).model).toBe('gpt-4o');
    // Now 2200 tokens, 700 millicents: past the cap and the downgrade, not the block.
    upstream.script({ kind: 'text', text: 'Two.', usage });
    expect((await ask(workspace, 'gina')).model).toBe('gpt-4o');
    upstream.script({ kind: 'text', text: 'Three.', usage });
    const third = await ask(workspace, 'gina', { max_tokens: 1000 });
    expect(third.model).toBe('gpt-4o-mini');
    expect(upstream.requests.at(-1)!.body).toMatchObject({ model: 'gpt-4o-mini', max_tokens: 64 });
    // 3300 tokens: blocked until the hour ends (12:00:10 -> 13:00:00).
    const refused = await refusal(ask(workspace, 'gina'));
    expect(refused.error).toMatchObject({ retry_after_seconds: 3_590 });
    // Someone else has used nothing.
    upstream.script({ kind: 'text', text: 'Other.', usage });
    expect((await ask(workspace, 'hank')).model).toBe('gpt-4o');

    const history = await records(workspace);
    expect(history.map((r) => r.nerfing)).toEqual([
      [],
      [],
      [
        { rule_id: cap.id, action: 'cap_output', max_tokens: 64 },
        { rule_id: downgrade.id, action: 'downgrade', from_model: 'gpt-4o', to_model: 'gpt-4o-mini' },
      ],
      [
        { rule_id: cap.id, action: 'cap_output', max_tokens: 64 },
        { rule_id: downgrade.id, action: 'downgrade', from_model: 'gpt-4o', to_model: 'gpt-4o-mini' },
        { rule_id: block.id, action: 'block' },
      ],
      [],
    ]);
  });

  it('counts requests without a user_id together under an "all" rule; widget rules leave API requests alone', async () => {
    const workspace = await t.createWorkspace();
    await addRule(workspace, { scope: 'widget_visitors', window: 'minute', metric: 'requests', threshold: '1', action: 'block' });
    await addRule(workspace, { scope: 'all', window: 'minute', metric: 'requests', threshold: '3', action: 'block' });
    await ask(workspace, undefined);
    await ask(workspace, undefined);
    await ask(workspace, undefined);
    await refusal(ask(workspace, undefined));
    // A named user is counted apart from the anonymous ones, and is no widget visitor.
    await ask(workspace, 'ivan');
    await ask(workspace, 'ivan');
  });

  it('applies a widget_visitors rule to chat widget visitors, each apart, and not to API requests with the same user_id', async () => {
    const site = 'https://shop.example.com';
    const workspace = await t.createWorkspace({ tier: 'team' });
    const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: 'Shop helper', model: 'gpt-4o-mini' });
    const widget = await t.app
      .get(WidgetsService)
      .save(workspace.id, assistant.id, { ...defaultWidgetSettings('Shop helper'), enabled: true, allowedOrigins: [site] });
    const rule = await addRule(workspace, { scope: 'widget_visitors', window: 'minute', metric: 'requests', threshold: '1', action: 'block' });
    // Visitors as widget.js gets them: tokens issued by the service, each standing for a visitor id (their user_id).
    const newVisitor = async () => {
      const response = await fetch(`${t.baseUrl}/widget/v1/${widget.publicId}/visitors`, { method: 'POST', headers: { origin: site } });
      const token = ((await response.json()) as { visitor: string }).visitor;
      return { token, id: `v_${token.slice(3, 35)}` };
    };
    const send = async (visitor: { token: string }) => {
      const response = await fetch(`${t.baseUrl}/widget/v1/${widget.publicId}/messages`, {
        method: 'POST',
        headers: { origin: site, 'content-type': 'application/json' },
        body: JSON.stringify({ visitor: visitor.token, message: 'Do you ship abroad?' }),
      });
      return { status: response.status, headers: response.headers, text: await response.text() };
    };
    const [annaVisitor, benVisitor] = [await newVisitor(), await newVisitor()];
    const [anna, ben] = [annaVisitor.id, benVisitor.id];

    expect((await send(annaVisitor)).status).toBe(200);
    const refused = await send(annaVisitor);
    expect(refused.status).toBe(429);
    expect(refused.headers.get('retry-after')).toBe('50');
    expect(JSON.parse(refused.text)).toMatchObject({ error: { type: 'rate_limit_exceeded', retry_after_seconds: 50 } });
    expect((await send(benVisitor)).status).toBe(200);
    // The same id through the API is no widget visitor.
    await ask(workspace, anna);
    await ask(workspace, anna);

    await t.settled(workspace.id);
    const rows = (await db.query('SELECT user_id, source, status, nerfing FROM usage_records WHERE workspace_id = $1 ORDER BY created_at', [
      workspace.id,
    ])) as { user_id: string; source: string; status: string; nerfing: unknown[] }[];
    expect(rows.map((r) => [r.user_id, r.source, r.status, r.nerfing])).toEqual([
      [anna, 'widget', 'success', []],
      [anna, 'widget', 'error', [{ rule_id: rule.id, action: 'block' }]],
      [ben, 'widget', 'success', []],
      [anna, 'api', 'success', []],
      [anna, 'api', 'success', []],
    ]);
  });

  it("applies to the Responses API, which runs on the same core: the response's model is the downgrade's", async () => {
    const workspace = await t.createWorkspace();
    const rule = await addRule(workspace, { scope: 'all', window: 'minute', metric: 'requests', threshold: '1', action: 'downgrade', model: 'gpt-4o-mini' });
    const respond = () => workspace.client.responses.create({ model: 'gpt-4o', input: 'Hello', user: 'pia' } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    expect((await respond()).model).toBe('gpt-4o');
    expect((await respond()).model).toBe('gpt-4o-mini');
    expect(upstream.requests.at(-1)!.body.model).toBe('gpt-4o-mini');
    expect((await records(workspace)).map((r) => [r.user_id, r.model, r.nerfing])).toEqual([
      ['pia', 'gpt-4o', []],
      ['pia', 'gpt-4o-mini', [{ rule_id: rule.id, action: 'downgrade', from_model: 'gpt-4o', to_model: 'gpt-4o-mini' }]],
    ]);
  });

  it('refuses a blocked streamed request with the 429 before any event', async () => {
    const workspace = await t.createWorkspace();
    await addRule(workspace, { scope: 'all', window: 'minute', metric: 'requests', threshold: '1', action: 'block' });
    const stream = () =>
      workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'Hello' }],
        stream: true,
        user_id: 'olga',
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    for await (const chunk of await stream()) expect(chunk.model).toBe('gpt-4o');
    expect((await refusal(stream())).error).toMatchObject({ type: 'rate_limit_exceeded', retry_after_seconds: 50 });
  });

  it('lists the rules of the key\'s workspace in GET /v1/limits, in order, with the tier\'s maximum', async () => {
    const workspace = await t.createWorkspace({ tier: 'hobby' });
    const other = await t.createWorkspace({ tier: 'hobby' });
    const first = await addRule(workspace, { scope: 'widget_visitors', window: 'month', metric: 'cost_millicents', threshold: '50000', action: 'block' });
    const second = await addRule(workspace, { scope: 'user', user_id: 'user-42', window: 'day', metric: 'tokens', threshold: '20000', action: 'cap_output', max_tokens: '256' });
    const third = await addRule(workspace, { scope: 'all', window: 'hour', metric: 'requests', threshold: '100', action: 'downgrade', model: 'gpt-4o-mini' });
    await addRule(other, { scope: 'all', window: 'hour', metric: 'requests', threshold: '5', action: 'block' });

    const rules = [
      { id: first.id, scope: { type: 'widget_visitors' }, window: 'month', threshold: { metric: 'cost_millicents', value: 50_000 }, action: { type: 'block' } },
      {
        id: second.id,
        scope: { type: 'user', user_id: 'user-42' },
        window: 'day',
        threshold: { metric: 'tokens', value: 20_000 },
        action: { type: 'cap_output', max_tokens: 256 },
      },
      { id: third.id, scope: { type: 'all' }, window: 'hour', threshold: { metric: 'requests', value: 100 }, action: { type: 'downgrade', model: 'gpt-4o-mini' } },
    ];
    expect(await workspace.client.get('/limits')).toEqual({
      data: { tier: 'hobby', rateLimitRpm: 10, nerfingRules: rules, maxAssistants: 2, removeBranding: false, maxNerfingRules: 5 },
    });

    await t.app.get(NerfingRulesService).move(workspace.id, third.id, 'up');
    const { data } = (await workspace.client.get('/limits')) as { data: { nerfingRules: { id: string }[] } };
    expect(data.nerfingRules.map((rule) => rule.id)).toEqual([first.id, third.id, second.id]);
  });

  it("refuses a rule past the tier's count (free 2, hobby 5, pro 20, team and enterprise unlimited) with 403", async () => {
    const block = { scope: 'all', window: 'minute', metric: 'requests', threshold: '10', action: 'block' };
    const limits = { free: 2, hobby: 5, pro: 20 } as const;
    for (const [tier, limit] of Object.entries(limits)) {
      const workspace = await t.createWorkspace({ tier });
      for (let i = 0; i < limit; i++) await addRule(workspace, block);
      const error = await addRule(workspace, block).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ApiError);
      expect(error).toMatchObject({ status: 403, type: 'permission_denied', code: 'nerfing_rule_limit_reached' });
      expect((error as ApiError).message).toContain(`The ${tier} tier allows ${limit} nerfing rules`);
      const [{ count }] = await db.query('SELECT count(*)::int AS count FROM nerfing_rules WHERE workspace_id = $1', [workspace.id]);
      expect(count).toBe(limit);
    }
    const team = await t.createWorkspace({ tier: 'team' });
    for (let i = 0; i < 25; i++) await addRule(team, block);
    const { data } = (await team.client.get('/limits')) as { data: { nerfingRules: unknown[]; maxNerfingRules: number } };
    expect(data.maxNerfingRules).toBe(-1);
    expect(data.nerfingRules).toHaveLength(25);
    // Concurrent adds cannot pass the limit together.
    const racing = await t.createWorkspace({ tier: 'free' });
    const results = await Promise.allSettled(Array.from({ length: 6 }, () => addRule(racing, block)));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
  });

  it.each([
    [{ scope: 'everyone' }, 'scope'],
    [{ scope: 'user', user_id: '  ' }, 'user_id'],
    [{ window: 'week' }, 'window'],
    [{ metric: 'dollars' }, 'metric'],
    [{ threshold: '0' }, 'threshold'],
    [{ threshold: '2.5' }, 'threshold'],
    [{ threshold: '-3' }, 'threshold'],
    [{ action: 'ban' }, 'action'],
    [{ action: 'cap_output', max_tokens: '0' }, 'max_tokens'],
    [{ action: 'downgrade', model: 'gpt-nonexistent' }, 'model'],
    [{ action: 'downgrade' }, 'model'],
  ])('refuses an invalid rule %j with 400 naming %s', async (change, param) => {
    const workspace = await t.createWorkspace();
    const input = { scope: 'all', window: 'minute', metric: 'requests', threshold: '10', action: 'block', ...change };
    const error = await addRule(workspace, input).catch((e: unknown) => e);
    expect(error).toMatchObject({ status: 400, type: 'bad_request', param });
  });

  it('stops applying a deleted rule at once in the process that deleted it', async () => {
    const workspace = await t.createWorkspace();
    const rule = await addRule(workspace, { scope: 'all', window: 'day', metric: 'requests', threshold: '1', action: 'block' });
    await ask(workspace, 'jane');
    await refusal(ask(workspace, 'jane'));
    await t.app.get(NerfingRulesService).remove(workspace.id, rule.id);
    expect((await ask(workspace, 'jane')).model).toBe('gpt-4o');
    expect((await workspace.client.get('/limits')) as unknown).toMatchObject({ data: { nerfingRules: [] } });
  });
});
