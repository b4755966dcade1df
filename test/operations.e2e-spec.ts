import { getRepositoryToken } from '@nestjs/typeorm';
import { randomBytes } from 'node:crypto';
import { DataSource, Repository } from 'typeorm';
import { ApiError } from '../src/common/errors/api-error';
import { ApiKey } from '../src/workspaces/entities/api-key.entity';
import { CreditCommand, MAX_BALANCE_MILLICENTS, WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * Smaller defects an operator runs into: a wallet credited past what JSON numbers can carry,
 * and key guessing that keeps the database busy after its address is limited.
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
        openai: { apiKey: 'sk-upstream', baseUrl: upstream.url },
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
});
