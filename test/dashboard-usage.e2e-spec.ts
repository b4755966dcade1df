import type { Browser } from 'playwright-core';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { MembersService } from '../src/accounts/members.service';
import { formatMillicents } from '../src/dashboard/format';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext } from './support/browser';
import { parseCsv } from './support/csv';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * Usage in the dashboard: summary, cost per model and the daily chart's table show the
 * numbers GET /v1/usage and /v1/usage/daily answer; the recent requests (GET /v1/usage/recent)
 * filter, page and export as CSV; the chart draws in Chromium; every page passes axe.
 */

jest.setTimeout(90_000);

const DAY_MS = 86_400_000;
const day = (daysAgo: number) => new Date(Date.now() - daysAgo * DAY_MS).toISOString().slice(0, 10);

function idsIn(html: string): string[] {
  return [...html.matchAll(/<tr id="usage-([0-9a-f-]{36})">/g)].map((match) => match[1]);
}

describe('dashboard: usage', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let usage: string;
  let apiKey: string;
  let assistantId: string;

  /** The API's answer, with the workspace's key, as a program would read it. */
  async function api<T>(path: string): Promise<T> {
    const response = await fetch(`${t.baseUrl}/v1${path}`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(response.status).toBe(200);
    return (await response.json()) as T;
  }

  /** Usage records on past days, written as the chat service writes them (the triggers keep the daily totals). */
  async function seed(
    rows: { daysAgo: number; model: string; status?: string; user?: string | null; cost: string; assistant?: boolean; tokens?: number; key?: { id: string; name: string } }[],
  ) {
    for (const [index, row] of rows.entries()) {
      await t.app.get(DataSource).query(
        `INSERT INTO usage_records (workspace_id, request_id, assistant_id, model, input_tokens, output_tokens, total_tokens,
                                    llm_cost_millicents, tool_cost_millicents, total_cost_millicents, latency_ms, status, error_code,
                                    user_id, created_at, api_key_id, api_key_name)
         VALUES ($1, $2, $3, $4, $5::bigint, 5, $5::bigint + 5, $6::numeric, 0, $6::numeric, 100 + $7::int, $8, $9, $10, now() - make_interval(days => $11) - make_interval(secs => $7::int), $12, $13)`,
        [
          owner.workspaceId,
          `req_seed_${index}_${Math.random().toString(36).slice(2)}`,
          row.assistant ? assistantId : null,
          row.model,
          row.tokens ?? 10,
          row.cost,
          index,
          row.status ?? 'success',
          row.status === 'error' ? 'upstream_error' : null,
          row.user ?? null,
          row.daysAgo,
          row.key?.id ?? null,
          row.key?.name ?? null,
        ],
      );
    }
  }

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'una@example.com', name: 'Una Usage' });
    usage = `/w/${owner.workspaceId}/usage`;
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'enterprise');
    apiKey = (await t.app.get(ApiKeysService).create(owner.workspaceId, 'usage test')).apiKey;
    await t.app.get(WalletService).credit({ workspaceId: owner.workspaceId, amountMillicents: 10_000_000, type: 'topup', idempotencyKey: 'usage-test' });
    assistantId = (await t.app.get(AssistantsService).create(owner.workspaceId, { name: 'Helper', model: 'gpt-4o-mini' })).id;
  });

  afterAll(async () => {
    await t?.close();
  });

  it('says what to do while there is no usage', async () => {
    const page = await owner.client.get(usage);
    expect(page.status).toBe(200);
    expect(page.html).toContain('id="usage-empty"');
    expect(textOf(page.html)).toContain('Usage appears here once this workspace calls the API.');
    expect(page.html).toContain('id="usage-requests">0<');
    expect(page.html.match(/<tr data-date=/g)).toHaveLength(30);
    const requests = await owner.client.get(`${usage}/requests`);
    expect(textOf(requests.html)).toContain('No requests yet.');
  });

  it('shows the summary, cost per model and daily numbers of /v1/usage for 7, 30 and 90 days, and the daily CSV matches', async () => {
    // Real requests through the official SDK (today), and records on earlier days.
    const client = openAiClient(t.baseUrl, apiKey);
    await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 10 });
    await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi there' }], max_tokens: 10, user_id: 'sdk-user' } as never);
    await seed([
      { daysAgo: 3, model: 'gpt-4o', cost: '1234.567891' },
      { daysAgo: 3, model: 'claude-sonnet-4-6', cost: '99.5', status: 'error' },
      { daysAgo: 20, model: 'gpt-4o-mini', cost: '10.000001', user: 'u-1' },
      { daysAgo: 60, model: 'gpt-4o', cost: '500000', tokens: 1000 },
    ]);

    for (const days of [7, 30, 90]) {
      const { start_date, end_date } = { start_date: day(days - 1), end_date: day(0) };
      const summary = await api<{ data: { summary: { total_requests: number; total_tokens: number; total_cost_millicents: number }; by_model: { model: string; requests: number; cost_millicents: number }[] } }>(
        `/usage?start_date=${start_date}&end_date=${end_date}`,
      );
      const daily = await api<{ data: { date: string; requests: number; tokens: number; cost_millicents: number }[] }>(
        `/usage/daily?start_date=${start_date}&end_date=${end_date}`,
      );
      const page = await owner.client.get(days === 30 ? usage : `${usage}?days=${days}`);
      expect(page.status).toBe(200);
      expect(page.html).toContain(`aria-current="page">Last ${days} days</a>`);
      expect(page.html).toContain(`id="usage-requests">${summary.data.summary.total_requests.toLocaleString('en-US')}<`);
      expect(page.html).toContain(`id="usage-tokens">${summary.data.summary.total_tokens.toLocaleString('en-US')}<`);
      expect(page.html).toContain(`id="usage-cost">${formatMillicents(summary.data.summary.total_cost_millicents)}<`);

      const byModel = page.html.match(/<table id="by-model-table"[\s\S]*?<\/table>/)![0];
      const modelRows = [...byModel.matchAll(/<tr><td><a [^>]*>([^<]+)<\/a><\/td><td class="number">([^<]+)<\/td><td class="number">([^<]+)<\/td><\/tr>/g)].map((m) => [m[1], m[2], m[3]]);
      expect(modelRows).toEqual(summary.data.by_model.map((row) => [row.model, row.requests.toLocaleString('en-US'), formatMillicents(row.cost_millicents)]));

      // The chart's data (the table it is drawn from) is the API's daily series, number for number.
      const chartRows = [...page.html.matchAll(/<tr data-date="([^"]+)" data-requests="(\d+)" data-tokens="(\d+)" data-cost="([^"]+)">/g)].map((m) => ({
        date: m[1],
        requests: Number(m[2]),
        tokens: Number(m[3]),
        cost_millicents: Number(m[4]),
      }));
      expect(chartRows).toEqual(daily.data);

      const csv = await owner.client.get(`${usage}/daily.csv?days=${days}`);
      expect(csv.headers.get('content-type')).toBe('text/csv; charset=utf-8');
      const parsed = parseCsv(csv.html);
      expect(parsed[0]).toEqual(['date', 'requests', 'tokens', 'cost_millicents']);
      expect(parsed.slice(1)).toEqual(daily.data.map((row) => [row.date, String(row.requests), String(row.tokens), String(row.cost_millicents)]));
    }
    // The 60-day-old record is in 90 days only.
    expect((await owner.client.get(`${usage}?days=90`)).html).toContain('id="usage-requests">6<');
    expect((await owner.client.get(usage)).html).toContain('id="usage-requests">5<');
  });

  it('lists recent requests as /v1/usage/recent does, filtered by model, assistant, status, user id and days, a page at a time', async () => {
    await seed(
      Array.from({ length: 60 }, (_, i) => ({
        daysAgo: 1,
        model: i % 2 ? 'gpt-4o-mini' : 'gpt-4-turbo',
        cost: `${i}.5`,
        user: i % 10 === 0 ? 'He said "hi", then =1+1' : `user-${i % 3}`,
        assistant: i % 4 === 0,
        status: i % 7 === 0 ? 'error' : 'success',
      })),
    );
    type Recent = { data: { id: string; total_cost_millicents: number }[]; has_more: boolean; next_cursor: string | null };
    const allApi: string[] = [];
    for (let cursor: string | null = null; ; ) {
      const page: Recent = await api<Recent>(`/usage/recent?limit=100${cursor ? `&starting_after=${cursor}` : ''}`);
      allApi.push(...page.data.map((row) => row.id));
      if (!page.has_more) break;
      cursor = page.next_cursor;
    }
    expect(allApi).toHaveLength(66);

    const first = await owner.client.get(`${usage}/requests`);
    expect(idsIn(first.html)).toEqual(allApi.slice(0, 50));
    const next = first.html.match(/<a href="([^"]+)" id="requests-next"/)![1].replace(/&amp;/g, '&');
    const second = await owner.client.get(next);
    expect(idsIn(second.html)).toEqual(allApi.slice(50));
    expect(second.html).not.toContain('id="requests-next"');

    const cases: [string, string][] = [
      ['model=gpt-4-turbo', 'model=gpt-4-turbo'],
      [`assistant=${assistantId}`, `assistant_id=${assistantId}`],
      ['status=error', 'status=error'],
      ['user=user-1', 'user_id=user-1'],
    ];
    for (const [filter, apiFilter] of cases) {
      const expected = (await api<Recent>(`/usage/recent?limit=100&${apiFilter}`)).data.map((row) => row.id);
      expect(expected.length).toBeGreaterThan(0);
      const page = await owner.client.get(`${usage}/requests?${filter}`);
      expect({ filter, ids: idsIn(page.html) }).toEqual({ filter, ids: expected.slice(0, 50) });
    }
    const combined = await owner.client.get(`${usage}/requests?model=gpt-4o-mini&status=success&user=user-2`);
    const combinedApi = (await api<Recent>('/usage/recent?limit=100&model=gpt-4o-mini&status=success&user_id=user-2')).data.map((row) => row.id);
    expect(idsIn(combined.html)).toEqual(combinedApi);

    // Days: yesterday holds the 60 seeded records, three days ago two.
    expect(idsIn((await owner.client.get(`${usage}/requests?from=${day(3)}&to=${day(3)}`)).html)).toHaveLength(2);
    const yesterday = await owner.client.get(`${usage}/requests?from=${day(1)}&to=${day(1)}`);
    expect(idsIn(yesterday.html)).toHaveLength(50);
    expect(yesterday.html).toContain('id="requests-next"');

    const none = await owner.client.get(`${usage}/requests?user=nobody`);
    expect(textOf(none.html)).toContain('No request matches these filters.');
    const bad = await owner.client.get(`${usage}/requests?status=ok&from=2026-02-30&assistant=demo`);
    expect(bad.status).toBe(400);
    for (const id of ['filter-status-error', 'filter-from-error', 'filter-assistant-error']) expect(bad.html).toContain(`<small id="${id}">`);
    const unknownCursor = await owner.client.get(`${usage}/requests?after=${owner.workspaceId}`);
    expect(unknownCursor.status).toBe(400);
    expect(unknownCursor.html).toContain('id="requests-cursor-error"');
  });

  it('splits usage by API key: the summary, its key filter, and the requests filtered by key, as the API does', async () => {
    const keys = t.app.get(ApiKeysService);
    const ci = await keys.create(owner.workspaceId, 'ci');
    const prod = await keys.create(owner.workspaceId, 'prod');
    await seed([
      { daysAgo: 2, model: 'gpt-4o', cost: '100', key: { id: ci.id, name: 'ci' } },
      { daysAgo: 2, model: 'gpt-4o', cost: '200', key: { id: prod.id, name: 'prod' } },
      { daysAgo: 2, model: 'gpt-4o-mini', cost: '300', key: { id: prod.id, name: 'prod (then)' } },
    ]);
    const summary = await owner.client.get(usage);
    const byKey = summary.html.match(/<table id="by-key-table"[\s\S]*?<\/table>/)![0];
    expect(textOf(byKey)).toMatch(/prod 2 \$0\.005/);
    expect(textOf(byKey)).toMatch(/ci 1 \$0\.001/);

    const onlyProd = await owner.client.get(`${usage}?key=${prod.id}`);
    expect(onlyProd.html).toContain(`<option value="${prod.id}" selected>`);
    const api = await fetch(`${t.baseUrl}/v1/usage?api_key_id=${prod.id}`, { headers: { authorization: `Bearer ${apiKey}` } });
    const expected = ((await api.json()) as { data: { summary: { total_requests: number } } }).data.summary.total_requests;
    expect(textOf(onlyProd.html.match(/id="usage-requests">[^<]*/)![0].slice('id="usage-requests">'.length))).toBe(String(expected));
    expect(expected).toBe(2);

    const requests = await owner.client.get(`${usage}/requests?key=${prod.id}`);
    const apiIds = (await fetch(`${t.baseUrl}/v1/usage/recent?api_key_id=${prod.id}`, { headers: { authorization: `Bearer ${apiKey}` } }).then((r) => r.json()) as {
      data: { id: string }[];
    }).data.map((row) => row.id);
    expect(idsIn(requests.html)).toEqual(apiIds);
    expect(apiIds).toHaveLength(2);
    // Each record shows the name its key had then.
    expect(textOf(requests.html)).toContain('prod (then)');
    expect((await owner.client.get(`${usage}/requests?key=not-a-key`)).status).toBe(400);
  });

  it('exports the filtered requests as CSV, every page, with exact costs and safe quoting', async () => {
    const csv = await owner.client.get(`${usage}/requests.csv?model=gpt-4-turbo`);
    expect(csv.status).toBe(200);
    expect(csv.headers.get('content-disposition')).toBe(`attachment; filename="usage-requests-${owner.workspaceId}.csv"`);
    const rows = parseCsv(csv.html);
    const header = rows[0];
    expect(header.slice(0, 4)).toEqual(['id', 'created_at', 'request_id', 'model']);
    const records = (await t.app.get(DataSource).query(
      `SELECT id, created_at, total_cost_millicents::text AS cost, user_id, status FROM usage_records
        WHERE workspace_id = $1 AND model = 'gpt-4-turbo' ORDER BY created_at DESC, id DESC`,
      [owner.workspaceId],
    )) as { id: string; created_at: Date; cost: string; user_id: string | null; status: string }[];
    const column = (name: string) => header.indexOf(name);
    expect(rows.slice(1).map((row) => [row[0], row[1], row[column('total_cost_millicents')], row[column('user_id')], row[column('status')]])).toEqual(
      records.map((record) => [
        record.id,
        record.created_at.toISOString(),
        record.cost,
        record.user_id === 'He said "hi", then =1+1' ? record.user_id : (record.user_id ?? ''),
        record.status,
      ]),
    );
    expect(csv.html).toContain('"He said ""hi"", then =1+1"');
    expect(rows.slice(1).every((row) => row.length === header.length)).toBe(true);
    const bad = await owner.client.get(`${usage}/requests.csv?status=nope`);
    expect(bad.status).toBe(400);
    expect(bad.html).toContain('Bad filters: Choose success or error.');
  });

  it('lets a member read usage', async () => {
    const [{ id: ownerId }] = (await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', ['una@example.com'])) as { id: string }[];
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'max@example.com', 'member', ownerId);
    const member = await signUp(t.baseUrl, { email: 'max@example.com', name: 'Max Member', invitation: invitation.token });
    expect((await member.client.get(usage)).status).toBe(200);
    expect((await member.client.get(`${usage}/requests`)).status).toBe(200);
    expect((await member.client.get(`${usage}/requests.csv`)).status).toBe(200);
  });
});

describeWithBrowser('dashboard: usage in Chromium', () => {
  let t: TestApp;
  let browser: Browser;
  let owner: SignedUpPerson;

  beforeAll(async () => {
    [t, browser] = await Promise.all([startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } }), launchChromium()]);
    owner = await signUp(t.baseUrl, { email: 'chart@example.com', name: 'Cora Chart' });
    await t.app.get(DataSource).query(
      `INSERT INTO usage_records (workspace_id, request_id, model, input_tokens, output_tokens, total_tokens, llm_cost_millicents,
                                  tool_cost_millicents, total_cost_millicents, latency_ms, status, created_at)
       SELECT $1, 'req_chart_' || g, CASE WHEN g % 2 = 0 THEN 'gpt-4o' ELSE 'gpt-4o-mini' END, 10, 5, 15, g * 10, 0, g * 10, 200, 'success',
              now() - make_interval(days => g % 30)
         FROM generate_series(1, 120) AS g`,
      [owner.workspaceId],
    );
  });

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('draws the chart from the daily table, and the usage pages pass axe with no console error', async () => {
    const context = await newContext(browser, t.baseUrl);
    await context.addCookies([{ name: 'acs.sid', value: owner.client.sessionCookie!, url: t.baseUrl }]);
    const page = await context.newPage();
    const problems = collectConsoleErrors(page);
    await page.goto(`/w/${owner.workspaceId}/usage`);
    await page.waitForSelector('#usage-chart .uplot canvas');
    const series = await page.$$eval('#usage-chart .u-legend .u-series th', (cells) => cells.map((cell) => cell.textContent?.trim()));
    expect(series).toEqual(expect.arrayContaining(['Requests', 'Cost ($)']));
    expect(await page.textContent('#usage-requests')).toBe('120');
    await expectAccessible(page, 'usage summary');
    await page.getByRole('link', { name: 'Last 7 days' }).click();
    await page.waitForSelector('#usage-chart .uplot canvas');
    expect(await page.$$eval('#daily-table tbody tr', (rows) => rows.length)).toBe(7);

    await page.getByRole('link', { name: 'Recent requests' }).click();
    await page.waitForSelector('#requests-table');
    await expectAccessible(page, 'recent requests');
    await page.getByLabel('Model').selectOption('gpt-4o');
    await Promise.all([page.waitForEvent('load'), page.getByRole('button', { name: 'Filter' }).click()]);
    expect(page.url()).toContain('model=gpt-4o');
    expect(await page.$$eval('#requests-table tbody tr', (rows) => rows.length)).toBe(50);
    await expectAccessible(page, 'recent requests, filtered');
    expect(problems).toEqual([]);
    await context.close();
  });
});
