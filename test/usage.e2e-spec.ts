import { DataSource } from 'typeorm';
import { UsageAnswerer1764003250000 } from '../migrations/1764003250000-UsageAnswerer';
import { KeyLimits1764003500000 } from '../migrations/1764003500000-KeyLimits';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

interface UsageSummary {
  period: { start: string; end: string };
  summary: { total_requests: number; total_tokens: number; total_cost_millicents: number; average_latency_ms: number };
  by_model: { model: string; requests: number; cost_millicents: number }[];
  by_provider: { provider: string | null; requests: number; cost_millicents: number }[];
}
interface DailyEntry {
  date: string;
  requests: number;
  tokens: number;
  cost_millicents: number;
}
interface UsageRecordOut {
  id: string;
  request_id: string;
  assistant_id: string | null;
  model: string;
  provider: string | null;
  deployment: string | null;
  attempts: number;
  input_tokens: number;
  output_tokens: number;
  total_tokens: number;
  llm_cost_millicents: number;
  tool_cost_millicents: number;
  total_cost_millicents: number;
  latency_ms: number;
  status: string;
  error_code: string | null;
  user_id: string | null;
  subscription_id: string | null;
  tools_used: string[];
  created_at: string;
}
interface RecordPage {
  data: UsageRecordOut[];
  has_more: boolean;
  next_cursor: string | null;
}
interface ApiFailure {
  status: number;
  error: { type: string; param: string | null; code: string | null; message: string };
}

/** A row to insert. Costs are given in micro-millicents (integers), so the test's own sums are exact. */
interface Row {
  createdAt: string;
  model?: string;
  inputTokens?: number;
  outputTokens?: number;
  llmMicro?: number;
  toolMicro?: number;
  latencyMs?: number;
  status?: 'success' | 'error';
  errorCode?: string | null;
  userId?: string | null;
  subscriptionId?: string | null;
  assistantId?: string | null;
  toolsUsed?: string[];
  requestId?: string;
  provider?: string | null;
  deployment?: string | null;
  attempts?: number;
}

const DAY_MS = 86_400_000;
/** `YYYY-MM-DD` of today (UTC) plus `offset` days. */
const day = (offset: number) => new Date(Date.now() + offset * DAY_MS).toISOString().slice(0, 10);
const micro = (value: number) => (value / 1_000_000).toFixed(6);

/** Deterministic pseudo-random numbers (mulberry32), so a failure can be replayed. */
function random(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let r = Math.imul(a ^ (a >>> 15), 1 | a);
    r = (r + Math.imul(r ^ (r >>> 7), 61 | r)) ^ r;
    return ((r ^ (r >>> 14)) >>> 0) / 4_294_967_296;
  };
}

describe('usage statistics', () => {
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get(DataSource);
  });
  afterAll(() => t.close());

  /** Inserts rows straight into usage_records (one statement); returns their ids in the given order. */
  async function insert(workspace: TestWorkspace, rows: Row[]): Promise<string[]> {
    const column = <T>(pick: (row: Row, index: number) => T) => rows.map(pick);
    const result = (await db.query(
      `INSERT INTO usage_records (workspace_id, request_id, assistant_id, model, input_tokens, output_tokens, total_tokens,
                                  llm_cost_millicents, tool_cost_millicents, total_cost_millicents, latency_ms, status,
                                  error_code, user_id, subscription_id, tools_used, created_at, provider, deployment, attempts)
       SELECT $1, r.request_id, r.assistant_id, r.model, r.input_tokens, r.output_tokens, r.input_tokens + r.output_tokens,
              r.llm, r.tool, r.llm + r.tool, r.latency_ms, r.status, r.error_code, r.user_id, r.subscription_id,
              string_to_array(r.tools, ','), r.created_at, r.provider, r.deployment, r.attempts
         FROM unnest($2::text[], $3::uuid[], $4::text[], $5::int[], $6::int[], $7::numeric[], $8::numeric[], $9::int[],
                     $10::text[], $11::text[], $12::text[], $13::text[], $14::text[], $15::timestamptz[], $16::int[],
                     $17::text[], $18::text[], $19::int[])
           AS r(request_id, assistant_id, model, input_tokens, output_tokens, llm, tool, latency_ms, status, error_code,
                user_id, subscription_id, tools, created_at, ord, provider, deployment, attempts)
        ORDER BY r.ord
       RETURNING id`,
      [
        workspace.id,
        column((row, i) => row.requestId ?? `req_test_${i}`),
        column((row) => row.assistantId ?? null),
        column((row) => row.model ?? 'gpt-4o-mini'),
        column((row) => row.inputTokens ?? 10),
        column((row) => row.outputTokens ?? 5),
        column((row) => micro(row.llmMicro ?? 1_000_000)),
        column((row) => micro(row.toolMicro ?? 0)),
        column((row) => row.latencyMs ?? 100),
        column((row) => row.status ?? 'success'),
        column((row) => row.errorCode ?? null),
        column((row) => row.userId ?? null),
        column((row) => row.subscriptionId ?? null),
        column((row) => (row.toolsUsed ?? []).join(',')),
        column((row) => row.createdAt),
        column((_, i) => i),
        column((row) => row.provider ?? null),
        column((row) => row.deployment ?? null),
        column((row) => row.attempts ?? 0),
      ],
    )) as { id: string }[];
    return result.map((row) => row.id);
  }

  const get = <T>(workspace: TestWorkspace, path: string, query: Record<string, unknown> = {}) =>
    workspace.client.get(path, { query }) as Promise<T>;
  const failure = (promise: Promise<unknown>) =>
    promise.then(
      () => {
        throw new Error('expected the request to fail');
      },
      (error: unknown) => error as ApiFailure,
    );

  describe('GET /v1/usage and /v1/usage/daily', () => {
    it('adds up generated traffic over many days and models exactly as the test does', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const next = random(20_261_122);
      const models = ['gpt-4o', 'gpt-4o-mini', 'claude-sonnet-4-6', 'gemini-2.5-flash', 'o4-mini'];
      // Who answered, in turn (not drawn: the draws above stay as they were); null: no provider did.
      const providers = ['openai', 'anthropic', 'openai-compatible', null];
      const startOffset = -60;
      const endOffset = -15;
      const rows: Row[] = [];
      // 46 days in range, most with traffic, a few without; plus traffic just outside the range.
      for (let offset = startOffset - 3; offset <= endOffset + 3; offset++) {
        const count = offset % 7 === 0 ? 0 : 1 + Math.floor(next() * 12);
        for (let i = 0; i < count; i++) {
          const ms = Math.floor(next() * DAY_MS);
          const failed = next() < 0.1;
          rows.push({
            createdAt: new Date(Date.parse(`${day(offset)}T00:00:00Z`) + ms).toISOString(),
            model: models[Math.floor(next() * models.length)],
            inputTokens: failed ? 0 : Math.floor(next() * 5_000),
            outputTokens: failed ? 0 : Math.floor(next() * 2_000),
            // Fractional costs with six decimals: floats would drift, numerics must not.
            llmMicro: failed ? 0 : Math.floor(next() * 90_000_000_000),
            toolMicro: failed || next() < 0.7 ? 0 : Math.floor(next() * 1_000_000_000),
            latencyMs: 50 + Math.floor(next() * 5_000),
            status: failed ? 'error' : 'success',
            errorCode: failed ? 'upstream_error' : null,
            provider: providers[rows.length % providers.length],
          });
        }
      }
      await insert(workspace, rows);
      // Another workspace's traffic on the same days must not count.
      await insert(other, rows.slice(0, 50).map((row) => ({ ...row, llmMicro: 7_000_000_000_000 })));

      const inRange = rows.filter((row) => row.createdAt >= `${day(startOffset)}T00:00:00.000Z` && row.createdAt < `${day(endOffset + 1)}T00:00:00.000Z`);
      expect(inRange.length).toBeGreaterThan(200);
      expect(inRange.length).toBeLessThan(rows.length);
      const costMicro = (row: Row) => (row.llmMicro ?? 0) + (row.toolMicro ?? 0);
      const tokens = (row: Row) => (row.inputTokens ?? 0) + (row.outputTokens ?? 0);
      const sumMicro = (list: Row[]) => list.reduce((sum, row) => sum + BigInt(costMicro(row)), 0n);
      const asMillicents = (value: bigint) => Number(value) / 1_000_000;

      const answer = await get<{ data: UsageSummary }>(workspace, '/usage', { start_date: day(startOffset), end_date: day(endOffset) });
      const latencySum = inRange.reduce((sum, row) => sum + (row.latencyMs ?? 0), 0);
      expect(answer.data.period).toEqual({ start: `${day(startOffset)}T00:00:00.000Z`, end: `${day(endOffset)}T23:59:59.999Z` });
      expect(answer.data.summary).toEqual({
        total_requests: inRange.length,
        total_tokens: inRange.reduce((sum, row) => sum + tokens(row), 0),
        total_cost_millicents: asMillicents(sumMicro(inRange)),
        average_latency_ms: Math.round((latencySum / inRange.length) * 100) / 100,
      });
      const expectedByModel = models
        .map((model) => {
          const ofModel = inRange.filter((row) => row.model === model);
          return { model, requests: ofModel.length, cost: sumMicro(ofModel) };
        })
        .filter((entry) => entry.requests > 0)
        .sort((a, b) => (b.cost > a.cost ? 1 : b.cost < a.cost ? -1 : 0))
        .map(({ model, requests, cost }) => ({ model, requests, cost_millicents: asMillicents(cost) }));
      expect(answer.data.by_model).toEqual(expectedByModel);
      expect(answer.data.by_model.length).toBe(models.length);
      const expectedByProvider = providers
        .map((provider) => {
          const ofProvider = inRange.filter((row) => (row.provider ?? null) === provider);
          return { provider, requests: ofProvider.length, cost: sumMicro(ofProvider) };
        })
        .sort((a, b) => (b.cost > a.cost ? 1 : b.cost < a.cost ? -1 : 0))
        .map(({ provider, requests, cost }) => ({ provider, requests, cost_millicents: asMillicents(cost) }));
      expect(answer.data.by_provider).toEqual(expectedByProvider);
      // The groups partition the requests: their sums are the totals, exactly.
      expect(answer.data.by_provider.reduce((sum, entry) => sum + entry.requests, 0)).toBe(answer.data.summary.total_requests);
      expect(answer.data.by_provider.reduce((sum, entry) => sum + BigInt(Math.round(entry.cost_millicents * 1_000_000)), 0n)).toBe(
        sumMicro(inRange),
      );

      const daily = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily', { start_date: day(startOffset), end_date: day(endOffset) });
      const expectedDaily: DailyEntry[] = [];
      for (let offset = endOffset; offset >= startOffset; offset--) {
        const ofDay = inRange.filter((row) => row.createdAt.startsWith(day(offset)));
        expectedDaily.push({
          date: day(offset),
          requests: ofDay.length,
          tokens: ofDay.reduce((sum, row) => sum + tokens(row), 0),
          cost_millicents: asMillicents(sumMicro(ofDay)),
        });
      }
      expect(daily.data).toEqual(expectedDaily);
      expect(daily.data.filter((entry) => entry.requests === 0).length).toBeGreaterThan(3);
    });

    it('counts a day from 00:00:00.000 to 23:59:59.999999 UTC, and the next midnight on the next day', async () => {
      const workspace = await t.createWorkspace();
      const d = day(-5);
      const next = day(-4);
      const previous = day(-6);
      await insert(workspace, [
        { createdAt: `${previous}T23:59:59.999999Z`, llmMicro: 1_000_000 },
        { createdAt: `${d}T00:00:00.000Z`, llmMicro: 10_000_000 },
        { createdAt: `${d}T23:59:59.999Z`, llmMicro: 100_000_000 },
        // Sub-millisecond: after the .999 of `period.end`, still the same day.
        { createdAt: `${d}T23:59:59.999500Z`, llmMicro: 1_000_000_000 },
        { createdAt: `${next}T00:00:00.000Z`, llmMicro: 10_000_000_000 },
      ]);

      const one = await get<{ data: UsageSummary }>(workspace, '/usage', { start_date: d, end_date: d });
      expect(one.data.period).toEqual({ start: `${d}T00:00:00.000Z`, end: `${d}T23:59:59.999Z` });
      expect(one.data.summary.total_requests).toBe(3);
      expect(one.data.summary.total_cost_millicents).toBe(1_110);

      const daily = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily', { start_date: previous, end_date: next });
      expect(daily.data.map((entry) => [entry.date, entry.requests, entry.cost_millicents])).toEqual([
        [next, 1, 10_000],
        [d, 3, 1_110],
        [previous, 1, 1],
      ]);
    });

    it('includes days without traffic as zeros, newest first', async () => {
      const workspace = await t.createWorkspace();
      await insert(workspace, [
        { createdAt: `${day(-8)}T12:00:00Z`, inputTokens: 7, outputTokens: 3, llmMicro: 2_500_000 },
        { createdAt: `${day(-3)}T01:00:00Z`, inputTokens: 1, outputTokens: 1, llmMicro: 500_000 },
      ]);
      const daily = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily', { start_date: day(-9), end_date: day(0) });
      expect(daily.data).toEqual(
        [0, -1, -2, -3, -4, -5, -6, -7, -8, -9].map((offset) => ({
          date: day(offset),
          requests: offset === -8 || offset === -3 ? 1 : 0,
          tokens: offset === -8 ? 10 : offset === -3 ? 2 : 0,
          cost_millicents: offset === -8 ? 2.5 : offset === -3 ? 0.5 : 0,
        })),
      );
    });

    it('defaults to the last 30 days ending today, and answers zeros without traffic', async () => {
      const workspace = await t.createWorkspace();
      await insert(workspace, [
        { createdAt: `${day(-30)}T12:00:00Z` }, // the 31st day back: outside the default range
        { createdAt: `${day(-29)}T00:00:00Z`, latencyMs: 301 },
        { createdAt: new Date().toISOString(), latencyMs: 100 },
      ]);
      const summary = await get<{ data: UsageSummary }>(workspace, '/usage');
      expect(summary.data.period).toEqual({ start: `${day(-29)}T00:00:00.000Z`, end: `${day(0)}T23:59:59.999Z` });
      expect(summary.data.summary).toMatchObject({ total_requests: 2, average_latency_ms: 200.5 });

      const daily = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily');
      expect(daily.data).toHaveLength(30);
      expect(daily.data[0].date).toBe(day(0));
      expect(daily.data[29]).toEqual({ date: day(-29), requests: 1, tokens: 15, cost_millicents: 1 });

      // Only end_date: the 30 days ending then.
      const ending = await get<{ data: UsageSummary }>(workspace, '/usage', { end_date: day(-10) });
      expect(ending.data.period.start).toBe(`${day(-39)}T00:00:00.000Z`);

      const empty = await t.createWorkspace();
      expect((await get<{ data: UsageSummary }>(empty, '/usage')).data).toEqual({
        period: summary.data.period,
        summary: { total_requests: 0, total_tokens: 0, total_cost_millicents: 0, average_latency_ms: 0 },
        by_model: [],
        by_provider: [],
        by_api_key: [],
      });
      const emptyDaily = await get<{ data: DailyEntry[] }>(empty, '/usage/daily');
      expect(emptyDaily.data.every((entry) => entry.requests === 0 && entry.tokens === 0 && entry.cost_millicents === 0)).toBe(true);
    });

    it('refuses bad dates and ranges with 400 naming the parameter', async () => {
      const workspace = await t.createWorkspace();
      const cases: Array<[Record<string, string>, string]> = [
        [{ start_date: '2026-02-30' }, 'start_date'], // not a real date
        [{ start_date: '2025-02-29' }, 'start_date'], // not a leap year
        [{ end_date: '2026-13-01' }, 'end_date'],
        [{ start_date: '2026-1-05' }, 'start_date'], // wrong form
        [{ start_date: `${day(-3)}T00:00:00Z` }, 'start_date'],
        [{ end_date: 'yesterday' }, 'end_date'],
        [{ start_date: '' }, 'start_date'],
        [{ start_date: day(-3), end_date: day(-4) }, 'end_date'], // end before start
        [{ start_date: day(-90) }, 'start_date'], // before the 90-day window (today - 89 is its first day)
        [{ start_date: day(-400), end_date: day(-380) }, 'start_date'],
        [{ end_date: day(-95) }, 'end_date'], // with the default start, the whole range is before the window
        [{ start_date: day(-89), end_date: day(1) }, 'end_date'], // 91 days: longer than the window
      ];
      for (const path of ['/usage', '/usage/daily']) {
        for (const [query, param] of cases) {
          const error = await failure(get(workspace, path, query));
          expect({ path, query, status: error.status, type: error.error.type, param: error.error.param }).toEqual({
            path,
            query,
            status: 400,
            type: 'bad_request',
            param,
          });
        }
      }
      // The edges of the window are accepted.
      const widest = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily', { start_date: day(-89), end_date: day(0) });
      expect(widest.data).toHaveLength(90);
      await expect(get(workspace, '/usage', { start_date: day(-80), end_date: day(9) })).resolves.toBeDefined();
    });
  });

  describe('GET /v1/usage/recent', () => {
    it('answers the spec fields of each record, newest first', async () => {
      const workspace = await t.createWorkspace();
      const assistantId = '3f1e8a52-9c1d-4b7e-8f00-1d2c3b4a5f60';
      const base = Date.now() - 60_000;
      const [older, newer] = await insert(workspace, [
        {
          createdAt: new Date(base).toISOString(),
          requestId: 'req_older',
          model: 'gpt-4o',
          inputTokens: 1_000,
          outputTokens: 3,
          llmMicro: 253_000_000,
          toolMicro: 1_500_000,
          latencyMs: 812,
          userId: 'user-1',
          subscriptionId: 'sub-9',
          assistantId,
          toolsUsed: ['web_search'],
          provider: 'openai',
          deployment: 'openai-b',
          attempts: 2,
        },
        { createdAt: new Date(base + 1).toISOString(), requestId: 'req_newer', status: 'error', errorCode: 'upstream_timeout', llmMicro: 0 },
      ]);
      const page = await get<RecordPage>(workspace, '/usage/recent');
      expect(page).toEqual({
        data: [
          {
            id: newer,
            request_id: 'req_newer',
            api_key_id: null,
            api_key_name: null,
            assistant_id: null,
            model: 'gpt-4o-mini',
            provider: null,
            deployment: null,
            attempts: 0,
            input_tokens: 10,
            output_tokens: 5,
            total_tokens: 15,
            llm_cost_millicents: 0,
            tool_cost_millicents: 0,
            total_cost_millicents: 0,
            latency_ms: 100,
            status: 'error',
            error_code: 'upstream_timeout',
            user_id: null,
            subscription_id: null,
            tools_used: [],
            source: 'api',
            nerfing: [],
            created_at: new Date(base + 1).toISOString(),
          },
          {
            id: older,
            request_id: 'req_older',
            api_key_id: null,
            api_key_name: null,
            assistant_id: assistantId,
            model: 'gpt-4o',
            provider: 'openai',
            deployment: 'openai-b',
            attempts: 2,
            input_tokens: 1_000,
            output_tokens: 3,
            total_tokens: 1_003,
            llm_cost_millicents: 253,
            tool_cost_millicents: 1.5,
            total_cost_millicents: 254.5,
            latency_ms: 812,
            status: 'success',
            error_code: null,
            user_id: 'user-1',
            subscription_id: 'sub-9',
            tools_used: ['web_search'],
            source: 'api',
            nerfing: [],
            created_at: new Date(base).toISOString(),
          },
        ],
        has_more: false,
        next_cursor: null,
      });
    });

    it('pages with a cursor without skipping or repeating, even within one millisecond or one timestamp', async () => {
      const workspace = await t.createWorkspace();
      const ms = new Date(Date.now() - 3_600_000).toISOString().slice(0, 23); // 'YYYY-MM-DDTHH:MM:SS.mmm'
      const rows: Row[] = [];
      // 25 rows: several sharing a millisecond (different microseconds), several sharing one exact timestamp.
      for (let i = 0; i < 10; i++) rows.push({ createdAt: `${ms}${String(100 + i * 50).padStart(3, '0')}Z`, requestId: `req_us_${i}` });
      for (let i = 0; i < 8; i++) rows.push({ createdAt: `${ms}900Z`, requestId: `req_same_${i}` });
      for (let i = 0; i < 7; i++) rows.push({ createdAt: new Date(Date.now() - 7_200_000 - i * 1_000).toISOString(), requestId: `req_old_${i}` });
      await insert(workspace, rows);
      const expected = (
        (await db.query('SELECT id FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC, id DESC', [workspace.id])) as {
          id: string;
        }[]
      ).map((row) => row.id);
      expect(expected).toHaveLength(25);

      const seen: string[] = [];
      let cursor: string | null = null;
      let pages = 0;
      do {
        const page: RecordPage = await get<RecordPage>(workspace, '/usage/recent', { limit: 3, ...(cursor ? { starting_after: cursor } : {}) });
        seen.push(...page.data.map((record) => record.id));
        expect(page.has_more).toBe(page.next_cursor !== null);
        if (page.has_more) expect(page.next_cursor).toBe(page.data[page.data.length - 1].id);
        cursor = page.next_cursor;
        pages++;
      } while (cursor);
      expect(seen).toEqual(expected);
      expect(pages).toBe(9);

      const firstPage = await get<RecordPage>(workspace, '/usage/recent');
      expect(firstPage.data).toHaveLength(20);
      expect(firstPage.has_more).toBe(true);
      const big = await get<RecordPage>(workspace, '/usage/recent', { limit: 100 });
      expect(big.data.map((record) => record.id)).toEqual(expected);
      expect(big).toMatchObject({ has_more: false, next_cursor: null });
    });

    it('filters by model, assistant_id, user_id and status, alone, together and across pages', async () => {
      const workspace = await t.createWorkspace();
      const assistants = ['0f2c6a9e-1b3d-4e5f-8a7b-9c0d1e2f3a4b', 'a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d'];
      const rows: Row[] = [];
      for (let i = 0; i < 48; i++) {
        rows.push({
          createdAt: new Date(Date.now() - (i + 1) * 60_000).toISOString(),
          requestId: `req_${i}`,
          model: ['gpt-4o', 'claude-haiku-4-5', 'gemini-2.5-pro'][i % 3],
          assistantId: i % 4 === 0 ? null : assistants[i % 2],
          userId: i % 5 === 0 ? null : `user-${i % 2}`,
          status: i % 6 === 0 ? 'error' : 'success',
          errorCode: i % 6 === 0 ? 'upstream_error' : null,
        });
      }
      await insert(workspace, rows);
      const newestFirst = rows.map((row) => row); // already newest first (i = 0 is the newest)

      const all = async (query: Record<string, string>) => {
        const ids: string[] = [];
        let cursor: string | null = null;
        do {
          const page: RecordPage = await get<RecordPage>(workspace, '/usage/recent', { ...query, limit: 4, ...(cursor ? { starting_after: cursor } : {}) });
          ids.push(...page.data.map((record) => record.request_id));
          cursor = page.next_cursor;
        } while (cursor);
        return ids;
      };
      const expectFilter = async (query: Record<string, string>, keep: (row: Row) => boolean) => {
        const expected = newestFirst.filter(keep).map((row) => row.requestId);
        expect(expected.length).toBeGreaterThan(0);
        expect(expected.length).toBeLessThan(rows.length);
        expect({ query, ids: await all(query) }).toEqual({ query, ids: expected });
      };
      await expectFilter({ model: 'claude-haiku-4-5' }, (row) => row.model === 'claude-haiku-4-5');
      await expectFilter({ assistant_id: assistants[1] }, (row) => row.assistantId === assistants[1]);
      await expectFilter({ user_id: 'user-0' }, (row) => row.userId === 'user-0');
      await expectFilter({ status: 'error' }, (row) => row.status === 'error');
      await expectFilter({ status: 'success' }, (row) => row.status === 'success');
      await expectFilter(
        { model: 'gpt-4o', user_id: 'user-1', status: 'success', assistant_id: assistants[1] },
        (row) => row.model === 'gpt-4o' && row.userId === 'user-1' && row.status === 'success' && row.assistantId === assistants[1],
      );
      const none = await get<RecordPage>(workspace, '/usage/recent', { model: 'no-such-model' });
      expect(none).toEqual({ data: [], has_more: false, next_cursor: null });
    });

    it('refuses bad parameters with 400 naming the parameter', async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const [foreign] = await insert(other, [{ createdAt: new Date().toISOString() }]);
      const cases: Array<[Record<string, string>, string]> = [
        [{ starting_after: 'nope' }, 'starting_after'],
        [{ starting_after: foreign }, 'starting_after'], // another workspace's record
        [{ starting_after: '5b0f1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d' }, 'starting_after'], // no such record
        [{ limit: '0' }, 'limit'],
        [{ limit: '101' }, 'limit'],
        [{ limit: 'ten' }, 'limit'],
        [{ status: 'failed' }, 'status'],
        [{ assistant_id: 'my-assistant' }, 'assistant_id'],
        [{ model: '' }, 'model'],
        [{ user_id: 'x'.repeat(257) }, 'user_id'],
      ];
      for (const [query, param] of cases) {
        const error = await failure(get(workspace, '/usage/recent', query));
        expect({ query, status: error.status, type: error.error.type, param: error.error.param }).toEqual({
          query,
          status: 400,
          type: 'bad_request',
          param,
        });
      }
    });
  });

  it('keeps every workspace to its own usage', async () => {
    const a = await t.createWorkspace();
    const b = await t.createWorkspace();
    const [recordOfA] = await insert(a, [
      { createdAt: `${day(-2)}T10:00:00Z`, model: 'gpt-4o', llmMicro: 5_000_000, userId: 'shared-user' },
      { createdAt: `${day(-1)}T10:00:00Z`, model: 'gpt-4o', llmMicro: 7_000_000, userId: 'shared-user' },
    ]);
    await insert(b, [{ createdAt: `${day(-1)}T11:00:00Z`, model: 'claude-haiku-4-5', llmMicro: 1_000_000, userId: 'shared-user' }]);

    const summaryA = await get<{ data: UsageSummary }>(a, '/usage');
    const summaryB = await get<{ data: UsageSummary }>(b, '/usage');
    expect(summaryA.data.summary).toMatchObject({ total_requests: 2, total_cost_millicents: 12 });
    expect(summaryA.data.by_model).toEqual([{ model: 'gpt-4o', requests: 2, cost_millicents: 12 }]);
    expect(summaryB.data.summary).toMatchObject({ total_requests: 1, total_cost_millicents: 1 });
    expect(summaryB.data.by_model).toEqual([{ model: 'claude-haiku-4-5', requests: 1, cost_millicents: 1 }]);

    const dailyB = await get<{ data: DailyEntry[] }>(b, '/usage/daily', { start_date: day(-2), end_date: day(-1) });
    expect(dailyB.data.map((entry) => entry.requests)).toEqual([1, 0]);

    const recentB = await get<RecordPage>(b, '/usage/recent', { user_id: 'shared-user' });
    expect(recentB.data.map((record) => record.model)).toEqual(['claude-haiku-4-5']);
    const error = await failure(get(b, '/usage/recent', { starting_after: recordOfA }));
    expect(error.error.param).toBe('starting_after');
  });

  it('shows a chat request made through the SDK in all three endpoints', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const { data: completion, response } = await workspace.client.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello!' }], user_id: 'end-user-7' } as never)
      .withResponse();
    const cost = (completion as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents;

    const recent = await get<RecordPage>(workspace, '/usage/recent');
    expect(recent.data).toHaveLength(1);
    expect(recent.data[0]).toMatchObject({
      request_id: response.headers.get('x-request-id'),
      model: 'gpt-4o-mini',
      status: 'success',
      user_id: 'end-user-7',
      input_tokens: completion.usage!.prompt_tokens,
      output_tokens: completion.usage!.completion_tokens,
      total_tokens: completion.usage!.total_tokens,
      total_cost_millicents: cost,
    });
    const summary = await get<{ data: UsageSummary }>(workspace, '/usage');
    expect(summary.data.summary).toMatchObject({ total_requests: 1, total_tokens: completion.usage!.total_tokens, total_cost_millicents: cost });
    const daily = await get<{ data: DailyEntry[] }>(workspace, '/usage/daily');
    expect(daily.data[0]).toEqual({ date: day(0), requests: 1, tokens: completion.usage!.total_tokens, cost_millicents: cost });
  });

  describe('usage_daily_totals (what the summary and the daily series read)', () => {
    /** Rows where the rollup and the aggregate of the records disagree, over the whole database. */
    const mismatches = async () =>
      (await db.query(`
        SELECT coalesce(r.workspace_id, t.workspace_id) AS workspace_id, coalesce(r.day, t.day) AS day, coalesce(r.model, t.model) AS model,
               coalesce(r.provider, t.provider) AS provider, r.requests AS records_requests, t.requests AS rollup_requests
          FROM (SELECT workspace_id, (created_at AT TIME ZONE 'UTC')::date AS day, model, coalesce(provider, '') AS provider,
                       coalesce(api_key_id, '00000000-0000-0000-0000-000000000000') AS api_key_id,
                       count(*) AS requests, sum(total_tokens) AS tokens, sum(total_cost_millicents) AS cost, sum(latency_ms) AS latency
                  FROM usage_records GROUP BY 1, 2, 3, 4, 5) AS r
          FULL JOIN usage_daily_totals AS t USING (workspace_id, day, model, provider, api_key_id)
         WHERE r.requests IS DISTINCT FROM t.requests OR r.tokens IS DISTINCT FROM t.tokens
            OR r.cost IS DISTINCT FROM t.cost_millicents OR r.latency IS DISTINCT FROM t.latency_ms`)) as unknown[];

    it('equals the aggregate of the records through inserts, updates, deletes, a workspace deletion and a truncate', async () => {
      const workspace = await t.createWorkspace();
      const doomed = await t.createWorkspace();
      const ids = await insert(workspace, [
        { createdAt: `${day(-4)}T08:00:00Z`, model: 'gpt-4o', llmMicro: 1_500_000, latencyMs: 10, provider: 'openai' },
        { createdAt: `${day(-4)}T09:00:00Z`, model: 'gpt-4o', llmMicro: 2_000_000, latencyMs: 20, provider: 'openai' },
        { createdAt: `${day(-3)}T09:00:00Z`, model: 'o4-mini', llmMicro: 3_000_000, latencyMs: 30, provider: 'azure' },
      ]);
      await insert(doomed, [{ createdAt: `${day(-2)}T00:00:00Z` }]);
      expect(await mismatches()).toEqual([]);

      // A correction: another model, day and cost. The old group loses it, the new one gains it.
      await db.query(
        `UPDATE usage_records SET model = 'o4-mini', created_at = $2, llm_cost_millicents = 4, total_cost_millicents = 4 WHERE id = $1`,
        [ids[0], `${day(-3)}T23:59:59.999999Z`],
      );
      expect(await mismatches()).toEqual([]);
      let summary = await get<{ data: UsageSummary }>(workspace, '/usage');
      expect(summary.data.by_model).toEqual([
        { model: 'o4-mini', requests: 2, cost_millicents: 7 },
        { model: 'gpt-4o', requests: 1, cost_millicents: 2 },
      ]);
      expect(summary.data.by_provider).toEqual([
        { provider: 'openai', requests: 2, cost_millicents: 6 },
        { provider: 'azure', requests: 1, cost_millicents: 3 },
      ]);

      // Only the provider changes (same day and model): another key of the totals; none is null there.
      await db.query(`UPDATE usage_records SET provider = NULL WHERE id = $1`, [ids[2]]);
      expect(await mismatches()).toEqual([]);
      summary = await get<{ data: UsageSummary }>(workspace, '/usage');
      expect(summary.data.by_provider).toEqual([
        { provider: 'openai', requests: 2, cost_millicents: 6 },
        { provider: null, requests: 1, cost_millicents: 3 },
      ]);
      expect(await db.query(`SELECT 1 FROM usage_daily_totals WHERE workspace_id = $1 AND provider = 'azure'`, [workspace.id])).toEqual([]);

      await db.query('DELETE FROM usage_records WHERE id = $1', [ids[1]]);
      expect(await mismatches()).toEqual([]);
      summary = await get<{ data: UsageSummary }>(workspace, '/usage');
      expect(summary.data.by_model).toEqual([{ model: 'o4-mini', requests: 2, cost_millicents: 7 }]);
      expect(summary.data.by_provider).toEqual([
        { provider: 'openai', requests: 1, cost_millicents: 4 },
        { provider: null, requests: 1, cost_millicents: 3 },
      ]);
      expect(await db.query(`SELECT 1 FROM usage_daily_totals WHERE workspace_id = $1 AND model = 'gpt-4o'`, [workspace.id])).toEqual([]);

      // Deleting a workspace cascades to its records and its totals, and the triggers let it.
      await db.query('DELETE FROM workspaces WHERE id = $1', [doomed.id]);
      expect(await db.query('SELECT 1 FROM usage_daily_totals WHERE workspace_id = $1', [doomed.id])).toEqual([]);
      expect(await mismatches()).toEqual([]);

      const runner = db.createQueryRunner();
      await runner.connect();
      try {
        await runner.startTransaction();
        await runner.query('TRUNCATE usage_records');
        expect(await runner.query('SELECT count(*)::int AS n FROM usage_daily_totals')).toEqual([{ n: 0 }]);
      } finally {
        await runner.rollbackTransaction();
        await runner.release();
      }
      expect(await mismatches()).toEqual([]);
    });

    it('keeps equal to the records when the provider joins its key (UsageAnswerer, down and up again over existing records)', async () => {
      const workspace = await t.createWorkspace();
      await insert(workspace, [
        { createdAt: `${day(-2)}T08:00:00Z`, model: 'gpt-4o', llmMicro: 1_500_000, provider: 'openai' },
        { createdAt: `${day(-2)}T09:00:00Z`, model: 'gpt-4o', llmMicro: 2_000_000, provider: 'azure' },
        { createdAt: `${day(-1)}T09:00:00Z`, model: 'gpt-4o', llmMicro: 3_000_000, provider: null },
      ]);
      const runner = db.createQueryRunner();
      await runner.connect();
      try {
        await runner.startTransaction();
        // The migrations after it first (KeyLimits puts the key in the same grain), then back up in order.
        const keyLimits = new KeyLimits1764003500000();
        await keyLimits.down(runner);
        const migration = new UsageAnswerer1764003250000();
        await migration.down(runner);
        expect(await runner.query(`SELECT day::text, requests::int FROM usage_daily_totals WHERE workspace_id = $1 ORDER BY day`, [workspace.id])).toEqual([
          { day: day(-2), requests: 2 },
          { day: day(-1), requests: 1 },
        ]);
        // As on a database of the previous version: the records' providers are unknown, and their totals keep ''.
        await migration.up(runner);
        expect(
          await runner.query(`SELECT day::text, provider, requests::int FROM usage_daily_totals WHERE workspace_id = $1 ORDER BY day`, [workspace.id]),
        ).toEqual([
          { day: day(-2), provider: '', requests: 2 },
          { day: day(-1), provider: '', requests: 1 },
        ]);
        await keyLimits.up(runner);
        await runner.query(`UPDATE usage_records SET provider = 'openai' WHERE workspace_id = $1 AND created_at < $2`, [
          workspace.id,
          `${day(-2)}T08:30:00Z`,
        ]);
        await runner.commitTransaction();
      } catch (error) {
        await runner.rollbackTransaction();
        throw error;
      } finally {
        await runner.release();
      }
      expect(await mismatches()).toEqual([]);
      const summary = await get<{ data: UsageSummary }>(workspace, '/usage');
      expect(summary.data.by_provider).toEqual([
        { provider: null, requests: 2, cost_millicents: 5 },
        { provider: 'openai', requests: 1, cost_millicents: 1.5 },
      ]);
    });
  });

  it('documents the three endpoints, their parameters and their answers in the OpenAPI document', async () => {
    const document = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as {
      paths: Record<string, { get: { parameters: { name: string; schema: { example?: unknown }; example?: unknown }[]; responses: Record<string, unknown> } }>;
      components: { schemas: Record<string, { properties: Record<string, { example?: unknown }> }> };
    };
    const names = (path: string) => document.paths[path].get.parameters.map((parameter) => parameter.name).sort();
    expect(names('/v1/usage')).toEqual(['api_key_id', 'end_date', 'start_date']);
    expect(names('/v1/usage/daily')).toEqual(['api_key_id', 'end_date', 'start_date']);
    expect(names('/v1/usage/recent')).toEqual(['api_key_id', 'assistant_id', 'limit', 'model', 'starting_after', 'status', 'user_id']);
    for (const path of ['/v1/usage', '/v1/usage/daily', '/v1/usage/recent']) {
      expect(Object.keys(document.paths[path].get.responses)).toEqual(expect.arrayContaining(['200', '400', '401', '429']));
      for (const parameter of document.paths[path].get.parameters) {
        const example = parameter.example ?? parameter.schema.example;
        expect({ path, parameter: parameter.name, hasExample: example !== undefined }).toEqual({ path, parameter: parameter.name, hasExample: true });
      }
    }
    const limit = document.paths['/v1/usage/recent'].get.parameters.find((parameter) => parameter.name === 'limit') as unknown as {
      schema: { minimum: number; maximum: number; default: number };
    };
    expect(limit.schema).toMatchObject({ minimum: 1, maximum: 100, default: 20 });
    for (const schema of ['UsageTotalsDto', 'ModelUsageDto', 'ProviderUsageDto', 'KeyUsageDto', 'UsageRecordDto', 'DailyUsageDto', 'UsagePeriodDto']) {
      for (const [property, definition] of Object.entries(document.components.schemas[schema].properties)) {
        expect({ schema, property, hasExample: 'example' in definition }).toEqual({ schema, property, hasExample: true });
      }
    }
  });
});
