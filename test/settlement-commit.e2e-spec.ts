import type { DataSource } from 'typeorm';
import { getDataSourceToken } from '@nestjs/typeorm';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/** gpt-4o prices, millicents per million tokens: input, output. */
const GPT_4O = { input: 250_000, output: 1_000_000 };

/**
 * SETTLEMENT_DURABILITY=commit, the setting the other suites do not run (they run the
 * default, journal): a chat request is answered once its settlement has committed, so the
 * database has the exact charge, the ledger row and the usage record the moment the client
 * has its answer, without waiting for anything. With WALLET_LEASE_IDLE_MS=0 the lease goes
 * back as soon as nothing is in flight, so nothing is held either.
 */
describe('settlements in commit mode', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        settlementDurability: 'commit',
        walletLeaseIdleMs: 0,
      },
    });
    db = t.app.get<DataSource>(getDataSourceToken());
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
  });

  /** Read straight after the answer: no `t.settled`, which is what commit mode promises. */
  const ledger = (workspace: TestWorkspace) =>
    db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at', [workspace.id]);
  const records = (workspace: TestWorkspace) =>
    db.query('SELECT status, stream, charged_millicents::int AS charged, total_cost_millicents::text AS cost FROM usage_records WHERE workspace_id = $1', [
      workspace.id,
    ]);

  it('has a plain answer charged, in the ledger and recorded when the answer arrives', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
    upstream.script({ kind: 'text', text: 'Paris.', usage: { prompt_tokens: 1_000, completion_tokens: 3 } });
    await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Capital of France?' }] });

    // 1,000 x 250000 + 3 x 1000000 micro-millicents: 253 millicents exactly.
    const exact = (1_000 * GPT_4O.input + 3 * GPT_4O.output) / 1e6;
    expect(exact).toBe(253);
    expect(await ledger(workspace)).toEqual([
      { type: 'topup', amount: 100_000 },
      { type: 'usage', amount: -253 },
    ]);
    expect(await records(workspace)).toEqual([{ status: 'success', stream: false, charged: 253, cost: '253.000000' }]);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 100_000 - 253, reserved: 0, ledger: 100_000 - 253, holds: 0 });
  });

  it('has a streamed answer charged and recorded by its last chunk, and charges the fraction once whole', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
    // 10 x 250000 + 5 x 1000000 micro-millicents: 7.5 millicents each; two make 15.
    upstream.setDefault({ kind: 'text', text: 'one two three four five', usage: { prompt_tokens: 10, completion_tokens: 5 } });
    for (let i = 0; i < 2; i++) {
      const stream = await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Count' }], stream: true });
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      expect(text).toBe('one two three four five');
    }

    const charged = (await records(workspace)).map((record: { charged: number }) => record.charged);
    expect(charged.sort()).toEqual([7, 8]);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: 10_000 - 15, reserved: 0, ledger: 10_000 - 15, holds: 0 });
  });
});
