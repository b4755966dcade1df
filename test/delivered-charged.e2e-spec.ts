import { chmod, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import type { ServerToolType } from '../src/assistants/entities/assistant.entity';
import { OUT_OF_CONTEXT_NOTE } from '../src/chat/tool-loop';
import { countTextTokens } from '../src/providers/tokens';
import { freePort } from '../src/database/embedded-postgres';
import type { FunctionTool } from '../src/providers/provider-adapter';
import type { ServerTool, ServerToolDescriptor } from '../src/tools/server-tool';
import { FakeOpenAi, OpenAiScenario, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, startFakeSearch } from './fakes/fake-search';
import { ServerProcess, sleep, waitUntil } from './support/processes';
import { RestartablePostgres } from './support/restartable-postgres';
import { startTestApp, testConfig, TestApp, TestWorkspace } from './support/test-app';
import { nothingHeld, walletInvariants } from './support/wallet-invariants';

/**
 * Delivered means charged (issue 30): whatever reached the client is charged exactly once,
 * whatever did not is not. A stream that fails after content reached its client (an
 * upstream 500 or 400 in a tool loop's second iteration, a stream broken mid-way) is charged
 * for what it delivered and the tools that ran, never refunded; a tool loop whose next
 * prompt cannot fit the model's context ends with finish_reason "length" without calling the
 * upstream; a stream whose settlement meets a stopped PostgreSQL is journaled and charged
 * once the database is back, and its client gets [DONE] without an error frame.
 */
jest.setTimeout(120_000);

const INITIAL = 1_000_000;
/** gpt-4o: millicents per million tokens. */
const GPT_4O = { input: 250_000, output: 1_000_000 };
const LOOKUP_PRICE = 500;
const words = (count: number, prefix = 'word') => Array.from({ length: count }, (_, i) => `${prefix}${i} `).join('');

/** A server tool of this test alone: returns whatever the test sets, at the web search's price (set to LOOKUP_PRICE below). */
class LookupTool implements ServerTool {
  static readonly descriptor: ServerToolDescriptor = { name: 'lookup', label: 'lookup', help: 'Looks a word up.', price: 'web_search' };
  readonly defaultMaxResults = 1;
  readonly definition: FunctionTool = {
    type: 'function',
    function: { name: 'lookup', description: 'Looks a word up.', parameters: { type: 'object', properties: { word: { type: 'string' } } } },
  };
  result = 'Found it.';
  async run(): Promise<string> {
    return this.result;
  }
}

type XService = { cost_millicents: number; iterations: number; tools_used: string[] };

interface Streamed {
  text: string;
  finish: string | null;
  xService?: XService;
  error?: unknown;
}

/** A stream read with the official SDK, as a client would: what it received, and the error it raised, if any. */
async function readStream(client: OpenAI, body: Record<string, unknown>): Promise<Streamed> {
  const seen: Streamed = { text: '', finish: null };
  try {
    const stream = await client.chat.completions.create({ ...body, stream: true } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
    for await (const chunk of stream) {
      seen.text += chunk.choices[0]?.delta?.content ?? '';
      seen.finish = chunk.choices[0]?.finish_reason ?? seen.finish;
      seen.xService = (chunk as unknown as { x_service?: XService }).x_service ?? seen.xService;
    }
  } catch (error) {
    seen.error = error;
  }
  return seen;
}

describe('delivered means charged', () => {
  let lookup: LookupTool;
  let upstream: FakeOpenAi;
  let dataDir: string;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-delivered-'));
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        // The default: answered streams are journaled, then committed.
        settlementDurability: 'journal',
        dataDir,
        toolPrices: { ...testConfig().toolPrices, web_search: LOOKUP_PRICE },
      },
      serverTools: [LookupTool],
    });
    lookup = t.app.get(LookupTool);
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t?.close();
    await upstream?.close();
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const ledger = (workspace: TestWorkspace) =>
    db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at, type DESC', [
      workspace.id,
    ]) as Promise<Array<{ type: string; amount: number }>>;
  const recordOf = async (workspace: TestWorkspace) => {
    const rows = (await db.query(
      `SELECT status, error_code, input_tokens::int AS input_tokens, output_tokens::int AS output_tokens, iterations, tools_used, charged_millicents::int AS charged,
              total_cost_millicents::float8 AS cost, tool_cost_millicents::float8 AS tool_cost
         FROM usage_records WHERE workspace_id = $1`,
      [workspace.id],
    )) as Array<Record<string, unknown> & { charged: number; cost: number; input_tokens: number; output_tokens: number }>;
    expect(rows).toHaveLength(1);
    return rows[0];
  };
  /** Once nothing is held: the books balance, and the wallet went down by what was charged. */
  const expectBooksBalanced = async (workspace: TestWorkspace, charged: number) => {
    await t.settled(workspace.id);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 10_000)).toBe(true);
    expect(await walletInvariants(db, workspace.id)).toEqual({ balance: INITIAL - charged, reserved: 0, ledger: INITIAL - charged, holds: 0 });
  };
  const lookupAssistant = (workspace: TestWorkspace) =>
    t.app.get(AssistantsService).create(workspace.id, { name: 'Lookup', model: 'gpt-4o', tools: ['lookup' as ServerToolType] });
  const lookupCall = (text?: string): OpenAiScenario => ({
    kind: 'tool_calls',
    text,
    calls: [{ id: 'call_lookup1', name: 'lookup', arguments: '{"word":"x"}' }],
    usage: { prompt_tokens: 1_000, completion_tokens: 300 },
  });
  /** The first iteration: 1,000 prompt and 300 completion tokens of gpt-4o, and the lookup. */
  const FIRST_ITERATION = (1_000 * GPT_4O.input + 300 * GPT_4O.output) / 1e6 + LOOKUP_PRICE;

  describe('a streamed tool loop whose second iteration fails after the first one streamed 200 words', () => {
    it.each<[string, OpenAiScenario, string]>([
      ['an upstream 500', { kind: 'http_error', status: 500 }, 'upstream_failed'],
      ['an upstream 400', { kind: 'http_error', status: 400, body: { error: { message: 'bad', type: 'invalid_request_error' } } }, 'upstream_bad_request'],
    ])('is charged for the first iteration and its tool on %s, refunding nothing', async (_name, failure, code) => {
      const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
      const bot = await lookupAssistant(workspace);
      upstream.script(lookupCall(words(200)), failure);

      const seen = await readStream(workspace.client, { assistant_id: bot.id, messages: [{ role: 'user', content: 'Look it up' }] });

      expect(seen.text).toBe(words(200));
      expect(seen.error).toBeInstanceOf(OpenAI.APIError);
      await t.settled(workspace.id);
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: INITIAL },
        { type: 'usage', amount: -FIRST_ITERATION },
      ]);
      expect(await recordOf(workspace)).toMatchObject({
        status: 'error',
        error_code: code,
        input_tokens: 1_000,
        output_tokens: 300,
        iterations: 1,
        tools_used: ['lookup'],
        charged: FIRST_ITERATION,
        tool_cost: LOOKUP_PRICE,
      });
      await expectBooksBalanced(workspace, FIRST_ITERATION);
    });

    it('is charged for both iterations as far as they were delivered when the second one breaks mid-stream', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
      const bot = await lookupAssistant(workspace);
      upstream.script(lookupCall(words(200)), { kind: 'stream_failure', words: words(50, 'more').split(/(?<= )/), failure: 'socket' });

      const seen = await readStream(workspace.client, { assistant_id: bot.id, messages: [{ role: 'user', content: 'Look it up' }] });

      expect(seen.text).toBe(words(200) + words(50, 'more'));
      expect(seen.error).toBeInstanceOf(OpenAI.APIError);
      await t.settled(workspace.id);
      const record = await recordOf(workspace);
      expect(record).toMatchObject({ status: 'error', iterations: 2, tools_used: ['lookup'], tool_cost: LOOKUP_PRICE });
      expect(record.error_code).toMatch(/^upstream_/);
      // The second call's prompt (the first one's, the 200 words and the lookup) and its 50 delivered words, counted by our tokenizer.
      expect(record.input_tokens).toBeGreaterThan(1_000 + 200);
      expect(record.output_tokens).toBeGreaterThanOrEqual(300 + 50);
      // Whole millicents; the fraction is carried in the wallet (ARCHITECTURE.md, section 5).
    expect(Math.abs(record.charged - record.cost)).toBeLessThan(1);
      expect(record.charged).toBeGreaterThan(FIRST_ITERATION);
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: INITIAL },
        { type: 'usage', amount: -record.charged },
      ]);
      await expectBooksBalanced(workspace, record.charged);
    });

    it('is refunded when nothing reached the client (the first iteration only called the tool)', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
      const bot = await lookupAssistant(workspace);
      upstream.script(lookupCall(), { kind: 'http_error', status: 500 });

      const seen = await readStream(workspace.client, { assistant_id: bot.id, messages: [{ role: 'user', content: 'Look it up' }] });

      expect(seen.text).toBe('');
      expect(seen.error).toBeInstanceOf(OpenAI.APIError);
      await t.settled(workspace.id);
      expect(await ledger(workspace)).toEqual([
        { type: 'topup', amount: INITIAL },
        { type: 'usage', amount: -FIRST_ITERATION },
        { type: 'refund', amount: FIRST_ITERATION },
      ]);
      expect(await recordOf(workspace)).toMatchObject({ status: 'error', error_code: 'upstream_failed', charged: 0 });
      await expectBooksBalanced(workspace, 0);
    });
  });

  it('charges a plain stream broken after 300 words for what it delivered', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
    upstream.script({ kind: 'stream_failure', words: words(300).split(/(?<= )/), failure: 'socket' });

    const seen = await readStream(workspace.client, { model: 'gpt-4o', messages: [{ role: 'user', content: 'Tell me a long story' }] });

    expect(seen.text).toBe(words(300));
    expect(seen.error).toBeInstanceOf(OpenAI.APIError);
    await t.settled(workspace.id);
    const record = await recordOf(workspace);
    expect(record).toMatchObject({ status: 'error', iterations: 1 });
    expect(record.error_code).toMatch(/^upstream_/);
    // No usage came from the upstream: the delivered words are counted by our tokenizer.
    expect(record.output_tokens).toBeGreaterThanOrEqual(300);
    expect(record.input_tokens).toBeGreaterThan(0);
    // Whole millicents; the fraction is carried in the wallet (ARCHITECTURE.md, section 5).
    expect(Math.abs(record.charged - record.cost)).toBeLessThan(1);
    expect(record.charged).toBeGreaterThanOrEqual((300 * GPT_4O.output) / 1e6);
    expect(await ledger(workspace)).toEqual([
      { type: 'topup', amount: INITIAL },
      { type: 'usage', amount: -record.charged },
    ]);
    await expectBooksBalanced(workspace, record.charged);
  });

  describe('a tool result that would overflow the context at the second iteration', () => {
    beforeAll(() => {
      // About 140,000 tokens: gpt-4o's context holds 128,000.
      lookup.result = ' lorem'.repeat(140_000);
    });
    afterAll(() => {
      lookup.result = 'Found it.';
    });

    it.each([false, true])('ends with finish_reason "length" without a second upstream call, charged for what ran (streamed: %s)', async (stream) => {
      const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
      const bot = await lookupAssistant(workspace);
      upstream.script(lookupCall('Let me look that up.'));
      const calls = upstream.requests.length;
      const body = { assistant_id: bot.id, messages: [{ role: 'user', content: 'Look it up' }] };

      let content: string;
      let finish: string | null;
      let xService: XService | undefined;
      if (stream) {
        const seen = await readStream(workspace.client, body);
        expect(seen.error).toBeUndefined();
        ({ text: content, finish, xService } = seen);
      } else {
        const completion = await workspace.client.chat.completions.create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
        content = completion.choices[0].message.content ?? '';
        finish = completion.choices[0].finish_reason;
        xService = (completion as unknown as { x_service: XService }).x_service;
      }

      expect(upstream.requests.length).toBe(calls + 1);
      expect(finish).toBe('length');
      expect(content).toContain('Let me look that up.');
      expect(content).toContain(OUT_OF_CONTEXT_NOTE);
      expect(xService).toMatchObject({ cost_millicents: FIRST_ITERATION, iterations: 1, tools_used: ['lookup'] });
      await t.settled(workspace.id);
      expect(await recordOf(workspace)).toMatchObject({ status: 'success', charged: FIRST_ITERATION, iterations: 1 });
      await expectBooksBalanced(workspace, FIRST_ITERATION);
    });

    it('sends the second call with its output cap lowered to what the tool result leaves of the context', async () => {
      // About 120,000 tokens of result: less than gpt-4o's output cap (16,384) is left.
      const perRepeat = countTextTokens(' lorem'.repeat(1_000)) / 1_000;
      lookup.result = ' lorem'.repeat(Math.floor(120_000 / perRepeat));
      const workspace = await t.createWorkspace({ balanceMillicents: INITIAL });
      const bot = await lookupAssistant(workspace);
      upstream.script(lookupCall(), { kind: 'text', text: 'Done.', usage: { prompt_tokens: 120_000, completion_tokens: 2 } });
      const calls = upstream.requests.length;

      const completion = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Look it up' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);

      expect(completion.choices[0]).toMatchObject({ message: { content: 'Done.' }, finish_reason: 'stop' });
      expect(upstream.requests.length).toBe(calls + 2);
      const [first, second] = upstream.requests.slice(calls).map(({ body }) => Number(body.max_tokens ?? body.max_completion_tokens));
      expect(first).toBe(16_384);
      expect(second).toBeLessThan(16_384 - 4_000);
      expect(second).toBeGreaterThanOrEqual(16);
      // The answer came once its settlement was journaled: the usage record is read once it has committed.
      await t.settled(workspace.id);
      await expectBooksBalanced(workspace, (await recordOf(workspace)).charged);
    });
  });
});

/**
 * PostgreSQL stopped under a service process running its defaults (SETTLEMENT_DURABILITY=journal,
 * budget leases): the PostgreSQL is a cluster of this file's own, made by a first service
 * process and then taken over so that the test can stop and start it.
 */
describe('delivered means charged through a database outage (a service process)', () => {
  let upstream: FakeOpenAi;
  let search: FakeSearch;
  let postgres: RestartablePostgres;
  let dataDir: string;
  let setup: TestApp;
  let db: DataSource;
  let server: ServerProcess;
  let baseUrl: string;

  beforeAll(async () => {
    [upstream, search] = await Promise.all([startFakeOpenAi(), startFakeSearch()]);
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-delivered-outage-'));
    // The embedded PostgreSQL runs as the `postgres` user under root: it must reach DATA_DIR.
    await chmod(dataDir, 0o755);
    const firstPort = await freePort();
    const first = ServerProcess.start({ PORT: String(firstPort), HOST: '127.0.0.1', DATA_DIR: dataDir, LOG_LEVEL: 'error' });
    await first.waitForHealth(`http://127.0.0.1:${firstPort}`, 120_000);
    first.kill();
    await first.exited;
    postgres = await RestartablePostgres.takeOver(dataDir);
    await postgres.start();
    const password = (await readFile(path.join(dataDir, 'embedded-postgres.password'), 'utf8')).trim();
    const databaseUrl = `postgres://postgres:${encodeURIComponent(password)}@127.0.0.1:${postgres.port}/assistant_chat`;
    setup = await startTestApp({ databaseUrl });
    db = setup.app.get(DataSource);

    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    server = ServerProcess.start({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      SESSION_SECRET: 'delivered-test-session-secret-0123456789',
      OPENAI_API_KEY: 'sk-upstream',
      OPENAI_BASE_URL: upstream.url,
      UPSTREAM_MAX_RETRIES: '0',
      WEB_SEARCH_PROVIDER: 'searxng',
      WEB_SEARCH_BASE_URL: search.url,
      // A search costs more than the budget lease holds spare: the next iteration needs the database.
      WEB_SEARCH_PRICE_MILLICENTS: '1000000',
      RATE_LIMIT_ANONYMOUS_RPM: '1000000',
      LOG_LEVEL: 'error',
    });
    await server.waitForHealth(baseUrl, 60_000);
  }, 240_000);

  afterAll(async () => {
    server?.kill();
    await server?.exited;
    await setup?.close();
    await postgres?.stop();
    await Promise.all([upstream?.close(), search?.close()]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  /** One stream read frame by frame: its content, its data frames (errors included), and whether it ended with [DONE]. */
  async function rawStream(workspace: TestWorkspace, body: Record<string, unknown>, onFirstContent?: () => void) {
    const response = await fetch(`${baseUrl}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ ...body, stream: true }),
      signal: AbortSignal.timeout(60_000),
    });
    const seen = { status: response.status, text: '', errors: [] as unknown[], done: false, xService: undefined as XService | undefined };
    if (response.status !== 200) return seen;
    const reader = response.body!.getReader();
    const decoder = new TextDecoder();
    let buffered = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffered.indexOf('\n\n')) >= 0) {
        const frame = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        if (!frame.startsWith('data: ')) continue;
        const data = frame.slice(6);
        if (data === '[DONE]') {
          seen.done = true;
          continue;
        }
        const event = JSON.parse(data) as { error?: unknown; choices?: Array<{ delta?: { content?: string } }>; x_service?: XService };
        if (event.error) seen.errors.push(event.error);
        const content = event.choices?.[0]?.delta?.content ?? '';
        if (content && !seen.text) onFirstContent?.();
        seen.text += content;
        seen.xService = event.x_service ?? seen.xService;
      }
    }
    return seen;
  }

  // A race between the streams' ends and the outage: run more than once.
  it.each([1, 2])('ends streams that complete while PostgreSQL is stopped with [DONE] and no error frame, and charges each once when it is back (run %i)', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000_000 });
    // 30 words, 100 ms apart: each stream takes about 3 s.
    upstream.setDefault({ kind: 'text', text: words(30), usage: { prompt_tokens: 20, completion_tokens: 70 }, chunkDelayMs: 100 });
    const body = { model: 'gpt-4o', messages: [{ role: 'user', content: 'Count' }], max_tokens: 100 };
    // Four streams a second apart: the first to end finds the database gone (its journaled
    // settlement fails to commit), the others end after the service knows it is gone.
    let started = 0;
    let contentArrived!: () => void;
    const firstContent = new Promise<void>((resolve) => (contentArrived = resolve));
    const results = Promise.all(
      Array.from({ length: 4 }, async (_, i) => {
        await sleep(i * 1_000);
        return rawStream(workspace, body, () => {
          if (++started === 1) contentArrived();
        });
      }),
    );
    await firstContent;
    await postgres.stop();
    const stoppedAt = Date.now();
    const streams = await results;
    const endedAt = Date.now();
    await sleep(2_000);
    await postgres.start();
    const backAt = Date.now();
    console.log(
      `Streams ending while PostgreSQL was stopped: ${streams.filter((stream) => stream.errors.length === 0 && stream.done).length} of 4 ended with [DONE] and no error frame, the last ${endedAt - stoppedAt} ms after the stop`,
    );

    for (const stream of streams) {
      expect(stream).toMatchObject({ status: 200, text: words(30), errors: [], done: true });
    }
    // Once the database is back, every stream is charged once, with the cost its client was told.
    expect(await waitUntil(async () => (await db.query(`SELECT 1 FROM usage_records WHERE workspace_id = $1`, [workspace.id])).length >= 4, 60_000)).toBe(true);
    console.log(`The 4 streams' settlements committed ${Date.now() - backAt} ms after PostgreSQL was back`);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 30_000)).toBe(true);
    const records = (await db.query(
      `SELECT status, charged_millicents::int AS charged, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1`,
      [workspace.id],
    )) as Array<{ status: string; charged: number; cost: number }>;
    const cost = (20 * GPT_4O.input + 70 * GPT_4O.output) / 1e6;
    expect(records).toEqual(Array(4).fill({ status: 'success', charged: Math.ceil(cost), cost }));
    for (const stream of streams) expect(stream.xService?.cost_millicents).toBe(cost);
    const usage = (await db.query(`SELECT count(*)::int AS n FROM wallet_transactions WHERE workspace_id = $1 AND type = 'usage'`, [workspace.id])) as Array<{
      n: number;
    }>;
    expect(usage[0].n).toBe(4);
    expect(await walletInvariants(db, workspace.id)).toEqual({
      balance: 100_000_000 - 4 * Math.ceil(cost),
      reserved: 0,
      ledger: 100_000_000 - 4 * Math.ceil(cost),
      holds: 0,
    });
  });

  it('charges a stream cut by an outage mid-way for what it delivered', async () => {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 100_000_000 });
    const bot = await setup.app.get(AssistantsService).create(workspace.id, { name: 'Searcher', model: 'gpt-4o', tools: ['web_search'] });
    upstream.script({
      kind: 'tool_calls',
      // 100 words 50 ms apart: PostgreSQL is stopped while they stream.
      text: words(100),
      chunkDelayMs: 50,
      calls: [{ id: 'call_s1', name: 'web_search', arguments: '{"query":"x"}' }],
      usage: { prompt_tokens: 500, completion_tokens: 250 },
    });
    // PostgreSQL is stopped as the first words arrive: the tool call comes once the database is gone.
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const stopped = (async () => {
      await gate;
      await postgres.stop();
    })();
    // A small output cap: the budget lease holds little spare, and the search's price must come from the wallet.
    const seenPromise = rawStream(workspace, { assistant_id: bot.id, messages: [{ role: 'user', content: 'Search' }], max_tokens: 300 }, () => release());
    await stopped;
    const seen = await seenPromise;
    await sleep(1_000);
    await postgres.start();

    // What reached the client, then the outage in-band (its content is incomplete), and [DONE].
    expect(seen).toMatchObject({ status: 200, text: words(100), errors: [{ code: 'database_unavailable' }], done: true });
    expect(await waitUntil(async () => (await db.query(`SELECT 1 FROM usage_records WHERE workspace_id = $1`, [workspace.id])).length >= 1, 60_000)).toBe(true);
    expect(await waitUntil(() => nothingHeld(db, workspace.id), 30_000)).toBe(true);
    const [record] = (await db.query(
      `SELECT status, error_code, iterations, charged_millicents::int AS charged, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1`,
      [workspace.id],
    )) as Array<{ status: string; error_code: string | null; iterations: number; charged: number; cost: number }>;
    // The first iteration reached the client: it is charged (500 x 250,000 + 250 x 1,000,000 per million), not refunded.
    const first = (500 * GPT_4O.input + 250 * GPT_4O.output) / 1e6;
    expect(record).toMatchObject({ status: 'error', error_code: 'database_unavailable', iterations: 1 });
    expect(record.cost).toBe(first);
    expect(record.charged).toBe(Math.ceil(first));
    const ledgerRows = (await db.query(`SELECT type FROM wallet_transactions WHERE workspace_id = $1 AND type <> 'topup'`, [workspace.id])) as Array<{ type: string }>;
    expect(ledgerRows).toEqual([{ type: 'usage' }]);
    expect(await walletInvariants(db, workspace.id)).toEqual({
      balance: 100_000_000 - Math.ceil(first),
      reserved: 0,
      ledger: 100_000_000 - Math.ceil(first),
      holds: 0,
    });
  });
});
