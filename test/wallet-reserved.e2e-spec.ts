import OpenAI from 'openai';
import { chmod, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { formatMillicents } from '../src/common/dollars';
import { loadConfig } from '../src/config/app-config';
import { freePort } from '../src/database/embedded-postgres';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { signUp } from './support/dashboard-client';
import { killQuietly, readPostmasterPid, ServerProcess, sleep, waitUntil } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';
import { waitFor } from './support/wait-for';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';

/**
 * Reserved is what requests hold (issue 30, item 5): `GET /v1/wallet` counts the holds of
 * requests in flight, not the unused spare of a budget lease (with the production lease idle
 * time, not the tests' 0); another replica's idle lease never shortens an answer the wallet
 * can pay; and a lease whose extension failed while PostgreSQL was frozen is given back as
 * soon as it answers again, not left to the sweeper.
 */
describe('reserved is what requests hold', () => {
  let upstream: FakeOpenAi;
  const production = loadConfig({ LOG_LEVEL: 'error' });

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
  });
  afterAll(async () => {
    await upstream?.close();
  });

  interface WalletFigures {
    balanceMillicents: number;
    reservedMillicents: number;
    availableMillicents: number;
  }
  const wallet = async (baseUrl: string, apiKey: string): Promise<WalletFigures> => {
    const response = await fetch(`${baseUrl}/v1/wallet`, { headers: { authorization: `Bearer ${apiKey}` } });
    expect(response.status).toBe(200);
    return (await response.json()) as WalletFigures;
  };
  const leaseRows = async (db: DataSource, workspaceId: string) =>
    (await db.query(`SELECT id, amount_millicents::bigint AS amount FROM wallet_holds WHERE workspace_id = $1 AND kind = 'lease'`, [
      workspaceId,
    ])) as { id: string; amount: string }[];

  /** Opens a stream and reads its first chunk: its request is admitted and in flight. */
  async function inFlight(client: OpenAI): Promise<() => Promise<string>> {
    const stream = await client.chat.completions.create({
      model: 'gpt-4o',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 100,
      stream: true,
    });
    const chunks = stream[Symbol.asyncIterator]();
    let text = '';
    const first = await chunks.next();
    if (!first.done) text += first.value.choices[0]?.delta?.content ?? '';
    return async () => {
      for (let next = await chunks.next(); !next.done; next = await chunks.next()) text += next.value.choices[0]?.delta?.content ?? '';
      return text;
    };
  }

  describe('in one process, with the default lease idle time', () => {
    let t: TestApp;
    let db: DataSource;
    beforeAll(async () => {
      t = await startTestApp({
        config: {
          providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
          walletLeaseIdleMs: production.walletLeaseIdleMs,
          settlementDurability: production.settlementDurability,
        },
      });
      db = t.app.get<DataSource>(getDataSourceToken());
    });
    afterAll(async () => {
      await t?.close();
    });

    it('shows nothing reserved right after a request completes, while its lease still sets money aside (3 of 3)', async () => {
      expect(production.walletLeaseIdleMs).toBe(500);
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 5 } });
      for (let i = 0; i < 3; i++) {
        await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 900 });
        await t.settled(workspace.id);
        // The lease is still there, its spare set aside in the wallet's row: what the figure must not count.
        const [lease] = await leaseRows(db, workspace.id);
        expect(Number(lease?.amount)).toBeGreaterThan(0);
        const shown = await wallet(t.baseUrl, workspace.apiKey);
        expect(shown.reservedMillicents).toBe(0);
        expect(shown.availableMillicents).toBe(shown.balanceMillicents);
        await waitFor(async () => (await leaseRows(db, workspace.id)).length === 0);
      }
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000 - 22, reserved: 0, ledger: 1_000_000 - 22, holds: 0 });
    });

    it('under traffic shows what the requests in flight hold, not the lease', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000_000 });
      // Streams of 20 words, 250 ms apart: about 5 s in flight each.
      const words = Array.from({ length: 20 }, (_, i) => `w${i}`).join(' ');
      upstream.setDefault({ kind: 'text', text: words, usage: { prompt_tokens: 10, completion_tokens: 20 }, chunkDelayMs: 250 });

      const first = await inFlight(workspace.client);
      const one = await wallet(t.baseUrl, workspace.apiKey);
      const setAside = (await walletInvariants(db, workspace.id)).reserved;
      // One request's hold (its 100 tokens of output and its prompt), far below the lease's amount.
      expect(one.reservedMillicents).toBeGreaterThanOrEqual(100);
      expect(one.reservedMillicents).toBeLessThan(200);
      expect(setAside).toBeGreaterThan(10 * one.reservedMillicents);

      const more = await Promise.all([inFlight(workspace.client), inFlight(workspace.client)]);
      const three = await wallet(t.baseUrl, workspace.apiKey);
      expect(three.reservedMillicents).toBe(3 * one.reservedMillicents);
      expect(three.availableMillicents).toBe(three.balanceMillicents - three.reservedMillicents);

      expect(await Promise.all([first(), ...more.map((rest) => rest())])).toEqual([words, words, words]);
      expect((await wallet(t.baseUrl, workspace.apiKey)).reservedMillicents).toBe(0);
      await waitFor(() => nothingHeld(db, workspace.id));
      const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`, [
        workspace.id,
      ]);
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 10_000_000 - charged, reserved: 0, ledger: 10_000_000 - charged, holds: 0 });
    });
    it('shows the same figures in the dashboard (overview and billing)', async () => {
      const owner = await signUp(t.baseUrl, { email: 'rita@example.com', name: 'Rita Reserved' });
      const wallet = t.app.get(WalletService);
      await wallet.credit({ workspaceId: owner.workspaceId, amountMillicents: 1_000_000, type: 'topup', idempotencyKey: `reserved:${owner.workspaceId}` });
      const hold = await wallet.reserve(owner.workspaceId, 'req_dashboard_reserved', 500, 60_000);
      expect(hold?.lease).toBeDefined();
      // The lease sets aside far more than the one request holds.
      expect((await walletInvariants(db, owner.workspaceId)).reserved).toBeGreaterThan(10 * 500);
      const pages = [
        [`/w/${owner.workspaceId}`, 'stat-reserved'],
        [`/w/${owner.workspaceId}/billing`, 'billing-reserved'],
      ];
      for (const [page, id] of pages) expect((await owner.client.get(page)).html).toContain(`id="${id}">${formatMillicents(500)}<`);
      await wallet.release(hold!);
      for (const [page, id] of pages) expect((await owner.client.get(page)).html).toContain(`id="${id}">${formatMillicents(0)}<`);
      await waitFor(() => nothingHeld(db, owner.workspaceId));
    });
  });

  describe('two service processes on one database', () => {
    let setup: TestApp;
    let db: DataSource;
    let databaseUrl: string;
    let dataDir: string;
    const servers: ServerProcess[] = [];
    const replicas: string[] = [];

    beforeAll(async () => {
      databaseUrl = await createTestDatabase();
      dataDir = await mkdtemp(path.join(tmpdir(), 'acs-reserved-'));
      setup = await startTestApp({ databaseUrl });
      db = setup.app.get<DataSource>(getDataSourceToken());
    });
    afterAll(async () => {
      for (const server of servers) await server.stop('SIGTERM', 30_000).catch(() => server.kill());
      await setup?.close();
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
    });

    async function startService(): Promise<string> {
      const port = await freePort();
      // Production defaults: leases idle for 500 ms, the settlement journal.
      const server = ServerProcess.start({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: databaseUrl,
        DATA_DIR: dataDir,
        SESSION_SECRET: 'wallet-reserved-test-secret-0123456789',
        OPENAI_API_KEY: 'sk-upstream',
        OPENAI_BASE_URL: upstream.url,
        LOG_LEVEL: 'error',
      });
      servers.push(server);
      const baseUrl = `http://127.0.0.1:${port}`;
      await server.waitForHealth(baseUrl, 60_000);
      replicas.push(baseUrl);
      return baseUrl;
    }

    it('shortens no answer for another replica idle lease, alternating requests on a small wallet', async () => {
      await Promise.all([startService(), startService()]);
      // 900 tokens of output hold about 903 millicents; each answer costs 22.5. After a request on
      // one replica its lease keeps about 880 aside for 500 ms: enough, before, to cut the next
      // answer on the other replica to about 590 tokens.
      const BALANCE = 1_500;
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: BALANCE });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      const clients = replicas.map((baseUrl) => new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 0, timeout: 30_000 }));
      const seen = upstream.requests.length;
      for (let i = 0; i < 8; i++) {
        const answer = await clients[i % 2].chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 900 });
        expect(answer.choices[0].message.content).toBe('Hi.');
      }
      const asked = upstream.requests.slice(seen).map(({ body }) => body.max_tokens ?? body.max_completion_tokens);
      expect(asked).toEqual(Array.from({ length: 8 }, () => 900));
      await waitFor(() => nothingHeld(db, workspace.id));
      // 8 x 22.5 millicents.
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance: BALANCE - 180, reserved: 0, ledger: BALANCE - 180, holds: 0 });
    }, 120_000);

    it("shows the other replica's requests in flight while they run, and nothing once they end", async () => {
      const [a, b] = replicas.length >= 2 ? replicas : await Promise.all([startService(), startService()]);
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
      // Streams of 30 words, 200 ms apart: about 6 s in flight.
      const words = Array.from({ length: 30 }, (_, i) => `w${i}`).join(' ');
      upstream.setDefault({ kind: 'text', text: words, usage: { prompt_tokens: 10, completion_tokens: 20 }, chunkDelayMs: 200 });
      const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${a}/v1`, maxRetries: 0, timeout: 30_000 });
      const rest = await Promise.all([inFlight(client), inFlight(client)]);
      const onA = await wallet(a, workspace.apiKey);
      expect(onA.reservedMillicents).toBeGreaterThan(0);
      const startedAt = Date.now();
      // The figure on B is reported by A every 500 ms (README: lags by about a second). The bound
      // is half the streams' 6 s: a figure that came only once they end would never match.
      expect(await waitUntil(async () => (await wallet(b, workspace.apiKey)).reservedMillicents === onA.reservedMillicents, 3_000)).toBe(true);
      const lag = Date.now() - startedAt;
      expect((await walletInvariants(db, workspace.id)).reserved).toBeGreaterThan(onA.reservedMillicents);
      expect(await Promise.all(rest.map((read) => read()))).toEqual([words, words]);
      const endedAt = Date.now();
      expect((await wallet(a, workspace.apiKey)).reservedMillicents).toBe(0);
      // The next report (or the lease given back once idle) clears it: polled, no claim about speed.
      await waitFor(async () => (await wallet(b, workspace.apiKey)).reservedMillicents === 0);
      console.log(`Reserved on the other replica: in-flight holds seen after ${lag} ms, 0 after ${Date.now() - endedAt} ms`);
    }, 120_000);
  });

  describe('a lease whose extension failed while PostgreSQL was frozen', () => {
    let dataDir: string;
    let server: ServerProcess;
    let baseUrl: string;
    let setup: TestApp;
    let db: DataSource;
    let postmaster: number;
    let frozen: number[] = [];
    const thaw = () => {
      for (const pid of [...frozen].reverse()) killQuietly(pid, 'SIGCONT');
      frozen = [];
    };

    beforeAll(async () => {
      dataDir = await mkdtemp(path.join(tmpdir(), 'acs-reserved-freeze-'));
      await chmod(dataDir, 0o755);
      const port = await freePort();
      baseUrl = `http://127.0.0.1:${port}`;
      server = ServerProcess.start({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATA_DIR: dataDir,
        SESSION_SECRET: 'wallet-reserved-test-secret-0123456789',
        OPENAI_API_KEY: 'sk-upstream',
        OPENAI_BASE_URL: upstream.url,
        LOG_LEVEL: 'warn',
      });
      await server.waitForHealth(baseUrl, 120_000);
      const running = await readPostmasterPid(path.join(dataDir, 'postgres'));
      if (!running) throw new Error('No embedded PostgreSQL under DATA_DIR');
      postmaster = running.pid;
      const password = (await readFile(path.join(dataDir, 'embedded-postgres.password'), 'utf8')).trim();
      setup = await startTestApp({ databaseUrl: `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${running.port}/assistant_chat` });
      db = setup.app.get<DataSource>(getDataSourceToken());
    }, 180_000);
    afterAll(async () => {
      thaw();
      if (server) await server.stop('SIGTERM', 60_000).catch(() => server.kill());
      await setup?.close().catch(() => undefined);
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
    });

    it('is confirmed again within seconds of the database answering again, not at the next heartbeat, and given back once idle', async () => {
      const INITIAL = 10_000_000;
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: INITIAL });
      const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 2, timeout: 60_000 });
      // A stream of about 30 s, in flight across the freeze: its lease cannot go back idle.
      const words = Array.from({ length: 60 }, (_, i) => `w${i}`).join(' ');
      upstream.setDefault({ kind: 'text', text: words, usage: { prompt_tokens: 10, completion_tokens: 60 }, chunkDelayMs: 500 });
      const rest = await inFlight(client);
      // The process's first lease: its heartbeat runs 15 s, 30 s, ... after it (a 60 s lease life / 4).
      const takenAt = Date.now();
      const [lease] = await leaseRows(db, workspace.id);
      expect(lease).toBeDefined();

      killQuietly(postmaster, 'SIGSTOP');
      frozen = [postmaster];
      for (const pid of (await clusterPids(postmaster)).slice(1)) {
        killQuietly(pid, 'SIGSTOP');
        frozen.push(pid);
      }
      try {
        // Past the heartbeat at 15 s and its statement's bound (DATABASE_ANSWER_TIMEOUT_MS, 6 s): it failed.
        await sleep(takenAt + 23_000 - Date.now());
      } finally {
        thaw();
      }
      const thawedAt = Date.now();
      expect(server.output()).toMatch(/Could not extend the leases/);
      // Pushed out for a whole life again (or given back) within seconds, not at the next heartbeat
      // (30 s after the lease was taken, about 7 s after the thaw): the bound is half the time
      // to that heartbeat, which would confirm it anyway.
      const confirmed = await waitUntil(async () => {
        const rows = (await db.query(`SELECT extract(epoch FROM expires_at - now()) AS left FROM wallet_holds WHERE id = $1`, [lease.id])) as {
          left: string;
        }[];
        return rows.length === 0 || Number(rows[0].left) > 50;
      }, (takenAt + 30_000 - thawedAt) / 2);
      const confirmedAfter = Date.now() - thawedAt;
      expect(confirmed).toBe(true);

      upstream.script({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 5 } });
      const next = await client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 50 });
      expect(next.choices[0].message.content).toBe('Hi.');
      expect(await rest()).toBe(words);
      const endedAt = Date.now();
      // Given back once idle (WALLET_LEASE_IDLE_MS, 500 ms); polled, no claim about speed.
      await waitFor(() => nothingHeld(db, workspace.id));
      console.log(
        `Lease across a ${thawedAt - takenAt} ms freeze: confirmed again ${confirmedAfter} ms after the thaw; ` +
          `nothing held ${Date.now() - endedAt} ms after its last request ended`,
      );
      const [{ charged, records }] = await db.query(
        `SELECT coalesce(sum(charged_millicents), 0)::int AS charged, count(*) FILTER (WHERE status = 'success')::int AS records
           FROM usage_records WHERE workspace_id = $1`,
        [workspace.id],
      );
      expect(records).toBe(2);
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance: INITIAL - charged, reserved: 0, ledger: INITIAL - charged, holds: 0 });
    }, 120_000);
  });
});

/** The postmaster and its children (backends, background workers). */
async function clusterPids(postmaster: number): Promise<number[]> {
  const pids = [postmaster];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const ppid = Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]);
    if (ppid === postmaster) pids.push(Number(entry));
  }
  return pids;
}
