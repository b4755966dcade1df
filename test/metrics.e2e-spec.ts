import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { AutoTopupScheduler } from '../src/wallet/auto-topup-scheduler';
import { AutoTopupSettingsService } from '../src/wallet/auto-topup-settings.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, testConfig } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

const TOKEN = 'metrics-token-0123456789abcdef';

/** One sample of the text exposition: `name{a="x",b="y"} value`. */
interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

function parse(exposition: string): Sample[] {
  return exposition
    .split('\n')
    .filter((line) => line && !line.startsWith('#'))
    .map((line) => {
      const match = /^([a-zA-Z_:][\w:]*)(?:\{(.*)\})? (\S+)$/.exec(line);
      if (!match) throw new Error(`Not an exposition line: ${line}`);
      const labels = Object.fromEntries([...(match[2] ?? '').matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)].map((m) => [m[1], m[2]]));
      return { name: match[1], labels, value: Number(match[3]) };
    });
}

/** The value of the sample with exactly these labels; undefined when there is none. */
function valueOf(samples: Sample[], name: string, labels: Record<string, string> = {}): number | undefined {
  const keys = Object.keys(labels);
  return samples.find(
    (sample) => sample.name === name && Object.keys(sample.labels).length === keys.length && keys.every((key) => sample.labels[key] === labels[key]),
  )?.value;
}

/**
 * Prometheus metrics on /metrics (issue 13, item 5): behind METRICS_TOKEN on the service's
 * port, or on METRICS_PORT, and not served without either; after real chat calls through the
 * fake upstream, the counters say what the usage records say.
 */
describe('metrics', () => {
  let upstream: FakeOpenAi;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
  });
  afterAll(async () => {
    await upstream?.close();
  });

  describe('behind METRICS_TOKEN', () => {
    let t: TestApp;
    let db: DataSource;
    const scrape = async () => {
      const response = await fetch(`${t.baseUrl}/metrics`, { headers: { Authorization: `Bearer ${TOKEN}` } });
      expect(response.status).toBe(200);
      // Prometheus's text format, version 0.0.4.
      expect(response.headers.get('content-type')).toMatch(/^text\/plain;.*version=0\.0\.4/);
      return parse(await response.text());
    };

    beforeAll(async () => {
      t = await startTestApp({
        config: {
          providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
          upstreamMaxRetries: 0,
          anonymousRateLimitRpm: 2,
          metrics: { token: TOKEN },
          // A real (fake) provider key: simulated payments only when asked for.
          payments: { ...testConfig().payments, provider: 'simulated' },
        },
      });
      db = t.app.get<DataSource>(getDataSourceToken());
    });
    afterAll(async () => {
      await t?.close();
    });

    it('refuses a scrape without the token, or with another one', async () => {
      const attempts: Record<string, string>[] = [{}, { Authorization: 'Bearer not-the-metrics-token-at-all' }, { Authorization: TOKEN }];
      for (const headers of attempts) {
        const response = await fetch(`${t.baseUrl}/metrics`, { headers });
        expect(response.status).toBe(401);
        expect(await response.json()).toEqual({
          error: expect.objectContaining({ type: 'authentication_error', code: 'invalid_metrics_token' }),
        });
      }
    });

    it('counts requests, upstream calls, tokens, charges and settlements as the usage records say', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script(
        { kind: 'text', text: 'Plain answer.', usage: { prompt_tokens: 21, completion_tokens: 7 } },
        { kind: 'text', text: 'A streamed answer in words.', usage: { prompt_tokens: 30, completion_tokens: 11 } },
        { kind: 'http_error', status: 400, body: { error: { message: 'bad things', type: 'invalid_request_error' } } },
      );
      await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }] });
      const stream = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        stream: true,
        stream_options: { include_usage: true },
        messages: [{ role: 'user', content: 'Stream please' }],
      });
      for await (const _chunk of stream) {
        // read to the end
      }
      await expect(workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Fail' }] })).rejects.toThrow();
      // A parameterised route, answered 404.
      expect((await fetch(`${t.baseUrl}/v1/conversations/conv_unknown`, { headers: { Authorization: `Bearer ${workspace.apiKey}` } })).status).toBe(404);

      // Token and money counters move when a settlement commits; holds and leases gauges once the lease went back.
      await t.quiet(workspace.id);
      const samples = await scrape();
      const chat = { method: 'POST', route: '/v1/chat/completions' };
      expect(valueOf(samples, 'acs_http_requests_total', { ...chat, status: '200' })).toBe(2);
      expect(valueOf(samples, 'acs_http_request_duration_seconds_count', { ...chat, status: '200' })).toBe(2);
      expect(valueOf(samples, 'acs_http_requests_total', { method: 'GET', route: '/v1/conversations/:id', status: '404' })).toBe(1);
      // Never a raw URL as a label.
      expect(samples.some((sample) => Object.values(sample.labels).some((value) => value.includes('conv_unknown')))).toBe(false);

      const gpt4o = { provider: 'openai', model: 'gpt-4o' };
      expect(valueOf(samples, 'acs_upstream_requests_total', { ...gpt4o, outcome: 'ok' })).toBe(2);
      expect(valueOf(samples, 'acs_upstream_requests_total', { ...gpt4o, outcome: 'error' })).toBe(1);
      const errorSeries = samples.filter((sample) => sample.name === 'acs_upstream_errors_total');
      expect(errorSeries).toHaveLength(1);
      expect(errorSeries[0]).toMatchObject({ labels: { ...gpt4o }, value: 1 });
      expect(valueOf(samples, 'acs_upstream_request_duration_seconds_count', { ...gpt4o, kind: 'complete' })).toBe(2);
      expect(valueOf(samples, 'acs_upstream_request_duration_seconds_count', { ...gpt4o, kind: 'stream' })).toBe(1);
      expect(valueOf(samples, 'acs_upstream_time_to_first_token_seconds_count', gpt4o)).toBe(1);

      // Tokens and money: what the usage records of this workspace say.
      const records = (await db.query(`SELECT status, charged_millicents::int AS charged, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1`, [
        workspace.id,
      ])) as { status: string; charged: number; input_tokens: number; output_tokens: number }[];
      const sum = (pick: (record: (typeof records)[number]) => number) => records.reduce((total, record) => total + pick(record), 0);
      expect(valueOf(samples, 'acs_tokens_total', { model: 'gpt-4o', kind: 'input' })).toBe(sum((r) => r.input_tokens));
      expect(valueOf(samples, 'acs_tokens_total', { model: 'gpt-4o', kind: 'output' })).toBe(sum((r) => r.output_tokens));
      expect(sum((r) => r.output_tokens)).toBe(18);
      expect(valueOf(samples, 'acs_charged_millicents_total', { model: 'gpt-4o' })).toBe(sum((r) => r.charged));
      expect(sum((r) => r.charged)).toBeGreaterThan(0);
      expect(valueOf(samples, 'acs_settlements_total', { outcome: 'success' })).toBe(2);
      expect(valueOf(samples, 'acs_settlements_total', { outcome: 'error_uncharged' })).toBe(1);

      // State read when scraped: the pool, the wallet's holds, the event loop.
      expect(valueOf(samples, 'acs_db_pool_connections', { state: 'total' })).toBeGreaterThan(0);
      expect(valueOf(samples, 'acs_db_pool_connections', { state: 'waiting' })).toBe(0);
      expect(valueOf(samples, 'acs_wallet_reserved_millicents')).toBe(0);
      expect(valueOf(samples, 'acs_wallet_holds', { kind: 'request' })).toBe(0);
      expect(valueOf(samples, 'acs_wallet_leases')).toBeGreaterThanOrEqual(0);
      expect(valueOf(samples, 'acs_billing_incidents', { kind: 'settlement_failed' })).toBe(0);
      expect(valueOf(samples, 'acs_nodejs_eventloop_lag_seconds')).toBeGreaterThanOrEqual(0);
      expect(valueOf(samples, 'acs_process_resident_memory_bytes')).toBeGreaterThan(0);
    });

    it('counts auto top-up outcomes', async () => {
      // Simulated payments (PAYMENT_PROVIDER=simulated): the charge below the threshold buys one top-up.
      const workspace = await t.createWorkspace({ balanceMillicents: 50_001 });
      await t.app.get(AutoTopupSettingsService).configure({ workspaceId: workspace.id, enabled: true, thresholdMillicents: 50_000, amountMillicents: 100_000 });
      upstream.script({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 5 } });
      await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }] });
      // The top-up starts once the charge commits.
      await t.settled(workspace.id);
      await t.app.get(AutoTopupScheduler).idle();
      const [attempt] = await db.query(`SELECT status FROM auto_topup_attempts WHERE workspace_id = $1`, [workspace.id]);
      expect(attempt).toEqual({ status: 'succeeded' });
      expect(valueOf(await scrape(), 'acs_auto_topups_total', { outcome: 'succeeded' })).toBe(1);
    });

    it('counts rate-limit refusals by scope', async () => {
      const before = valueOf(await scrape(), 'acs_rate_limit_refusals_total', { scope: 'address' }) ?? 0;
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) {
        statuses.push((await fetch(`${t.baseUrl}/v1/models`, { headers: { Authorization: 'Bearer sk-not-a-key' } })).status);
      }
      const refused = statuses.filter((status) => status === 429).length;
      expect(refused).toBeGreaterThan(0);
      expect(valueOf(await scrape(), 'acs_rate_limit_refusals_total', { scope: 'address' })).toBe(before + refused);
    });
  });

  it('is not served without METRICS_TOKEN or METRICS_PORT', async () => {
    const t = await startTestApp();
    try {
      const response = await fetch(`${t.baseUrl}/metrics`);
      expect(response.status).toBe(404);
      expect(((await response.json()) as { error: { message: string } }).error.message).toMatch(/set METRICS_TOKEN, or METRICS_PORT/);
    } finally {
      await t.close();
    }
  });

  it('is served on METRICS_PORT, and only there', async () => {
    const port = await freePort();
    const t = await startTestApp({ config: { metrics: { port } } });
    try {
      expect((await fetch(`${t.baseUrl}/metrics`)).status).toBe(404);
      await fetch(`${t.baseUrl}/health`);
      const response = await fetch(`http://127.0.0.1:${port}/metrics`);
      expect(response.status).toBe(200);
      const samples = parse(await response.text());
      expect(valueOf(samples, 'acs_http_requests_total', { method: 'GET', route: '/health', status: '200' })).toBe(1);
      expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404);
    } finally {
      await t.close();
    }
    // Closed with the application.
    await expect(fetch(`http://127.0.0.1:${port}/metrics`)).rejects.toThrow();
  });
});
