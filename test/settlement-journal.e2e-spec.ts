import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource, QueryRunner } from 'typeorm';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * SETTLEMENT_DURABILITY=journal, the default: a chat request is answered once its settlement
 * is in the journal under DATA_DIR, before it commits; reads of balances, the ledger and usage
 * wait for the commits of the answers given. (A killed process's journal, written by the
 * next process: test/wallet-leases.)
 */
describe('the settlement journal (SETTLEMENT_DURABILITY=journal)', () => {
  let upstream: FakeOpenAi;
  let dataDir: string;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-journal-'));
  });
  afterAll(async () => {
    await upstream?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const ask = (workspace: TestWorkspace, stream = false) =>
    stream
      ? workspace.client.chat.completions
          .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 100, stream: true, stream_options: { include_usage: true } })
          .then(async (chunks) => {
            let content = '';
            for await (const chunk of chunks) content += chunk.choices[0]?.delta?.content ?? '';
            return content;
          })
      : workspace.client.chat.completions
          .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 100 })
          .then((completion) => completion.choices[0].message.content);

  /** Locks the workspace's wallet row in a transaction of its own: no settlement can commit until it ends. */
  async function lockWallet(db: DataSource, workspaceId: string): Promise<QueryRunner> {
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

  const journalFiles = async (root: string) => {
    const databases = await readdir(path.join(root, 'settlement-journal')).catch(() => [] as string[]);
    return (await Promise.all(databases.map((database) => readdir(path.join(root, 'settlement-journal', database))))).flat();
  };

  describe('with a writable DATA_DIR', () => {
    let t: TestApp;
    let db: DataSource;
    let closed = false;
    beforeAll(async () => {
      t = await startTestApp({
        config: {
          providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
          llmSimulator: 'off',
          dataDir,
          settlementDurability: 'journal',
          // The lease stays between requests: admitting from it takes no lock on the wallet.
          walletLeaseIdleMs: 60_000,
        },
      });
      db = t.app.get(DataSource);
    });
    afterAll(async () => {
      if (!closed) await t?.close();
    });

    it('answers plain and streamed requests before their settlements commit; the API reads wait for the commits', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      // Each answer costs 10 x 250,000 + 20 x 1,000,000 micro-millicents = 22.5 millicents.
      // The first takes the lease (and is charged 22, the half carried).
      expect(await ask(workspace)).toBe('Hi.');
      await t.settled(workspace.id);
      // Settlements lock the wallet's row: while this transaction holds it, none can commit.
      const blocker = await lockWallet(db, workspace.id);
      try {
        expect(await ask(workspace)).toBe('Hi.');
        expect(await ask(workspace, true)).toBe('Hi.');
        // Answered, journaled, not committed.
        expect(await journalFiles(dataDir)).toHaveLength(1);
        const [{ records }] = await db.query(`SELECT count(*)::int AS records FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
        expect(records).toBe(1);

        // The client's reads wait for the charges of the answers it was given.
        const headers = { authorization: `Bearer ${workspace.apiKey}` };
        const reads = Promise.all(
          ['/v1/wallet', '/v1/wallet/transactions', '/v1/usage/recent'].map((route) => fetch(`${t.baseUrl}${route}`, { headers }).then((response) => response.json())),
        );
        let answered = false;
        void reads.then(() => (answered = true));
        await new Promise((resolve) => setTimeout(resolve, 300));
        expect(answered).toBe(false);
        await blocker.commitTransaction();

        const [balance, transactions, recent] = (await reads) as [
          { balanceMillicents: number; reservedMillicents: number },
          { data: { type: string; amountMillicents: number }[] },
          { data: { status: string }[] },
        ];
        // Three answers: 22 + 23 + 22 millicents (the halves carried).
        expect(balance.balanceMillicents).toBe(1_000_000 - 67);
        expect(transactions.data.filter((row) => row.type === 'usage').map((row) => row.amountMillicents)).toEqual([-22, -23, -22]);
        expect(recent.data.map((row) => row.status)).toEqual(['success', 'success', 'success']);
      } finally {
        await unlock(blocker);
      }
      await t.settled(workspace.id);
      expect(await walletInvariants(db, workspace.id)).toMatchObject({ balance: 1_000_000 - 67, ledger: 1_000_000 - 67 });
    });

    it('answers a request with an Idempotency-Key (chat completions, responses) only once its settlement has committed', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      expect(await ask(workspace)).toBe('Hi.'); // takes the lease
      await t.settled(workspace.id);
      const blocker = await lockWallet(db, workspace.id);
      try {
        const answered: string[] = [];
        const answers = [
          workspace.client.chat.completions
            .create({ model: 'gpt-4o', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 100 }, { headers: { 'Idempotency-Key': 'journal-test-1' } })
            .then((completion) => (answered.push('chat'), completion.choices[0].message.content)),
          workspace.client.responses
            .create({ model: 'gpt-4o', input: 'Hello', store: false, max_output_tokens: 100 }, { headers: { 'Idempotency-Key': 'journal-test-2' } })
            .then((response) => (answered.push('responses'), response.output_text)),
        ];
        await new Promise((resolve) => setTimeout(resolve, 500));
        expect(answered).toEqual([]);
        await blocker.commitTransaction();
        expect(await Promise.all(answers)).toEqual(['Hi.', 'Hi.']);
        const [{ records }] = await db.query(`SELECT count(*)::int AS records FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
        expect(records).toBe(3);
      } finally {
        await unlock(blocker);
      }
    });

    it('keeps its journal file only while settlements in it are pending: none is left once they commit and the process stops', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      await Promise.all(Array.from({ length: 20 }, (_, i) => ask(workspace, i % 2 === 0)));
      await t.settled(workspace.id);
      const [{ records }] = await db.query(`SELECT count(*)::int AS records FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
      expect(records).toBe(20);
      closed = true;
      await t.close();
      expect(await journalFiles(dataDir)).toEqual([]);
    });
  });

  it('answers after the commit when DATA_DIR cannot be written', async () => {
    const notADirectory = path.join(dataDir, 'a-file');
    await writeFile(notADirectory, 'not a directory');
    const t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        dataDir: notADirectory,
        settlementDurability: 'journal',
        walletLeaseIdleMs: 60_000,
      },
    });
    const db = t.app.get(DataSource);
    let blocker: QueryRunner | undefined;
    try {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      upstream.setDefault({ kind: 'text', text: 'Hi.', usage: { prompt_tokens: 10, completion_tokens: 20 } });
      expect(await ask(workspace)).toBe('Hi.'); // takes the lease
      blocker = await lockWallet(db, workspace.id);
      let answered = false;
      const answer = ask(workspace).then((content) => ((answered = true), content));
      await new Promise((resolve) => setTimeout(resolve, 500));
      expect(answered).toBe(false);
      await blocker.commitTransaction();
      expect(await answer).toBe('Hi.');
      const [{ records }] = await db.query(`SELECT count(*)::int AS records FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
      expect(records).toBe(2);
    } finally {
      if (blocker) await unlock(blocker);
      await t.close();
    }
  });
});
