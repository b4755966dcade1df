import { getRepositoryToken } from '@nestjs/typeorm';
import OpenAI from 'openai';
import { createHash, randomBytes } from 'node:crypto';
import { DataSource, Repository } from 'typeorm';
import { ApiError } from '../src/common/errors/api-error';
import { ApiKey } from '../src/workspaces/entities/api-key.entity';
import { CreditCommand, MAX_BALANCE_MILLICENTS, WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * Smaller defects an operator runs into: a wallet credited past what JSON numbers can carry,
 * key guessing that keeps the database busy after its address is limited, and an
 * Idempotency-Key stuck on 409 after its request died.
 */
describe('operations', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let wallet: WalletService;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        anonymousRateLimitRpm: 3,
      },
    });
    db = t.app.get(DataSource);
    wallet = t.app.get(WalletService);
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  /** balance = the ledger's sum, and nothing left reserved. */
  async function expectWalletConsistent(workspace: TestWorkspace): Promise<void> {
    await t.settled(workspace.id);
    const [{ sum }] = await db.query(
      'SELECT coalesce(sum(amount_millicents), 0)::text AS sum FROM wallet_transactions WHERE workspace_id = $1',
      [workspace.id],
    );
    const balance = await wallet.balance(workspace.id);
    expect(String(balance.balanceMillicents)).toBe(sum);
    expect(balance.reservedMillicents).toBe(0);
  }

  describe('wallet balance bound (2^53 - 1 millicents)', () => {
    const credit = (workspace: TestWorkspace, type: CreditCommand['type'], amountMillicents: number) =>
      wallet.credit({ workspaceId: workspace.id, type, amountMillicents, idempotencyKey: `test:${randomBytes(6).toString('hex')}` });

    it('refuses every kind of credit that would take the balance past it, with 400 on amount', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: MAX_BALANCE_MILLICENTS - 10 });
      for (const type of ['topup', 'auto_topup', 'refund', 'adjustment'] as const) {
        const refused = await credit(workspace, type, 11).catch((error: unknown) => error);
        expect(refused).toBeInstanceOf(ApiError);
        expect(refused).toMatchObject({ status: 400, param: 'amount', code: 'balance_limit_exceeded' });
        expect((refused as ApiError).message).toBe(
          `The credit would take the balance (${MAX_BALANCE_MILLICENTS - 10}) above ${MAX_BALANCE_MILLICENTS} millicents, the most a wallet can hold.`,
        );
      }

      // Up to the bound itself is fine, and the API still shows it exactly.
      await credit(workspace, 'topup', 10);
      const shown = (await workspace.client.get('/wallet')) as { balanceMillicents: number };
      expect(shown.balanceMillicents).toBe(MAX_BALANCE_MILLICENTS);
      const ledger = (await workspace.client.get('/wallet/transactions')) as { data: Array<{ balanceAfterMillicents: number }> };
      expect(ledger.data.map((row) => row.balanceAfterMillicents)).toEqual([MAX_BALANCE_MILLICENTS, MAX_BALANCE_MILLICENTS - 10]);
      await expectWalletConsistent(workspace);
    });

    it('checks the bound in the statement that credits: of two concurrent credits that only fit alone, one lands', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: MAX_BALANCE_MILLICENTS - 1_000 });
      const results = await Promise.allSettled([credit(workspace, 'topup', 600), credit(workspace, 'topup', 600)]);
      expect(results.filter((result) => result.status === 'fulfilled')).toHaveLength(1);
      const refused = results.find((result) => result.status === 'rejected') as PromiseRejectedResult;
      expect(refused.reason).toMatchObject({ status: 400, param: 'amount', code: 'balance_limit_exceeded' });
      expect((await wallet.balance(workspace.id)).balanceMillicents).toBe(MAX_BALANCE_MILLICENTS - 400);
      await expectWalletConsistent(workspace);
    });
  });

  describe('wrong keys from a limited address', () => {
    /** Every well-formed key is looked up in api_keys (malformed ones never reach the database). */
    const wrongKey = () => `sk-${randomBytes(32).toString('base64url')}`;
    const from = (address: string, apiKey: string) =>
      fetch(`${t.baseUrl}/v1/models`, { headers: { Authorization: `Bearer ${apiKey}`, 'X-Forwarded-For': address } });

    it('are refused with 429 without a database lookup once the address is at its limit', async () => {
      const lookups = jest.spyOn(t.app.get<Repository<ApiKey>>(getRepositoryToken(ApiKey)), 'findOne');
      try {
        const statuses: number[] = [];
        for (let i = 0; i < 3; i++) statuses.push((await from('203.0.113.7', wrongKey())).status);
        expect(statuses).toEqual([401, 401, 401]);
        expect(lookups).toHaveBeenCalledTimes(3);

        for (let i = 0; i < 20; i++) {
          const response = await from('203.0.113.7', wrongKey());
          expect(response.status).toBe(429);
          expect(response.headers.get('retry-after')).toMatch(/^\d+$/);
          expect(response.headers.get('x-ratelimit-remaining')).toBe('0');
          expect(((await response.json()) as { error: { type: string } }).error.type).toBe('rate_limit_exceeded');
        }
        expect(lookups).toHaveBeenCalledTimes(3);

        // Another address is not affected.
        expect((await from('203.0.113.8', wrongKey())).status).toBe(401);
        expect(lookups).toHaveBeenCalledTimes(4);
      } finally {
        lookups.mockRestore();
      }
    });

    it('never count a valid key against its address, and still let a known key in from a limited address', async () => {
      const workspace = await t.createWorkspace({ tier: 'team' });
      for (let i = 0; i < 5; i++) expect((await from('203.0.113.20', workspace.apiKey)).status).toBe(200);
      // Five valid requests used none of the address's three guesses.
      const statuses: number[] = [];
      for (let i = 0; i < 4; i++) statuses.push((await from('203.0.113.20', wrongKey())).status);
      expect(statuses).toEqual([401, 401, 401, 429]);
      expect((await from('203.0.113.20', workspace.apiKey)).status).toBe(200);
    });
  });

  describe('Idempotency-Key after its request died', () => {
    const body = (content: string) => ({ model: 'gpt-4o', messages: [{ role: 'user' as const, content }] });
    const ask = (workspace: TestWorkspace, key: string, content: string) =>
      workspace.client.chat.completions.create(body(content), { headers: { 'Idempotency-Key': key } }).withResponse();
    const errorOf = (promise: Promise<unknown>) =>
      promise.then(
        () => null,
        (error: unknown) => error as InstanceType<typeof OpenAI.APIError>,
      );
    const usageCharges = async (workspace: TestWorkspace) => {
      await t.settled(workspace.id);
      return (await db.query(`SELECT count(*)::int AS n FROM wallet_transactions WHERE workspace_id = $1 AND type = 'usage'`, [workspace.id]))[0].n;
    };

    /** What a process killed mid-request leaves: a claim without an answer, last kept alive `ageMs` ago. */
    async function leaveClaim(workspace: TestWorkspace, key: string, content: string, requestId: string, ageMs: number): Promise<void> {
      const hash = createHash('sha256').update(JSON.stringify(body(content))).digest('hex');
      await db.query(
        `INSERT INTO idempotent_requests (workspace_id, idempotency_key, request_hash, request_id, created_at, alive_at)
         VALUES ($1, $2, $3, $4, now() - make_interval(secs => $5::double precision / 1000), now() - make_interval(secs => $5::double precision / 1000))`,
        [workspace.id, key, hash, requestId, ageMs],
      );
    }

    it('runs a retry again once the dead request stopped keeping its claim alive and was never charged', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const requestId = `req_killed_${randomBytes(4).toString('hex')}`;
      await leaveClaim(workspace, 'killed-mid-request', 'are you there?', requestId, t.config.holdTtlMs + 60_000);
      // An old claim that its process kept alive a moment ago: the request is still running.
      await db.query(`UPDATE idempotent_requests SET alive_at = now() WHERE workspace_id = $1 AND idempotency_key = 'killed-mid-request'`, [
        workspace.id,
      ]);
      expect(await errorOf(ask(workspace, 'killed-mid-request', 'are you there?'))).toMatchObject({
        status: 409,
        error: { code: 'idempotent_request_in_progress' },
      });

      // The process is gone: nobody keeps the claim alive any more.
      await db.query(
        `UPDATE idempotent_requests SET alive_at = now() - make_interval(secs => $2::double precision / 1000)
          WHERE workspace_id = $1 AND idempotency_key = 'killed-mid-request'`,
        [workspace.id, t.config.holdTtlMs + 1_000],
      );

      upstream.script({ kind: 'text', text: 'yes, this time', usage: { prompt_tokens: 100, completion_tokens: 10 } });
      const calls = upstream.requests.length;
      const retry = await ask(workspace, 'killed-mid-request', 'are you there?');
      expect(retry.data.choices[0].message.content).toBe('yes, this time');
      expect(retry.response.headers.get('idempotent-replayed')).toBeNull();
      expect(upstream.requests.length - calls).toBe(1);
      // Charged once, for the retry: 100 x 250000 + 10 x 1000000 micro-millicents.
      expect((await wallet.balance(workspace.id)).balanceMillicents).toBe(100_000 - 35);
      expect(await usageCharges(workspace)).toBe(1);
      await expectWalletConsistent(workspace);

      // And the answer is now what further retries get.
      const replay = await ask(workspace, 'killed-mid-request', 'are you there?');
      expect(replay.response.headers.get('idempotent-replayed')).toBe('true');
      expect(replay.data.choices[0].message.content).toBe('yes, this time');
    });

    it('keeps a claim kept alive within the hold TTL: its request may still be running', async () => {
      const workspace = await t.createWorkspace();
      await leaveClaim(workspace, 'just-claimed', 'hello', `req_young_${randomBytes(4).toString('hex')}`, 1_000);
      expect(await errorOf(ask(workspace, 'just-claimed', 'hello'))).toMatchObject({
        status: 409,
        error: { code: 'idempotent_request_in_progress' },
      });
    });

    it('never runs again a request that was settled before its process died', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const requestId = `req_settled_${randomBytes(4).toString('hex')}`;
      await leaveClaim(workspace, 'settled-then-killed', 'charge me once', requestId, t.config.holdTtlMs + 60_000);
      // The request itself, settled (usage record and charge) as the process died.
      upstream.script({ kind: 'text', text: 'done', usage: { prompt_tokens: 100, completion_tokens: 10 } });
      await workspace.client.chat.completions.create(body('charge me once'), { headers: { 'X-Request-Id': requestId } });
      const balance = (await wallet.balance(workspace.id)).balanceMillicents;

      const calls = upstream.requests.length;
      expect(await errorOf(ask(workspace, 'settled-then-killed', 'charge me once'))).toMatchObject({ status: 409 });
      expect(upstream.requests.length).toBe(calls);
      expect((await wallet.balance(workspace.id)).balanceMillicents).toBe(balance);
      expect(await usageCharges(workspace)).toBe(1);
    });

    it('tells a retry at once that an answer it was charged for could not be stored, and never charges it again', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      // The database refuses to store this one answer (as it refuses, say, a NUL in jsonb).
      await db.query(`
        CREATE OR REPLACE FUNCTION refuse_test_answer() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN RAISE EXCEPTION 'this answer cannot be stored'; END $$`);
      await db.query(`
        CREATE TRIGGER refuse_test_answer BEFORE UPDATE ON idempotent_requests FOR EACH ROW
        WHEN (NEW.idempotency_key = 'answer-lost' AND NEW.response IS NOT NULL) EXECUTE FUNCTION refuse_test_answer()`);
      try {
        upstream.script({ kind: 'text', text: 'delivered, not stored', usage: { prompt_tokens: 100, completion_tokens: 10 } });
        const first = await ask(workspace, 'answer-lost', 'keep this');
        expect(first.data.choices[0].message.content).toBe('delivered, not stored');
        const balance = (await wallet.balance(workspace.id)).balanceMillicents;
        expect(balance).toBe(100_000 - 35);

        const calls = upstream.requests.length;
        const refused = await errorOf(ask(workspace, 'answer-lost', 'keep this'));
        expect(refused).toMatchObject({ status: 409, error: { type: 'conflict', code: 'idempotent_response_unavailable', param: null } });
        expect(refused!.error).toMatchObject({ message: expect.stringContaining('Send a new Idempotency-Key') });

        // Not even once the claim is older than a hold lives.
        await db.query(
          `UPDATE idempotent_requests SET created_at = now() - interval '1 hour' WHERE workspace_id = $1 AND idempotency_key = 'answer-lost'`,
          [workspace.id],
        );
        expect(await errorOf(ask(workspace, 'answer-lost', 'keep this'))).toMatchObject({
          status: 409,
          error: { code: 'idempotent_response_unavailable' },
        });
        expect(upstream.requests.length).toBe(calls);
        expect((await wallet.balance(workspace.id)).balanceMillicents).toBe(balance);
        expect(await usageCharges(workspace)).toBe(1);
      } finally {
        await db.query('DROP TRIGGER refuse_test_answer ON idempotent_requests');
      }
    });
  });
});
