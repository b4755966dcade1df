import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { DeploymentHealthReporter } from '../src/providers/routing/deployment-health-reporter';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { describeResult, runCliInProcess } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';

/**
 * `npm run cli -- deployments`: the CLI is another process, so it reads the health each
 * replica writes to deployment_health (DeploymentHealthReporter), joined with the catalog's
 * deployments as its own configuration builds them.
 */

interface Listed {
  id: string;
  model: string;
  label: string;
  provider: string;
  region: string | null;
  weight: number;
  rpm: number | null;
  tpm: number | null;
  key_source: string;
  state: string;
  cooldown_until: string | null;
  in_flight: number;
  requests: number;
  errors: number;
  error_rate: number | null;
  p50_ms: number | null;
  replicas: number;
}

const KEYS = { failing: 'sk-cli-deployments-failing-secret', healthy: 'sk-cli-deployments-healthy-secret' };

const chatCount = (fake: FakeOpenAi) => fake.requests.filter((r) => r.path.endsWith('/chat/completions')).length;

describe('cli deployments', () => {
  let failing: FakeOpenAi;
  let healthy: FakeOpenAi;
  let t: TestApp | undefined;
  let env: Record<string, string>;

  beforeAll(async () => {
    [failing, healthy] = await Promise.all([startFakeOpenAi(), startFakeOpenAi()]);
    failing.setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'boom', type: 'server_error' } } });
    healthy.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 2 } });
    process.env.CLI_DEPLOYMENTS_KEY_FAILING = KEYS.failing;
    process.env.CLI_DEPLOYMENTS_KEY_HEALTHY = KEYS.healthy;
    const catalog = path.join(mkdtempSync(path.join(tmpdir(), 'cli-deployments-')), 'models.json');
    writeFileSync(
      catalog,
      JSON.stringify({
        models: [
          {
            id: 'gpt-4o-mini',
            provider: 'openai',
            context_length: 128_000,
            max_output_tokens: 16_384,
            input_price: 15_000,
            output_price: 60_000,
            deployments: [
              // Tried first almost always, so that it reaches its cooldown in a few requests.
              { label: 'failing', provider: 'openai', base_url: failing.url, api_key_env: 'CLI_DEPLOYMENTS_KEY_FAILING', weight: 1000 },
              { label: 'healthy', provider: 'openai', base_url: healthy.url, api_key_env: 'CLI_DEPLOYMENTS_KEY_HEALTHY', weight: 1, rpm: 600, tpm: 100_000, region: 'eu' },
            ],
          },
        ],
      }),
    );
    t = await startTestApp({ config: { llmSimulator: 'off', modelCatalogFile: catalog } });
    env = { DATABASE_URL: t.databaseUrl, MODEL_CATALOG_FILE: catalog, LLM_SIMULATOR: 'off', LOG_LEVEL: 'error' };
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([failing?.close(), healthy?.close()]);
  });

  async function listed(): Promise<Map<string, Listed>> {
    const args = ['deployments'];
    const result = await runCliInProcess(args, env);
    if (result.code !== 0 || result.stderr !== '') throw new Error(describeResult(args, result));
    const lines = result.stdout.split('\n');
    expect(lines).toHaveLength(2);
    for (const key of Object.values(KEYS)) expect(result.stdout).not.toContain(key);
    const parsed = JSON.parse(lines[0]) as { deployments: Listed[] };
    expect(Object.keys(parsed)).toEqual(['deployments']);
    return new Map(parsed.deployments.map((d) => [d.label, d]));
  }

  it("shows the failing deployment in cooldown with its errors, the other healthy with its traffic and latency", async () => {
    const app = t!;
    const workspace = await app.createWorkspace({ tier: 'team', balanceMillicents: 1_000_000 });
    const chat = () => workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 20 });
    // 3 failures in 30 s put "failing" in cooldown; every request is still answered by "healthy".
    for (let i = 0; i < 30 && chatCount(failing) < 3; i++) await chat();
    expect(chatCount(failing)).toBe(3);
    for (let i = 0; i < 3; i++) await chat();
    expect(chatCount(failing)).toBe(3);

    await app.app.get(DeploymentHealthReporter).report();
    const deployments = await listed();
    expect([...deployments.keys()]).toEqual(['failing', 'healthy']);
    const bad = deployments.get('failing')!;
    expect(bad).toMatchObject({
      id: 'gpt-4o-mini/failing',
      model: 'gpt-4o-mini',
      provider: 'openai',
      region: null,
      weight: 1000,
      rpm: null,
      tpm: null,
      key_source: 'env CLI_DEPLOYMENTS_KEY_FAILING',
      state: 'cooldown',
      requests: 3,
      errors: 3,
      error_rate: 1,
      p50_ms: null,
      replicas: 1,
      in_flight: 0,
    });
    expect(Date.parse(bad.cooldown_until!)).toBeGreaterThan(Date.now());
    expect(deployments.get('healthy')).toEqual({
      id: 'gpt-4o-mini/healthy',
      model: 'gpt-4o-mini',
      label: 'healthy',
      provider: 'openai',
      region: 'eu',
      weight: 1,
      rpm: 600,
      tpm: 100_000,
      key_source: 'env CLI_DEPLOYMENTS_KEY_HEALTHY',
      state: 'healthy',
      cooldown_until: null,
      in_flight: 0,
      requests: chatCount(healthy),
      errors: 0,
      error_rate: 0,
      p50_ms: expect.any(Number),
      replicas: 1,
    });
    expect(chatCount(healthy)).toBeGreaterThanOrEqual(6);
  });

  it('sums the replicas that reported in the last 30 s, keeps the worst state and the largest median, and drops replicas gone 10 minutes', async () => {
    const app = t!;
    const db = app.app.get(DataSource);
    const reporter = app.app.get(DeploymentHealthReporter);
    await reporter.report();
    const own = (await listed()).get('healthy')!;
    const row = `INSERT INTO deployment_health (replica, deployment, model, label, provider, state, cooldown_until, in_flight, requests, errors, p50_ms, updated_at)
                 VALUES ($1, 'gpt-4o-mini/healthy', 'gpt-4o-mini', 'healthy', 'openai', 'probation', NULL, 2, 10, 4, 987654, now() - make_interval(secs => $2))`;
    await db.query(row, ['other-host~1~1', 0]);
    // Silent for 40 s: not counted; silent for 11 minutes: removed by the next write.
    await db.query(row, ['quiet-host~2~2', 40]);
    await db.query(row, ['dead-host~3~3', 660]);

    const both = (await listed()).get('healthy')!;
    expect(both).toMatchObject({
      state: 'probation',
      replicas: 2,
      requests: own.requests + 10,
      errors: 4,
      error_rate: 4 / (own.requests + 10),
      in_flight: 2,
      p50_ms: 987654,
    });

    await reporter.report();
    const replicas = await db.query(`SELECT DISTINCT replica FROM deployment_health ORDER BY replica`);
    expect(replicas.map((r: { replica: string }) => r.replica).sort()).toEqual([reporter.replica, 'other-host~1~1', 'quiet-host~2~2'].sort());
    await db.query(`DELETE FROM deployment_health WHERE replica <> $1`, [reporter.replica]);
  });

  it("removes a replica's rows when it stops: the CLI then says unknown", async () => {
    const app = t!;
    const replica = app.app.get(DeploymentHealthReporter).replica;
    const db = new DataSource({ type: 'postgres', url: app.databaseUrl });
    await db.initialize();
    try {
      const rows = async () => (await db.query(`SELECT count(*)::int AS n FROM deployment_health WHERE replica = $1`, [replica]))[0].n as number;
      expect(await rows()).toBe(2);
      await app.close();
      t = undefined;
      expect(await rows()).toBe(0);
    } finally {
      await db.destroy();
    }
    const deployments = await listed();
    for (const d of deployments.values()) {
      expect(d).toMatchObject({ state: 'unknown', cooldown_until: null, requests: 0, errors: 0, error_rate: null, p50_ms: null, replicas: 0 });
    }
    expect(deployments.size).toBe(2);
  });
});
