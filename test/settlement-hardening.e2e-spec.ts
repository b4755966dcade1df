import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { Billing } from '../src/billing/billing';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { waitUntil } from './support/processes';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/** gpt-4o prices, millicents per million tokens. */
const GPT_4O = { input: 250_000, output: 1_000_000, contextLength: 128_000 };

/**
 * Whatever a provider or a client does, a delivered answer is charged exactly once, the
 * wallet stays consistent, and no request holds money forever (issue "Hardening").
 */
describe('settlement under hostile providers, stalls and early disconnects', () => {
  let upstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream-secret', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        upstreamTimeoutMs: 10_000,
        upstreamIdleTimeoutMs: 400,
      },
    });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t.close();
    await upstream.close();
  });

  // Direct reads wait for the settlements of the answers given so far to commit.
  const ledger = async (workspace: TestWorkspace): Promise<Array<{ type: string; amount: number }>> => {
    await t.settled(workspace.id);
    return db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at', [workspace.id]);
  };
  const records = async (workspace: TestWorkspace) => {
    await t.settled(workspace.id);
    return db.query(
      `SELECT status, error_code, input_tokens::float8 AS input_tokens, output_tokens::float8 AS output_tokens,
              total_cost_millicents::float8 AS cost, charged_millicents::int AS charged
         FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
      [workspace.id],
    );
  };
  /** Waits for what a request settles in the background (after a disconnect, say). */
  async function eventually<T>(read: () => Promise<T>, done: (value: T) => boolean): Promise<T> {
    let value = await read();
    for (let i = 0; i < 100 && !done(value); i++) {
      await new Promise((resolve) => setTimeout(resolve, 50));
      value = await read();
    }
    return value;
  }
  async function expectConsistent(workspace: TestWorkspace) {
    await t.quiet(workspace.id);
    const wallet = await walletInvariants(db, workspace.id);
    expect(wallet.balance).toBe(wallet.ledger);
    expect(wallet.reserved).toBe(0);
    expect(wallet.holds).toBe(0);
    expect(wallet.balance).toBeGreaterThanOrEqual(0);
    return wallet;
  }
  async function newConversation(workspace: TestWorkspace): Promise<string> {
    const response = await fetch(`${t.baseUrl}/v1/conversations`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ title: 'Hardening' }),
    });
    expect(response.status).toBe(200);
    return ((await response.json()) as { id: string }).id;
  }
  const storedMessages = (conversationId: string): Promise<Array<{ role: string; content: string }>> =>
    db.query(`SELECT role, content FROM conversation_messages WHERE conversation_id = $1 ORDER BY position`, [conversationId]);

  describe('a settlement cannot fail on content', () => {
    it('charges and stores a streamed answer whose text PostgreSQL cannot store as it came (NUL, a lone surrogate)', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const conversationId = await newConversation(workspace);
      upstream.script({ kind: 'text', text: 'Bad\u0000 bytes \ud800 here.', usage: { prompt_tokens: 100, completion_tokens: 6 } });
      const stream = await workspace.client.chat.completions.create({
        model: 'gpt-4o',
        messages: [{ role: 'user', content: 'Say something odd' }],
        stream: true,
        conversation_id: conversationId,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let text = '';
      for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
      expect(text).toBe('Bad\u0000 bytes \ud800 here.');

      const cost = (100 * GPT_4O.input + 6 * GPT_4O.output) / 1e6;
      expect(await records(workspace)).toEqual([expect.objectContaining({ status: 'success', cost })]);
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: 100_000 },
        { type: 'usage', amount: -Math.floor(cost) },
      ]);
      const stored = await storedMessages(conversationId);
      expect(stored.map((m) => m.role)).toEqual(['user', 'assistant']);
      expect(stored[1].content).toBe('Bad\ufffd bytes \ufffd here.');
      await expectConsistent(workspace);
    });

    describe('when the database refuses what is written beside the charge', () => {
      afterEach(async () => {
        await db.query('DROP TRIGGER IF EXISTS refuse_writes ON conversation_messages');
        await db.query('DROP TRIGGER IF EXISTS refuse_writes ON usage_records');
        await db.query('DROP FUNCTION IF EXISTS refuse_writes()');
      });
      /** A trigger that fails every insert into `table`: as refused data (a check), unless told another SQLSTATE. */
      async function refuseWritesTo(table: string, errcode = 'check_violation') {
        await db.query(`CREATE OR REPLACE FUNCTION refuse_writes() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '${errcode}'; END $$`);
        await db.query(`CREATE TRIGGER refuse_writes BEFORE INSERT ON ${table} FOR EACH ROW EXECUTE FUNCTION refuse_writes()`);
      }

      it.each([false, true])('still charges the answer when its conversation turn cannot be stored (stream: %s)', async (streamed) => {
        const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
        const conversationId = await newConversation(workspace);
        await refuseWritesTo('conversation_messages');
        const incidents = t.app.get(Billing).incidents.conversation_turn_not_stored;
        upstream.script({ kind: 'text', text: 'An answer.', usage: { prompt_tokens: 40, completion_tokens: 3 } });
        const params = { model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], conversation_id: conversationId };
        let text = '';
        if (streamed) {
          const stream = await workspace.client.chat.completions.create({ ...params, stream: true } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
          for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
        } else {
          const completion = await workspace.client.chat.completions.create(params as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
          text = completion.choices[0].message.content ?? '';
        }
        expect(text).toBe('An answer.');
        const cost = (40 * GPT_4O.input + 3 * GPT_4O.output) / 1e6;
        expect(await records(workspace)).toEqual([expect.objectContaining({ status: 'success', cost })]);
        expect((await ledger(workspace))[1]).toEqual({ type: 'usage', amount: -Math.floor(cost) });
        expect(await storedMessages(conversationId)).toEqual([]);
        expect(t.app.get(Billing).incidents.conversation_turn_not_stored).toBe(incidents + 1);
        await expectConsistent(workspace);
      });

      it('still charges the answer when its usage record cannot be stored', async () => {
        const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
        await refuseWritesTo('usage_records');
        upstream.script({ kind: 'text', text: 'Fine.', usage: { prompt_tokens: 4_000, completion_tokens: 2 } });
        const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] });
        expect(completion.choices[0].message.content).toBe('Fine.');
        expect(await ledger(workspace)).toEqual([
          { type: 'topup', amount: 100_000 },
          { type: 'usage', amount: -Math.floor((4_000 * GPT_4O.input + 2 * GPT_4O.output) / 1e6) },
        ]);
        expect(t.app.get(Billing).incidents.usage_record_not_stored).toBeGreaterThan(0);
        await expectConsistent(workspace);
      });

      it('never drops the usage record for a passing failure (a deadlock): the charge fails with it, and nothing is charged', async () => {
        // Commit mode: only an answer that waits for its commit can fail with it (a journaled one is retried until it commits).
        const committing = await startTestApp({
          databaseUrl: t.databaseUrl,
          config: { providers: { openai: { apiKey: 'sk-upstream-secret', baseUrl: upstream.url } }, llmSimulator: 'off', upstreamMaxRetries: 0, settlementDurability: 'commit' },
        });
        try {
          const workspace = await committing.createWorkspace({ balanceMillicents: 100_000 });
          await refuseWritesTo('usage_records', 'deadlock_detected');
          const { usage_record_not_stored: dropped, settlement_failed: failed } = committing.app.get(Billing).incidents;
          upstream.script({ kind: 'text', text: 'Fine.', usage: { prompt_tokens: 4_000, completion_tokens: 2 } });
          const error = await workspace.client.chat.completions
            .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] })
            .then(() => null, (failure: unknown) => failure);
          expect(error).toBeInstanceOf(OpenAI.InternalServerError);
          // The record tells an idempotent retry whether it was charged: no record, no charge.
          expect(await ledger(workspace)).toEqual([{ type: 'topup', amount: 100_000 }]);
          expect(committing.app.get(Billing).incidents.usage_record_not_stored).toBe(dropped);
          expect(committing.app.get(Billing).incidents.settlement_failed).toBeGreaterThan(failed);
          await expectConsistent(workspace);
        } finally {
          await committing.close();
        }
      });
    });
  });

  describe('a stream whose upstream stalls', () => {
    it('ends after UPSTREAM_IDLE_TIMEOUT_MS with an in-band error and [DONE], aborts the upstream, and charges what was generated', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      upstream.script({ kind: 'stream_failure', words: ['Once ', 'upon ', 'a ', 'time'], failure: 'stall' });
      const response = await fetch(`${t.baseUrl}/v1/chat/completions`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Tell me a story' }], stream: true }),
      });
      const events = (await response.text())
        .split('\n\n')
        .filter((frame) => frame.startsWith('data: '))
        .map((frame) => frame.slice('data: '.length));
      expect(events[events.length - 1]).toBe('[DONE]');
      const error = JSON.parse(events[events.length - 2]) as { error: { type: string; code: string } };
      expect(error.error).toMatchObject({ type: 'upstream_timeout', code: 'upstream_idle_timeout' });
      const text = events
        .slice(0, -2)
        .map((event) => (JSON.parse(event) as OpenAI.Chat.ChatCompletionChunk).choices[0]?.delta?.content ?? '')
        .join('');
      expect(text).toBe('Once upon a time');
      // The answer may end (journaled) before the fake has seen its connection close.
      const stalled = upstream.requests[upstream.requests.length - 1];
      expect(await waitUntil(() => stalled.closedEarly, 5_000)).toBe(true);

      const [record] = await records(workspace);
      expect(record).toMatchObject({ status: 'error', error_code: 'upstream_idle_timeout' });
      expect(record.output_tokens).toBeGreaterThanOrEqual(4);
      expect(record.input_tokens).toBeGreaterThan(0);
      expect(record.cost).toBeCloseTo((record.input_tokens * GPT_4O.input + record.output_tokens * GPT_4O.output) / 1e6, 6);
      const rows = await ledger(workspace);
      expect(rows.map((row) => row.type)).toEqual(['topup', 'usage']);
      expect(rows[1].amount).toBe(-Math.floor(record.cost));
      await expectConsistent(workspace);
    });
  });

  describe('a client that leaves before the first byte', () => {
    const prompt = Array.from({ length: 3_000 }, (_, i) => `word${i % 97}`).join(' ');

    it.each([false, true])('pays for the prompt that was sent upstream (stream: %s)', async (streamed) => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'hang' });
      const sent = upstream.requests.length;
      const controller = new AbortController();
      const request = workspace.client.chat.completions.create(
        { model: 'gpt-4o', messages: [{ role: 'user', content: prompt }], stream: streamed, max_tokens: 100 } as OpenAI.Chat.ChatCompletionCreateParams,
        { signal: controller.signal },
      );
      request.catch(() => undefined);
      await eventually(async () => upstream.requests.length, (count) => count > sent);
      controller.abort();

      const [record] = await eventually(() => records(workspace), (rows) => rows.length > 0);
      expect(record).toMatchObject({ status: 'error', error_code: 'client_disconnected', output_tokens: 0 });
      expect(record.input_tokens).toBeGreaterThan(3_000);
      expect(record.cost).toBe((record.input_tokens * GPT_4O.input) / 1e6);
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: 1_000_000 },
        { type: 'usage', amount: -Math.floor(record.cost) },
      ]);
      await expectConsistent(workspace);
    });
  });

  describe('usage reported by the provider is checked before billing', () => {
    it('never credits the wallet for negative token counts', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      upstream.script({ kind: 'text', text: 'Short answer.', usage: { prompt_tokens: 20, completion_tokens: -60_000 } });
      const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }] });
      expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
      const [record] = await records(workspace);
      expect(record.output_tokens).toBe(completion.usage!.completion_tokens);
      expect(record.cost).toBeGreaterThan(0);
      const wallet = await expectConsistent(workspace);
      expect(wallet.balance).toBeLessThan(100_000);
    });

    it('clamps a count above the model limits (3e9 tokens) instead of failing the settlement', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.script({ kind: 'text', text: 'Ok.', usage: { prompt_tokens: 3e9, completion_tokens: 2 } });
      const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 50 });
      expect(completion.usage).toMatchObject({ prompt_tokens: GPT_4O.contextLength, completion_tokens: 2 });
      const [record] = await records(workspace);
      expect(record).toMatchObject({ status: 'success', input_tokens: GPT_4O.contextLength, output_tokens: 2 });
      await expectConsistent(workspace);
    });

    it('keeps a small wallet at or above zero when concurrent requests each cost more than their hold', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 10_000 });
      // Each answer claims a 100,000-token prompt (25,000 millicents) for a prompt held as a few tokens.
      for (let i = 0; i < 3; i++) {
        upstream.script({ kind: 'text', text: 'one two three', chunkDelayMs: 150, usage: { prompt_tokens: 100_000, completion_tokens: 3 } });
      }
      const answers = await Promise.all(
        Array.from({ length: 3 }, async () => {
          const stream = await workspace.client.chat.completions.create({
            model: 'gpt-4o',
            messages: [{ role: 'user', content: 'Count' }],
            max_tokens: 10,
            stream: true,
          });
          let text = '';
          for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
          return text;
        }),
      );
      expect(answers).toEqual(['one two three', 'one two three', 'one two three']);
      const wallet = await expectConsistent(workspace);
      expect(wallet.balance).toBe(0);
      const rows = await records(workspace);
      expect(rows.reduce((sum: number, row: { charged: number }) => sum + row.charged, 0)).toBe(10_000);
    });
  });
});
