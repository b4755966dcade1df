import OpenAI from 'openai';
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { freePort } from '../src/database/embedded-postgres';
import { DashboardClient, textOf } from './support/dashboard-client';
import {
  describeResult,
  killQuietly,
  processExists,
  readPostmasterPid,
  runCli,
  ServerProcess,
  waitUntil,
} from './support/processes';

/**
 * The first-start experience as a user gets it: `node dist/src/main.js` on an empty
 * DATA_DIR, without DATABASE_URL, so it creates and runs its own PostgreSQL. The steps
 * build on each other (one DATA_DIR through two server lives and three CLI runs), so
 * they run in order and a failure makes the later ones fail too.
 */
describe('first start (dist/src/main.js on an empty DATA_DIR)', () => {
  let dataDir: string;
  let clusterDir: string;
  let port: number;
  let baseUrl: string;
  let serverEnv: Record<string, string>;
  let cliEnv: Record<string, string>;
  const servers: ServerProcess[] = [];

  /** Learned along the way. */
  let demoKey: string;
  /** The demo wallet at the end of the first run, which the second run must show again. */
  let balanceBeforeRestart = -1;
  let demoWorkspaceId: string;
  let cliKey: string;

  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-first-start-'));
    // Run as root, the embedded server runs as the unprivileged `postgres` user: it must be
    // able to reach its cluster directory under DATA_DIR.
    await chmod(dataDir, 0o755);
    clusterDir = path.join(dataDir, 'postgres');
    port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    serverEnv = { DATA_DIR: dataDir, PORT: String(port), HOST: '127.0.0.1', LOG_LEVEL: 'warn' };
    cliEnv = { DATA_DIR: dataDir, LOG_LEVEL: 'error' };
  });

  afterAll(async () => {
    for (const server of servers) server.kill();
    await Promise.all(servers.map((server) => server.exited));
    // A server killed mid-test leaves its PostgreSQL behind: stop exactly those, by pid
    // (SIGQUIT: immediate shutdown, the postmaster takes its backends with it).
    for (const pid of await postgresProcessesOf(clusterDir)) killQuietly(pid, 'SIGQUIT');
    await waitUntil(async () => (await postgresProcessesOf(clusterDir)).length === 0, 5_000);
    for (const pid of await postgresProcessesOf(clusterDir)) killQuietly(pid, 'SIGKILL');
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  function startServer(): ServerProcess {
    const server = ServerProcess.start(serverEnv);
    servers.push(server);
    return server;
  }

  const client = (apiKey: string) => new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });

  /** SIGTERM, then the contract of a clean stop: exit 0, and no PostgreSQL left on DATA_DIR. */
  async function stopCleanly(server: ServerProcess): Promise<number> {
    const postgres = await readPostmasterPid(clusterDir);
    expect(postgres).not.toBeNull();
    expect(processExists(postgres!.pid)).toBe(true);

    const stopped = await server.stop('SIGTERM', 15_000);
    expect({ code: stopped.code, signal: stopped.signal }).toEqual({ code: 0, signal: null });
    // The server stops its PostgreSQL before it exits, so both are gone by now.
    expect(await readPostmasterPid(clusterDir)).toBeNull();
    expect(processExists(postgres!.pid)).toBe(false);
    expect(await postgresProcessesOf(clusterDir)).toEqual([]);
    return stopped.durationMs;
  }

  describe('the first server', () => {
    let server: ServerProcess;
    let banner: string;

    it('creates the cluster and prints a banner with the key, the base URL and a curl line', async () => {
      server = startServer();
      banner = (await server.waitForStdout(/ First start:[\s\S]*?\n={78}\n/, 60_000))[0];

      const key = banner.match(/^ {3}(sk-[A-Za-z0-9_-]+)$/m);
      expect(key).not.toBeNull();
      demoKey = key![1];
      expect(demoKey.length).toBeGreaterThanOrEqual(35);
      expect(banner).toContain(` Base URL for OpenAI clients: ${baseUrl}/v1\n`);
      expect(banner).toContain(`   curl ${baseUrl}/v1/models -H "Authorization: Bearer ${demoKey}"\n`);
      const hint = banner.match(/npm run cli -- key create --workspace ([0-9a-f-]{36})/);
      expect(hint).not.toBeNull();
      demoWorkspaceId = hint![1];

      // The cluster is where DATA_DIR says, and the server runs on it.
      expect(await readPostmasterPid(clusterDir)).toEqual({ pid: expect.any(Number), port: expect.any(Number) });
      expect(server.stderr).not.toMatch(/ERROR|could not start/);
    }, 70_000);

    it('prints a single-use dashboard link that signs the demo owner in', async () => {
      const printed = banner.match(/^ Dashboard: (\S+)\/ {2}-> {2}sign in once with: (\S+)$/m);
      expect(printed).not.toBeNull();
      expect(printed![1]).toBe(baseUrl);
      const link = printed![2];
      expect(link).toMatch(new RegExp(`^${baseUrl}/sign-in/[A-Za-z0-9_-]{43}$`));

      // As a browser: the link shows a page with a button (a link previewer spends nothing)...
      const browser = new DashboardClient(baseUrl);
      const page = await browser.get(link);
      expect(page.status).toBe(200);
      expect(page.html).toContain(`action="${new URL(link).pathname}"`);
      // ...whose form signs in, with a session cookie, and lands on the Overview of the demo
      // workspace (the workspace of the banner's CLI hint), which asks for a password.
      const signedIn = await browser.post(new URL(link).pathname);
      expect(signedIn.status).toBe(303);
      expect(signedIn.location).toBe(`/w/${demoWorkspaceId}`);
      expect(browser.sessionCookie).toBeDefined();
      const overview = await browser.follow(signedIn);
      expect(overview.status).toBe(200);
      expect(overview.html).toContain('<h1>Demo</h1>');
      expect(overview.html).toMatch(/Demo <small>\(owner\)<\/small>/);
      expect(textOf(overview.html)).toContain('Set a password to sign in as owner@localhost next time.');
      expect((await browser.get('/')).location).toBe(`/w/${demoWorkspaceId}`);
      const keys = await browser.get(`/w/${demoWorkspaceId}/settings/keys`);
      expect(keys.html).toContain('id="create-key-form"');
      expect(keys.html).not.toContain(demoKey);

      // Once only: the link is spent.
      const again = await new DashboardClient(baseUrl).get(link);
      expect(again.status).not.toBe(200);
      expect(again.html).not.toContain(`action="${new URL(link).pathname}"`);
    });

    it('gives a key that lists the catalog (eight chat models, three embedding models) through the official SDK', async () => {
      const models = await client(demoKey).models.list();
      expect(models.data).toHaveLength(11);
      expect(models.data.every((model) => model.object === 'model')).toBe(true);
    });

    it('prints a curl line that works as printed', async () => {
      const curl = banner.match(/curl (\S+) -H "([^:]+): ([^"]+)"/)!;
      const response = await fetch(curl[1], { headers: { [curl[2]]: curl[3] } });
      expect(response.status).toBe(200);
      expect(((await response.json()) as { data: unknown[] }).data).toHaveLength(11);
    });

    it('creates the demo assistant, which answers (from the simulator, no keys being set) as the banner shows', async () => {
      expect(banner).toContain('"assistant_id": "demo"');
      const completion = await client(demoKey).chat.completions.create({
        assistant_id: 'demo',
        messages: [{ role: 'user', content: 'Hello!' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(completion.model).toBe('gpt-4o-mini');
      expect(completion.choices[0].message.content).toContain('simulator');
      expect((completion as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents).toBeGreaterThan(0);
    });

    it('gives the demo workspace the announced tier and credit', async () => {
      const demo = client(demoKey);
      const { balanceMillicents } = (await demo.get('/wallet')) as { balanceMillicents: number };
      // The opening credit, less the demo assistant's answer above.
      expect(balanceMillicents).toBeLessThanOrEqual(1_000_000);
      expect(balanceMillicents).toBeGreaterThan(999_000);
      balanceBeforeRestart = balanceMillicents;
      expect(await demo.get('/limits')).toMatchObject({ data: { tier: 'pro' } });
    });

    it("lets the CLI work while it runs, on the server's own embedded database", async () => {
      const before = await readPostmasterPid(clusterDir);
      const args = ['workspace', 'create', '--name', 'Second', '--tier', 'pro', '--balance', '4200'];
      const result = await runCli(args, cliEnv);
      expect({ code: result.code, stdout: result.stdout.split('\n').length }).toEqual({ code: 0, stdout: 2 });
      const created = JSON.parse(result.stdout) as { workspace_id: string; api_key: string };
      cliKey = created.api_key;

      // The CLI attached to the running PostgreSQL and left it running.
      expect(await readPostmasterPid(clusterDir)).toEqual(before);
      expect(processExists(before!.pid)).toBe(true);
      expect(server.running).toBe(true);

      expect(await client(cliKey).get('/wallet')).toMatchObject({ balanceMillicents: 4200 });
      const ready = await fetch(`${baseUrl}/health/ready`);
      expect(ready.status).toBe(200);
    }, 30_000);

    it('stops on SIGTERM with exit code 0 within 15 s, and stops its PostgreSQL', async () => {
      expect(await stopCleanly(server)).toBeLessThan(15_000);
    }, 20_000);
  });

  describe('the second server on the same DATA_DIR', () => {
    let server: ServerProcess;

    it('starts without a banner, and the old keys still work', async () => {
      server = startServer();
      await server.waitForHealth(baseUrl, 60_000);

      expect((await client(demoKey).models.list()).data).toHaveLength(11);
      // The balance survived the restart: the credit, less the demo assistant's answer in the first run.
      expect(await client(demoKey).get('/wallet')).toMatchObject({ balanceMillicents: balanceBeforeRestart });
      expect(await client(cliKey).get('/wallet')).toMatchObject({ balanceMillicents: 4200 });
    }, 70_000);

    it('stops cleanly, having printed no banner and created no demo workspace', async () => {
      await stopCleanly(server);
      // Everything it printed, start to exit: the first-start step ran and found workspaces.
      expect(server.stdout).not.toContain('First start');
      expect(server.stdout).not.toMatch(/sk-[A-Za-z0-9_-]{32,}/);
    }, 20_000);
  });

  describe('the CLI with no server running', () => {
    it('starts its own PostgreSQL on DATA_DIR, succeeds, and stops it again', async () => {
      expect(await readPostmasterPid(clusterDir)).toBeNull();
      const args = ['key', 'create', '--workspace', demoWorkspaceId, '--name', 'offline'];
      const result = await runCli(args, cliEnv, { timeoutMs: 30_000 });
      if (result.code !== 0) throw new Error(describeResult(args, result));
      expect(JSON.parse(result.stdout)).toEqual({ id: expect.any(String), api_key: expect.stringMatching(/^sk-/) });
      expect(result.stdout.split('\n')).toHaveLength(2);
      expect(result.stderr).toBe('');

      expect(await readPostmasterPid(clusterDir)).toBeNull();
      expect(await postgresProcessesOf(clusterDir)).toEqual([]);
    }, 40_000);
  });
});

/**
 * The pids of PostgreSQL processes running on `clusterDir` (`postgres -D <clusterDir>`),
 * read from /proc: the postmaster.pid file is gone once a server stops, but a leftover
 * process would still show here.
 */
async function postgresProcessesOf(clusterDir: string | undefined): Promise<number[]> {
  if (!clusterDir) return [];
  let entries: string[];
  try {
    entries = await readdir('/proc');
  } catch {
    return []; // not Linux
  }
  const pids: number[] = [];
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, 'utf8').catch(() => '');
    const args = cmdline.split('\0');
    const dataFlag = args.indexOf('-D');
    if (dataFlag >= 0 && args[dataFlag + 1] === clusterDir && path.basename(args[0]) === 'postgres') {
      pids.push(Number(entry));
    }
  }
  return pids;
}

/**
 * An operator's own catalog (MODEL_CATALOG_FILE) without the default models: the demo
 * assistant must get a model the catalog has, and the banner a key that works.
 */
describe('first start with a one-model MODEL_CATALOG_FILE', () => {
  let dataDir: string;
  let clusterDir: string;
  let server: ServerProcess | undefined;

  beforeAll(async () => {
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-first-start-catalog-'));
    await chmod(dataDir, 0o755);
    clusterDir = path.join(dataDir, 'postgres');
  });

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    for (const pid of await postgresProcessesOf(clusterDir)) killQuietly(pid, 'SIGQUIT');
    await waitUntil(async () => (await postgresProcessesOf(clusterDir)).length === 0, 5_000);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  it('prints a key that lists the one model and a demo assistant that answers with it (and, under BASE_PATH, a working sign-in link)', async () => {
    const catalog = path.join(dataDir, 'catalog.json');
    await writeFile(
      catalog,
      JSON.stringify({ models: [{ id: 'house-model', provider: 'openai', context_length: 32_000, input_price: 1_000, output_price: 2_000 }] }),
    );
    const port = await freePort();
    const baseUrl = `http://127.0.0.1:${port}`;
    server = ServerProcess.start({
      DATA_DIR: dataDir,
      PORT: String(port),
      HOST: '127.0.0.1',
      LOG_LEVEL: 'warn',
      MODEL_CATALOG_FILE: catalog,
      BASE_PATH: '/acs',
    });
    const banner = (await server.waitForStdout(/ First start:[\s\S]*?\n={78}\n/, 60_000))[0];
    const key = banner.match(/^ {3}(sk-[A-Za-z0-9_-]+)$/m)![1];

    // Under BASE_PATH the printed sign-in link carries it, and works as printed.
    const link = banner.match(/^ Dashboard: (\S+)\/ {2}-> {2}sign in once with: (\S+)$/m)!;
    expect(link[1]).toBe(`${baseUrl}/acs`);
    expect(link[2]).toMatch(new RegExp(`^${baseUrl}/acs/sign-in/[A-Za-z0-9_-]{43}$`));
    const browser = new DashboardClient(`${baseUrl}/acs`);
    expect((await browser.get(link[2])).status).toBe(200);
    const signedIn = await browser.post(new URL(link[2]).pathname);
    expect({ status: signedIn.status, location: signedIn.location }).toEqual({ status: 303, location: expect.stringMatching(/^\/acs\/w\/[0-9a-f-]{36}$/) });
    expect(textOf((await browser.follow(signedIn)).html)).toContain('Set a password to sign in as owner@localhost next time.');

    const demo = new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: key, maxRetries: 0, timeout: 10_000 });

    expect((await demo.models.list()).data.map((model) => model.id)).toEqual(['house-model']);
    const completion = await demo.chat.completions.create({
      assistant_id: 'demo',
      messages: [{ role: 'user', content: 'Hello!' }],
    } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
    expect(completion.model).toBe('house-model');
    expect(completion.choices[0].message.content).toContain('simulator');

    const stopped = await server.stop('SIGTERM', 15_000);
    expect({ code: stopped.code, signal: stopped.signal }).toEqual({ code: 0, signal: null });
    expect(server.stderr).not.toMatch(/does not exist|could not start/);
  }, 90_000);
});
