import OpenAI from 'openai';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { freePort } from '../src/database/embedded-postgres';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { ServerProcess, waitUntil } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';

/**
 * Budget leases (WalletLeases) and group-committed settlements, seen from outside: one
 * process reusing its lease and giving it back when idle; two service processes on one
 * database that never overdraw a small wallet between them; and a process killed with
 * SIGKILL, which loses no charge it told a client about, and whose leases and holds come
 * back through the sweeper.
 */
describe('wallet leases and group commit', () => {
  let upstream: FakeOpenAi;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
  });
  afterAll(async () => {
    await upstream?.close();
  });

  const ask = (client: OpenAI, content = 'Hello') =>
    client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content }], max_tokens: 100 }).withResponse();

  const leaseRows = async (db: DataSource, workspaceId: string) =>
    (await db.query(`SELECT id, amount_millicents::bigint AS amount FROM wallet_holds WHERE workspace_id = $1 AND kind = 'lease'`, [workspaceId])) as {
      id: string;
      amount: string;
    }[];

  describe('in one process', () => {
    let t: TestApp;
    let db: DataSource;
    beforeAll(async () => {
      t = await startTestApp({
        config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } }, walletLeaseIdleMs: 1_000 },
      });
      db = t.app.get<DataSource>(getDataSourceToken());
    });
    afterAll(async () => {
      await t?.close();
    });

    it('admits the next requests from the same lease, and gives it back once idle for WALLET_LEASE_IDLE_MS', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 5 } });
      await ask(workspace.client);
      // The answer's settlement commits a moment after it (journal): it takes the charge from the lease.
      await t.settled(workspace.id);
      const [lease] = await leaseRows(db, workspace.id);
      expect(lease).toBeDefined();
      // Right after the answer the lease is still there, but nothing is shown as reserved: no request holds any of it.
      const wallet = await t.app.get(WalletService).balance(workspace.id);
      expect(wallet.reservedMillicents).toBe(0);
      expect((await walletInvariants(db, workspace.id)).reserved).toBe(Number(lease.amount));
      await ask(workspace.client);
      await ask(workspace.client);
      expect((await leaseRows(db, workspace.id)).map((row) => row.id)).toEqual([lease.id]);

      expect(await waitUntil(async () => (await leaseRows(db, workspace.id)).length === 0, 3_000)).toBe(true);
      await t.settled(workspace.id);
      const after = await walletInvariants(db, workspace.id);
      // 3 x (10 x 250,000 + 5 x 1,000,000) micro-millicents = 22.5 millicents.
      expect(after).toEqual({ balance: 1_000_000 - 22, reserved: 0, ledger: 1_000_000 - 22, holds: 0 });
    });

    it('charges each of many concurrent requests admitted from one lease exactly', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 5 }, delayMs: 20 });
      const answers = await Promise.all(Array.from({ length: 40 }, () => ask(workspace.client)));
      expect(answers.every(({ response }) => response.status === 200)).toBe(true);
      // Journaled settlements (the default) commit a moment after their answers.
      await t.settled(workspace.id);
      const [{ records, charged }] = await db.query(
        `SELECT count(*)::int AS records, coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`,
        [workspace.id],
      );
      expect(records).toBe(40);
      expect(await waitUntil(() => nothingHeld(db, workspace.id), 3_000)).toBe(true);
      const after = await walletInvariants(db, workspace.id);
      expect(after).toEqual({ balance: 10_000_000 - charged, reserved: 0, ledger: 10_000_000 - charged, holds: 0 });
      // 40 x 7.5 millicents, whole millicents charged and the fraction carried: 300 in all.
      expect(charged).toBe(300);
    });

    it('gives back the lease of a process that died once it expires (the sweeper)', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const wallet = t.app.get(WalletService);
      const hold = await wallet.reserve(workspace.id, 'req_lease_swept', 500, 60_000);
      expect(hold?.lease).toBeDefined();
      const [lease] = await leaseRows(db, workspace.id);
      // Its process stopped pushing the expiry out.
      await db.query(`UPDATE wallet_holds SET expires_at = now() - interval '1 second' WHERE id = $1`, [lease.id]);
      expect(await wallet.releaseExpiredHolds()).toBeGreaterThanOrEqual(1);
      expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 100_000, reserved: 0, ledger: 100_000, holds: 0 });
    });
  });

  describe('across service processes on one database', () => {
    let setup: TestApp;
    let db: DataSource;
    let databaseUrl: string;
    let dataDir: string;
    const servers: ServerProcess[] = [];

    beforeAll(async () => {
      databaseUrl = await createTestDatabase();
      dataDir = await mkdtemp(path.join(tmpdir(), 'acs-leases-'));
      // For workspaces and the invariants only: the traffic goes to the spawned processes.
      setup = await startTestApp({ databaseUrl });
      db = setup.app.get<DataSource>(getDataSourceToken());
    });
    afterAll(async () => {
      for (const server of servers) server.kill();
      await setup?.close();
      if (dataDir) await rm(dataDir, { recursive: true, force: true });
    });

    async function startService(env: Record<string, string> = {}): Promise<{ server: ServerProcess; baseUrl: string }> {
      const port = await freePort();
      const server = ServerProcess.start({
        PORT: String(port),
        HOST: '127.0.0.1',
        DATABASE_URL: databaseUrl,
        DATA_DIR: dataDir,
        SESSION_SECRET: 'wallet-leases-test-secret-0123456789',
        OPENAI_API_KEY: 'sk-upstream',
        OPENAI_BASE_URL: upstream.url,
        LOG_LEVEL: 'error',
        ...env,
      });
      servers.push(server);
      const baseUrl = `http://127.0.0.1:${port}`;
      await server.waitForHealth(baseUrl, 30_000);
      return { server, baseUrl };
    }

    it('never overdraws a small wallet shared by two processes under 200 concurrent requests', async () => {
      const [a, b] = await Promise.all([startService(), startService()]);
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 3_000 });
      // Each answer costs 10 x 250,000 + 20 x 1,000,000 micro-millicents = 22.5 millicents; 200 of them would cost 4,500.
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 10 });
      // A connection the loaded machine fails to open is tried again (402s never are): what is
      // checked is the money, whatever the number of attempts.
      const clients = [a, b].map(({ baseUrl }) => new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 2, timeout: 30_000 }));
      const outcomes = await Promise.all(
        Array.from({ length: 200 }, (_, i) =>
          ask(clients[i % 2]).then(
            ({ response }) => response.status,
            (error: InstanceType<typeof OpenAI.APIError>) => error.status ?? `${error.name}: ${error.message}`,
          ),
        ),
      );
      const unexpected = outcomes.filter((status) => status !== 200 && status !== 402);
      if (unexpected.length > 0) throw new Error(`${unexpected.length} unexpected outcomes: ${unexpected[0]}\n${a.server.output()}\n${b.server.output()}`);
      const served = outcomes.filter((status) => status === 200).length;
      expect(served).toBeGreaterThan(0);
      expect(outcomes.filter((status) => status === 402).length).toBeGreaterThan(0);

      // Each process gives its lease back once idle (WALLET_LEASE_IDLE_MS, 500 ms by default).
      expect(await waitUntil(() => nothingHeld(db, workspace.id), 5_000)).toBe(true);
      const after = await walletInvariants(db, workspace.id);
      expect(after.holds).toBe(0);
      expect(after.balance).toBe(after.ledger);
      expect(after.balance).toBeGreaterThanOrEqual(0);
      const [{ records, charged }] = await db.query(
        `SELECT count(*)::int AS records, coalesce(sum(charged_millicents), 0)::int AS charged
           FROM usage_records WHERE workspace_id = $1 AND status = 'success'`,
        [workspace.id],
      );
      // A request the server answered but whose answer was lost with its connection is charged and tried again.
      expect(records).toBeGreaterThanOrEqual(served);
      expect(after.balance).toBe(3_000 - charged);
      await Promise.all([a.server.stop('SIGTERM', 15_000), b.server.stop('SIGTERM', 15_000)]);
    }, 90_000);

    it('gives its leases back when stopped cleanly (SIGTERM), however long they would have stayed idle', async () => {
      const { server, baseUrl } = await startService({ WALLET_LEASE_IDLE_MS: '60000' });
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 0 });
      await Promise.all(Array.from({ length: 10 }, () => ask(client)));
      expect((await leaseRows(db, workspace.id)).length).toBe(1);
      expect((await server.stop('SIGTERM', 15_000)).code).toBe(0);
      const after = await walletInvariants(db, workspace.id);
      expect(after).toMatchObject({ reserved: 0, holds: 0 });
      expect(after.balance).toBe(after.ledger);
    }, 60_000);

    it('loses no charge it told a client about when killed with SIGKILL; its leases and holds come back through the sweeper', async () => {
      // Leases and holds of the killed process expire 10 s after their last heartbeat.
      const { server, baseUrl } = await startService({ HOLD_TTL_MS: '10000' });
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 }, delayMs: 40 });
      const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 0 });
      const told: { requestId: string; cost: number }[] = [];
      const requests = Array.from({ length: 150 }, (_, i) =>
        ask(client, `question ${i}`).then(
          ({ data, response }) => {
            told.push({ requestId: response.headers.get('x-request-id')!, cost: (data as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents });
          },
          () => undefined,
        ),
      );
      expect(await waitUntil(() => told.length >= 30, 20_000)).toBe(true);
      server.kill();
      await server.exited;
      await Promise.all(requests);
      expect(told.length).toBeLessThan(150);
      // What it answered for and had not committed is in its journal: the next process on its
      // DATA_DIR writes it before it serves.
      const next = await startService({ HOLD_TTL_MS: '10000' });
      try {
        // Every answer a client received was charged, with its usage record.
        const rows = (await db.query(
          `SELECT request_id, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1 AND status = 'success'`,
          [workspace.id],
        )) as { request_id: string; cost: number }[];
        const recorded = new Map(rows.map((row) => [row.request_id, row.cost]));
        for (const { requestId, cost } of told) expect(recorded.get(requestId)).toBe(cost);
        const [{ charged }] = await db.query(`SELECT coalesce(sum(charged_millicents), 0)::int AS charged FROM usage_records WHERE workspace_id = $1`, [
          workspace.id,
        ]);

        // What the dead process held comes back once it expires.
        const wallet = setup.app.get(WalletService);
        const released = await waitUntil(async () => {
          await wallet.releaseExpiredHolds();
          return nothingHeld(db, workspace.id);
        }, 20_000);
        expect(released).toBe(true);
        expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 10_000_000 - charged, reserved: 0, ledger: 10_000_000 - charged, holds: 0 });
      } finally {
        await next.server.stop('SIGTERM', 15_000);
      }
    }, 90_000);

    it('answers before the commit, and the next process writes what a killed one answered for and never committed (the journal)', async () => {
      // The wallet's row stays locked below until the kill, and each settlement waits on it holding
      // its lease's row, where the lease's heartbeat waits too. With the defaults, a request
      // admitted 2.5 to 5 s into that wait (a busy machine) found its lease unconfirmed for half
      // its life, or the writer's statement timed out, and waited on the wallet's row for a 503
      // (failed once in the full suite). Here they outlast the test: nothing in it times out.
      const { server, baseUrl } = await startService({ HOLD_TTL_MS: '60000', DATABASE_STATEMENT_TIMEOUT_MS: '120000', DATABASE_ANSWER_TIMEOUT_MS: '121000' });
      const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      const client = new OpenAI({ apiKey: workspace.apiKey, baseURL: `${baseUrl}/v1`, maxRetries: 0 });
      await ask(client); // Takes the lease: the next requests are admitted from it, in memory.
      expect(await waitUntil(async () => (await usageRequestIds(workspace.id)).length === 1, 5_000)).toBe(true);

      // Every settlement now waits for the wallet's row, which this transaction holds.
      const blocker = db.createQueryRunner();
      await blocker.connect();
      await blocker.startTransaction();
      try {
        await blocker.query(`SELECT 1 FROM wallets WHERE workspace_id = $1 FOR UPDATE`, [workspace.id]);
        const told = await Promise.all(
          Array.from({ length: 10 }, (_, i) =>
            ask(client, `question ${i}`).then(({ data, response }) => ({
              requestId: response.headers.get('x-request-id')!,
              cost: (data as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents,
            })),
          ),
        );
        server.kill();
        await server.exited;
        await blocker.commitTransaction();
        // All ten were answered, and only the settlement that was already waiting in PostgreSQL
        // when the process died can commit (its statement was sent): the others were never sent.
        expect((await usageRequestIds(workspace.id)).length).toBeLessThanOrEqual(2);

        const next = await startService({ HOLD_TTL_MS: '10000' });
        const recorded = new Map(
          ((await db.query(`SELECT request_id, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1`, [workspace.id])) as {
            request_id: string;
            cost: number;
          }[]).map((row) => [row.request_id, row.cost]),
        );
        for (const { requestId, cost } of told) expect(recorded.get(requestId)).toBe(cost);
        expect(recorded.size).toBe(11);

        // The killed process's lease comes back at its expiry (brought forward: the SIGKILL test
        // above waits for a real one); the money adds up.
        await db.query(`UPDATE wallet_holds SET expires_at = now() WHERE workspace_id = $1`, [workspace.id]);
        const wallet = setup.app.get(WalletService);
        expect(
          await waitUntil(async () => {
            await wallet.releaseExpiredHolds();
            return nothingHeld(db, workspace.id);
          }, 20_000),
        ).toBe(true);
        const [{ charged }] = await db.query(`SELECT sum(charged_millicents)::int AS charged FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
        expect(charged).toBeGreaterThan(0);
        expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 10_000_000 - charged, reserved: 0, ledger: 10_000_000 - charged, holds: 0 });
        // Its journal is gone once written.
        expect(await journalFiles()).toEqual([]);
        await next.server.stop('SIGTERM', 15_000);
      } finally {
        if (blocker.isTransactionActive) await blocker.rollbackTransaction();
        await blocker.release();
      }
    }, 90_000);

    const usageRequestIds = async (workspaceId: string) =>
      ((await db.query(`SELECT request_id FROM usage_records WHERE workspace_id = $1`, [workspaceId])) as { request_id: string }[]).map((row) => row.request_id);

    /** The journal files under DATA_DIR (one directory per database). */
    const journalFiles = async () => {
      const root = path.join(dataDir, 'settlement-journal');
      const databases = await readdir(root).catch(() => [] as string[]);
      return (await Promise.all(databases.map((database) => readdir(path.join(root, database))))).flat();
    };
  });
});
