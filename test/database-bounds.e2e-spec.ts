import { APIConnectionError, APIError } from 'openai';
import type { DataSource, QueryRunner } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { waitUntil } from './support/processes';
import { openAiClient, startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';

/**
 * The statement bounds of the service's pool (DATABASE_STATEMENT_TIMEOUT_MS, here 1 s), met
 * through a wallet row locked by another transaction: the request's lease statement waits
 * for the lock no longer than the bound, and the request is refused with 503
 * `database_unavailable` and Retry-After; its usage record says `database_unavailable`, also
 * when its client had left before (never `internal_error`). PostgreSQL frozen altogether is
 * test/database-freeze.
 */
describe('statement bounds', () => {
  const STATEMENT_TIMEOUT_MS = 1_000;
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        database: { statementTimeoutMs: STATEMENT_TIMEOUT_MS, answerTimeoutMs: 3_000, connectTimeoutMs: 3_000 },
      },
    });
    db = t.app.get<DataSource>(getDataSourceToken());
  });
  afterAll(async () => {
    // A connection of a client that left (its request refused afterwards) can stay counted by
    // the HTTP server after the first test's requests, so that Nest's close would wait for it
    // forever; the service's own stop (ServerDrain) closes what is left the same way.
    t?.app.getHttpServer().closeAllConnections();
    await t?.close();
    await upstream?.close();
  });

  /** Locks the workspace's wallet row in a transaction of its own: no lease or hold can be taken until it ends. */
  async function lockWallet(workspaceId: string): Promise<QueryRunner> {
    const blocker = db.createQueryRunner();
    await blocker.connect();
    await blocker.startTransaction();
    await blocker.query(`SELECT 1 FROM wallets WHERE workspace_id = $1 FOR UPDATE`, [workspaceId]);
    return blocker;
  }

  async function unlock(blocker: QueryRunner): Promise<void> {
    if (blocker.isTransactionActive) await blocker.rollbackTransaction();
    await blocker.release();
  }

  const ask = (workspace: TestWorkspace, options: { timeout?: number } = {}) =>
    openAiClient(t.baseUrl, workspace.apiKey)
      .chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 50 }, options)
      .withResponse();

  async function recordsOf(workspaceId: string) {
    return (await db.query(`SELECT status, error_code, charged_millicents::int AS charged FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [
      workspaceId,
    ])) as { status: string; error_code: string | null; charged: number }[];
  }

  it('refuses a request whose wallet row stays locked with 503 database_unavailable and Retry-After within the bound, and records it so', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const blocker = await lockWallet(workspace.id);
    const startedAt = Date.now();
    try {
      const error = await ask(workspace).then(
        () => null,
        (failure: unknown) => failure,
      );
      const took = Date.now() - startedAt;
      expect(error).toBeInstanceOf(APIError);
      expect({ status: (error as APIError).status, code: (error as APIError).code, retryAfter: (error as APIError).headers?.get('retry-after') }).toEqual({
        status: 503,
        code: 'database_unavailable',
        retryAfter: '5',
      });
      // The lock timeout, not the lock's holder, decides: a generous margin for a loaded machine.
      expect(took).toBeGreaterThanOrEqual(STATEMENT_TIMEOUT_MS - 50);
      expect(took).toBeLessThan(STATEMENT_TIMEOUT_MS + 3_000);
    } finally {
      await unlock(blocker);
    }
    expect(await waitUntil(async () => (await recordsOf(workspace.id)).length === 1, 5_000)).toBe(true);
    expect(await recordsOf(workspace.id)).toEqual([{ status: 'error', error_code: 'database_unavailable', charged: 0 }]);
    // Served again once the lock is gone; nothing held, nothing charged but the answer.
    const { response } = await ask(workspace);
    expect(response.status).toBe(200);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 5_000)).toBe(true);
    const invariants = await walletInvariants(db, workspace.id);
    expect(invariants).toEqual({ balance: invariants.ledger, reserved: 0, ledger: invariants.ledger, holds: 0 });
  });

  it.each([1, 2, 3])('records a refusal whose client had left before the database failed it as database_unavailable, not internal_error (run %i)', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    const blocker = await lockWallet(workspace.id);
    try {
      // The client gives up long before the lock timeout refuses its request.
      const outcome = await ask(workspace, { timeout: 200 }).then(
        () => 'answered',
        (failure: unknown) => failure,
      );
      expect(outcome).toBeInstanceOf(APIConnectionError);
      expect(await waitUntil(async () => (await recordsOf(workspace.id)).length === 1, STATEMENT_TIMEOUT_MS + 5_000)).toBe(true);
    } finally {
      await unlock(blocker);
    }
    expect(await recordsOf(workspace.id)).toEqual([{ status: 'error', error_code: 'database_unavailable', charged: 0 }]);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 5_000)).toBe(true);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 1_000_000, reserved: 0, ledger: 1_000_000, holds: 0 });
  });
});
