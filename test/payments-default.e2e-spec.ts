import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import OpenAI from 'openai';
import { freePort } from '../src/database/embedded-postgres';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { DashboardClient, textOf } from './support/dashboard-client';
import { killQuietly, MAIN_JS, processEnv, readPostmasterPid, ServerProcess } from './support/processes';

/**
 * No free money by default (issue 29): the built service started as `npm start` starts it
 * (`node dist/src/main.js`, no NODE_ENV, the embedded PostgreSQL on an empty DATA_DIR).
 * With a real provider key (OPENAI_API_KEY, its base URL on a fake OpenAI) and no payment
 * settings, the billing page says payments are not configured and no form posted anyway
 * adds credit; with the simulator only, simulated payments are offered and work. And
 * listening on every address (the default HOST) with that key and open sign-up, it warns at
 * start, in the log and in the first-start banner: that server runs in a network namespace of
 * its own, so it is reachable by nobody while it listens beyond loopback.
 */

jest.setTimeout(120_000);

/** The demo workspace's credit on first start. */
const DEMO_CREDIT = 1_000_000;

interface Started {
  server: ServerProcess;
  baseUrl: string;
  dataDir: string;
  apiKey: string;
  workspaceId: string;
  signInLink: string;
}

const dataDirs: string[] = [];

async function emptyDataDir(): Promise<string> {
  const dataDir = await mkdtemp(path.join(tmpdir(), 'acs-payments-default-'));
  // The embedded PostgreSQL runs as the unprivileged `postgres` user: it must reach DATA_DIR.
  await chmod(dataDir, 0o755);
  dataDirs.push(dataDir);
  return dataDir;
}

/** The first-start banner, whole (it ends with a line of `=`). */
const BANNER = /\n={78}\n First start[\s\S]*?\n={78}\n/;

async function firstStart(env: Record<string, string>): Promise<Started> {
  const dataDir = await emptyDataDir();
  const port = await freePort();
  const baseUrl = `http://127.0.0.1:${port}`;
  const server = ServerProcess.start({ DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', ...env });
  const [banner] = await server.waitForStdout(BANNER, 90_000);
  return {
    server,
    baseUrl,
    dataDir,
    apiKey: banner.match(/^ {3}(sk-\S+)$/m)![1],
    workspaceId: banner.match(/--workspace ([0-9a-f-]{36})/)![1],
    signInLink: banner.match(/sign in once with: (\S+)$/m)![1],
  };
}

/** The demo owner, signed in by the banner's single-use link. */
async function signInAsDemoOwner(started: Started): Promise<DashboardClient> {
  const browser = new DashboardClient(started.baseUrl);
  await browser.get(started.signInLink);
  const signedIn = await browser.post(new URL(started.signInLink).pathname);
  expect(signedIn.status).toBe(303);
  return browser;
}

async function stop(started: Started | undefined): Promise<void> {
  if (!started) return;
  await started.server.stop('SIGTERM', 20_000).catch(() => started.server.kill());
  const postgres = await readPostmasterPid(path.join(started.dataDir, 'postgres'));
  if (postgres) killQuietly(postgres.pid, 'SIGQUIT');
}

const wallet = async (started: Started) =>
  (await new OpenAI({ baseURL: `${started.baseUrl}/v1`, apiKey: started.apiKey, maxRetries: 0 }).get('/wallet')) as { balanceMillicents: number };
/** The wallet's credits, oldest first, as `type: description`. */
const credits = async (started: Started) =>
  ((await new OpenAI({ baseURL: `${started.baseUrl}/v1`, apiKey: started.apiKey, maxRetries: 0 }).get('/wallet/transactions')) as {
    data: { type: string; amountMillicents: number; description: string }[];
  }).data
    .filter((row) => row.amountMillicents > 0)
    .map((row) => `${row.type}: ${row.description}`)
    .reverse();

afterAll(async () => {
  for (const dataDir of dataDirs) await rm(dataDir, { recursive: true, force: true });
});

describe('npm start with a real (fake-upstream) provider key and no payment settings', () => {
  let upstream: FakeOpenAi;
  let started: Started;
  let owner: DashboardClient;
  let billing: string;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    started = await firstStart({ OPENAI_API_KEY: 'sk-operator-real-key', OPENAI_BASE_URL: upstream.url });
    owner = await signInAsDemoOwner(started);
    billing = `/w/${started.workspaceId}/billing`;
  });
  afterAll(async () => {
    await stop(started);
    await upstream?.close();
  });

  it('says at start that payments are not configured (and, on loopback, gives no exposure warning)', () => {
    const output = started.server.output();
    expect(output).toContain('Payments are not configured: no top-up or auto top-up can be bought.');
    expect(output).not.toMatch(/SIMULATED/);
    expect(output).not.toContain('Anyone who can reach this service');
  });

  it('the billing page says payments are not configured and how an operator sets them up, and offers no form', async () => {
    const page = await owner.get(billing);
    expect(page.status).toBe(200);
    const text = textOf(page.html).replace(/ ([,.;)])/g, '$1');
    expect(text).toContain('Payments are not configured on this service, so credit cannot be bought here.');
    expect(text).toContain('The operator sets STRIPE_SECRET_KEY (and STRIPE_WEBHOOK_SECRET) for Stripe, or PAYMENT_PROVIDER=simulated');
    expect(text).toContain('Auto top-up needs payments, which are not configured on this service');
    for (const form of ['topup-form', 'auto-topup-form', 'card-form', 'simulated-payments']) expect(page.html).not.toContain(`id="${form}"`);
  });

  it('gives no credit for the top-up, card and auto top-up forms posted anyway', async () => {
    const posts: Array<[string, Record<string, string>]> = [
      ['topup', { preset: '25' }],
      ['topup', { custom_amount: '999999' }],
      ['card', {}],
      ['auto-topup', { enabled: 'on', threshold: '1000000', amount: '999999' }],
      ['auto-topup', { enabled: 'on', threshold: '5', amount: '20', monthly_cap: '100' }],
    ];
    for (const [route, form] of posts) {
      await owner.get(billing);
      const response = await owner.post(`${billing}/${route}`, form);
      expect({ route, status: response.status }).toEqual({ route, status: 400 });
      expect(textOf(response.html)).toContain('Payments are not configured on this service.');
    }
    expect((await wallet(started)).balanceMillicents).toBe(DEMO_CREDIT);
    // The demo credit is the only credit ever.
    expect(await credits(started)).toEqual(['topup: Opening balance']);
    const page = await owner.get(billing);
    expect(page.html).toContain('id="auto-topup-summary">Off.');
  });

  it('answers through the real provider, paid from the demo credit only', async () => {
    const client = new OpenAI({ baseURL: `${started.baseUrl}/v1`, apiKey: started.apiKey, maxRetries: 0 });
    // 10,000 x 0.015 + 5,000 x 0.06 = 450 millicents on gpt-4o-mini.
    upstream.script({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10_000, completion_tokens: 5_000 } });
    await client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }] });
    expect(upstream.requests).toHaveLength(1);
    expect((await wallet(started)).balanceMillicents).toBe(DEMO_CREDIT - 450);
  });
});

describe('npm start with only the simulator (no provider key, no payment settings)', () => {
  let started: Started;

  beforeAll(async () => {
    started = await firstStart({});
  });
  afterAll(() => stop(started));

  it('offers simulated payments, and a top-up adds its credit', async () => {
    expect(started.server.output()).toContain('Payments are SIMULATED');
    const owner = await signInAsDemoOwner(started);
    const billing = `/w/${started.workspaceId}/billing`;
    const page = await owner.get(billing);
    expect(page.html).toContain('id="simulated-payments"');
    expect(page.html).toContain('id="topup-form"');
    expect(page.html).toContain('id="auto-topup-form"');
    expect(page.html).not.toContain('id="payments-off"');

    const topup = await owner.post(`${billing}/topup`, { preset: '25' });
    expect(topup.status).toBe(303);
    expect((await wallet(started)).balanceMillicents).toBe(DEMO_CREDIT + 2_500_000);
    expect(await credits(started)).toEqual(['topup: Opening balance', 'topup: Top-up (simulated payment)']);
  });
});

/**
 * A network namespace of its own, with only its loopback up: the server listens on every
 * address of it (HOST unset, as `npm start` does) and nobody outside can reach it. Needs
 * root (or CAP_SYS_ADMIN), `unshare` and `ip`; without them the suite is skipped with a
 * warning, and fails under CI=true.
 */
function networkNamespaceUnavailable(): string | null {
  const probe = spawnSync('unshare', ['-n', 'sh', '-c', 'ip link set lo up'], { stdio: 'ignore' });
  return probe.status === 0 ? null : `unshare -n with ip link (root) is not available (${probe.error?.message ?? `exit ${probe.status}`})`;
}

const unavailable = networkNamespaceUnavailable();
const describeInNamespace: jest.Describe = unavailable && process.env.CI !== 'true' ? describe.skip : describe;
if (unavailable) {
  console.warn(`SKIPPED the start-up warning's spawned test: ${unavailable}. Under CI=true this suite fails instead.`);
}

describeInNamespace('npm start listening on every address (the default HOST) with a real key and open sign-up', () => {
  let child: ChildProcess;
  let output = '';
  let dataDir: string;

  beforeAll(async () => {
    dataDir = await emptyDataDir();
    // `exec`: the server is this very process (its pid), in the namespace unshare made.
    child = spawn('unshare', ['-n', 'sh', '-c', 'ip link set lo up && exec "$0" "$@"', process.execPath, MAIN_JS], {
      env: processEnv({ DATA_DIR: dataDir, OPENAI_API_KEY: 'sk-operator-real-key' }),
      cwd: path.dirname(MAIN_JS),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stdout!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    child.stderr!.setEncoding('utf8').on('data', (chunk: string) => (output += chunk));
    const deadline = Date.now() + 90_000;
    while (!BANNER.test(output)) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`No first-start banner:\n${output}`);
      await sleep(100);
    }
  });
  afterAll(async () => {
    if (child?.pid !== undefined && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      killQuietly(child.pid, 'SIGTERM');
      await Promise.race([exited, sleep(20_000, undefined, { ref: false })]);
      if (child.exitCode === null) killQuietly(child.pid, 'SIGKILL');
    }
    const postgres = dataDir ? await readPostmasterPid(path.join(dataDir, 'postgres')) : null;
    if (postgres) killQuietly(postgres.pid, 'SIGQUIT');
  });

  it('logs a WARN naming the risk and the fixes', () => {
    const warning = output.split('\n').find((line) => line.includes('WARNING: Anyone who can reach this service'));
    expect(warning).toBeDefined();
    expect(warning).toMatch(/WARN/);
    expect(warning).toContain('sign up and spend on your provider account: it listens on 0.0.0.0 (beyond this machine) with open sign-up');
    expect(warning).toContain('OPENAI_API_KEY');
    expect(warning).toContain('Fix: set HOST=127.0.0.1 (this machine only), or SIGNUP=invite (only people you invite), or NODE_ENV=production');
  });

  it('says it in the first-start banner too', () => {
    const banner = output.match(BANNER)![0];
    const text = banner.replace(/\n /g, ' ');
    expect(text).toContain('WARNING: Anyone who can reach this service can sign up and spend on your provider account');
    expect(text).toContain('Fix: set HOST=127.0.0.1');
    // Wrapped within the banner's width.
    const lines = banner.split('\n');
    const warning = lines.slice(lines.findIndex((line) => line.includes('WARNING')), -2);
    expect(warning.length).toBeGreaterThan(2);
    expect(warning.filter((line) => line.length > 78)).toEqual([]);
  });
});
