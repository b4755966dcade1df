import Anthropic from '@anthropic-ai/sdk';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { type FakeAnthropic, type FakeBlock, httpError, startFakeAnthropic } from './fakes/fake-anthropic';
import { type FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, type TestApp, type TestWorkspace } from './support/test-app';
import { walletInvariants } from './support/wallet-invariants';

/**
 * The Messages API on an Anthropic deployment: the request goes upstream as the client sent it
 * (thinking blocks and their signatures, redacted_thinking, cache_control, documents with
 * citations, system blocks), only the model id and max_tokens set by the service; the answer
 * (thinking, signature, citations, cache usage) comes back as Anthropic sent it, plain and
 * streamed; the known anthropic-beta flags go with it. On a deployment of another provider
 * (failover) the request is translated as before. Each is charged once, through the chat core.
 */

type WithService<T> = T & { x_service: { cost_millicents: number; provider: string | null; deployment: string | null; attempts: number } };

const KEY_ENV = 'MESSAGES_NATIVE_ANTHROPIC_KEY';
const OPENAI_KEY_ENV = 'MESSAGES_NATIVE_OPENAI_KEY';
const UPSTREAM_MODEL = 'claude-haiku-4-5-20251001';
/** Millicents per million tokens. */
const PRICES = { input_price: 100_000, output_price: 500_000, cached_input_price: 10_000 };

/** The conversation of a client that kept Claude's thinking, with caching and a cited document. */
const REQUEST = {
  model: 'claude-haiku-4-5',
  max_tokens: 2048,
  system: [{ type: 'text' as const, text: 'You answer from the documents only.', cache_control: { type: 'ephemeral' as const } }],
  thinking: { type: 'enabled' as const, budget_tokens: 1024 },
  metadata: { user_id: 'reader-7' },
  messages: [
    {
      role: 'user' as const,
      content: [
        {
          type: 'document' as const,
          source: { type: 'text' as const, media_type: 'text/plain' as const, data: 'The grass is green. The sky is blue.' },
          title: 'Facts',
          citations: { enabled: true },
          cache_control: { type: 'ephemeral' as const },
        },
        { type: 'text' as const, text: 'What colour is the sky?' },
      ],
    },
    {
      role: 'assistant' as const,
      content: [
        { type: 'thinking' as const, thinking: 'The document says the sky is blue.', signature: 'EqQBCkYIARgCIkDsig-one' },
        { type: 'redacted_thinking' as const, data: 'EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP' },
        { type: 'text' as const, text: 'Blue.' },
      ],
    },
    { role: 'user' as const, content: [{ type: 'text' as const, text: 'And the grass?', cache_control: { type: 'ephemeral' as const } }] },
  ],
};

const CITATION = { type: 'char_location', cited_text: 'The grass is green.', document_index: 0, document_title: 'Facts', start_char_index: 0, end_char_index: 19 };
const ANSWER: FakeBlock[] = [
  { type: 'thinking', thinking: 'The first sentence says green.', signature: 'EqQBCkYIARgCIkDsig-two' },
  { type: 'text', text: 'Green.', citations: [CITATION] },
];
/** Cache usage as Anthropic reports it: input_tokens is what was neither written to nor read from the cache. */
const USAGE = { input_tokens: 50, output_tokens: 30, cache_creation_input_tokens: 200, cache_read_input_tokens: 1000 };
/** 250 input tokens at the input price, 1000 cached at the cached price, 30 output: in millicents. */
const COST = (250 * PRICES.input_price + 1000 * PRICES.cached_input_price + 30 * PRICES.output_price) / 1_000_000;

const BETAS = 'prompt-caching-2024-07-31, interleaved-thinking-2025-05-14,made-up-flag-2099-01-01';

function catalog(anthropic: FakeAnthropic, openai: FakeOpenAi): string {
  process.env[KEY_ENV] = 'sk-ant-deployment';
  process.env[OPENAI_KEY_ENV] = 'sk-openai-deployment';
  const onAnthropic = { label: 'anthropic', provider: 'anthropic', base_url: anthropic.url, api_key_env: KEY_ENV, upstream_model: UPSTREAM_MODEL };
  const model = (id: string, deployments: object[]) => ({ id, provider: 'anthropic', context_length: 200_000, max_output_tokens: 64_000, ...PRICES, deployments });
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'messages-native-')), 'models.json');
  writeFileSync(
    file,
    JSON.stringify({
      models: [
        model('claude-haiku-4-5', [onAnthropic]),
        // Anthropic first (all but certainly, by weight); OpenAI when it fails.
        model('claude-mixed', [
          { ...onAnthropic, weight: 1_000_000_000_000 },
          { label: 'openai', provider: 'openai', base_url: openai.url, api_key_env: OPENAI_KEY_ENV, upstream_model: 'gpt-4o-mini' },
        ]),
      ],
    }),
  );
  return file;
}

describe('Anthropic Messages API on Anthropic deployments: nothing lost', () => {
  let t: TestApp;
  let anthropic: FakeAnthropic;
  let openai: FakeOpenAi;
  let db: DataSource;

  beforeAll(async () => {
    anthropic = await startFakeAnthropic({ apiKey: 'sk-ant-deployment' });
    openai = await startFakeOpenAi();
    t = await startTestApp({ config: { llmSimulator: 'off', upstreamMaxRetries: 0, modelCatalogFile: catalog(anthropic, openai) } });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t?.close();
    await anthropic?.close();
    await openai?.close();
  });
  beforeEach(() => anthropic.reset());

  const clientOf = (workspace: TestWorkspace) =>
    new Anthropic({ baseURL: t.baseUrl, apiKey: workspace.apiKey, maxRetries: 0, timeout: 20_000, defaultHeaders: { 'anthropic-beta': BETAS } });
  const recordsOf = async (workspaceId: string) => {
    await t.quiet(workspaceId);
    return db.query(
      `SELECT source, status, model, input_tokens::int AS input, cached_tokens::int AS cached, output_tokens::int AS output, charged_millicents::float AS charged
         FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
      [workspaceId],
    ) as Promise<Array<{ source: string; status: string; model: string; input: number; cached: number; output: number; charged: number }>>;
  };
  const expectLedgerEqualsBalance = async (workspaceId: string) => {
    const wallet = await walletInvariants(db, workspaceId);
    expect(wallet).toEqual({ balance: wallet.ledger, ledger: wallet.ledger, reserved: 0, holds: 0 });
    return wallet;
  };
  const messagesCalls = () => anthropic.requests.filter((r) => r.path.split('?')[0] === '/v1/messages');

  it('sends the request as the client wrote it, and returns thinking, signatures, citations and cache usage unchanged', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    anthropic.script({ kind: 'reply', content: ANSWER, usage: USAGE });

    const message = (await clientOf(workspace).messages.create(REQUEST)) as WithService<Anthropic.Message>;

    const [sent] = messagesCalls();
    expect(sent.body).toEqual({ ...REQUEST, model: UPSTREAM_MODEL });
    // The flags Anthropic knows go along; the unknown one is dropped, not refused.
    expect(sent.headers['anthropic-beta']).toBe('prompt-caching-2024-07-31,interleaved-thinking-2025-05-14');
    expect(sent.headers['x-api-key']).toBe('sk-ant-deployment');

    expect(message.content).toEqual([
      { type: 'thinking', thinking: 'The first sentence says green.', signature: 'EqQBCkYIARgCIkDsig-two' },
      { type: 'text', text: 'Green.', citations: [CITATION] },
    ]);
    expect(message).toMatchObject({ type: 'message', role: 'assistant', model: 'claude-haiku-4-5', stop_reason: 'end_turn', stop_sequence: null });
    expect(message.usage).toMatchObject(USAGE);
    expect(message.x_service).toMatchObject({ cost_millicents: COST, provider: 'anthropic', deployment: 'anthropic', attempts: 1 });
    expect(await recordsOf(workspace.id)).toEqual([{ source: 'messages', status: 'success', model: 'claude-haiku-4-5', input: 1250, cached: 1000, output: 30, charged: COST }]);
    expect((await expectLedgerEqualsBalance(workspace.id)).balance).toBe(1_000_000 - COST);
  });

  it("streams Anthropic's own events: thinking_delta then signature_delta, then the text and its citations", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    anthropic.script({ kind: 'reply', content: ANSWER, usage: USAGE });

    const stream = clientOf(workspace).messages.stream(REQUEST);
    const events: Array<{ type: string } & Record<string, any>> = [];
    for await (const event of stream) events.push(event as never);
    const final = await stream.finalMessage();

    expect(messagesCalls()[0].body).toEqual({ ...REQUEST, model: UPSTREAM_MODEL, stream: true });
    expect(messagesCalls()[0].headers['anthropic-beta']).toBe('prompt-caching-2024-07-31,interleaved-thinking-2025-05-14');
    const shape = events.map((event) => (event.type === 'content_block_delta' ? `${event.index}:${event.delta.type}` : event.type));
    expect(shape.filter((type) => type !== 'ping')).toEqual([
      'message_start',
      'content_block_start',
      ...'The first sentence says green.'.split(/(?<= )/).map(() => '0:thinking_delta'),
      '0:signature_delta',
      'content_block_stop',
      'content_block_start',
      '1:text_delta',
      '1:citations_delta',
      'content_block_stop',
      'message_delta',
      'message_stop',
    ]);
    expect(events[0].message.usage).toMatchObject({ input_tokens: 50, cache_creation_input_tokens: 200, cache_read_input_tokens: 1000 });
    expect(events[0].message.model).toBe('claude-haiku-4-5');
    expect(final.content).toEqual([
      { type: 'thinking', thinking: 'The first sentence says green.', signature: 'EqQBCkYIARgCIkDsig-two' },
      { type: 'text', text: 'Green.', citations: [CITATION] },
    ]);
    const delta = events.find((event) => event.type === 'message_delta')!;
    expect(delta.usage).toMatchObject({ output_tokens: 30 });
    expect(delta.x_service).toMatchObject({ cost_millicents: COST, provider: 'anthropic' });
    expect(await recordsOf(workspace.id)).toEqual([{ source: 'messages', status: 'success', model: 'claude-haiku-4-5', input: 1250, cached: 1000, output: 30, charged: COST }]);
    await expectLedgerEqualsBalance(workspace.id);
  });

  it("counts tokens with Anthropic's count_tokens on an Anthropic deployment, and with ours when it fails", async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    anthropic.setCountTokens({ input_tokens: 4242 });
    const { max_tokens: _max, metadata: _metadata, ...counted } = REQUEST;
    expect(await clientOf(workspace).messages.countTokens(counted)).toEqual({ input_tokens: 4242 });
    const [call] = anthropic.requests;
    expect(call.path).toBe('/v1/messages/count_tokens');
    expect(call.headers['x-api-key']).toBe('sk-ant-deployment');
    expect(call.body).toEqual({ ...counted, model: UPSTREAM_MODEL });

    anthropic.setCountTokens(httpError(500));
    const ours = await clientOf(workspace).messages.countTokens(counted);
    expect(ours.input_tokens).toBeGreaterThan(10);
    expect(ours.input_tokens).not.toBe(4242);
    anthropic.setCountTokens(undefined);
    expect(await recordsOf(workspace.id)).toEqual([]);
  });

  it('translates a system message inside messages (Anthropic has none) rather than forwarding it', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    anthropic.script({ kind: 'reply', content: [{ type: 'text', text: 'Fine.' }] });
    const message = await clientOf(workspace).messages.create({
      model: 'claude-haiku-4-5',
      max_tokens: 100,
      messages: [{ role: 'user', content: 'Hi' }, { role: 'system', content: 'Be brief.' } as never, { role: 'assistant', content: 'Hello' }, { role: 'user', content: 'Bye' }],
    });
    expect(message.content).toEqual([{ type: 'text', text: 'Fine.' }]);
    expect(messagesCalls()[0].body.system).toBe('Be brief.');
  });

  it('fails over to an OpenAI deployment: translated as before, charged once', async () => {
    const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
    anthropic.script(httpError(500), httpError(500));
    openai.script(
      { kind: 'text', text: 'Green, says the document.', usage: { prompt_tokens: 120, completion_tokens: 8 } },
      { kind: 'text', text: 'Green, says the document.', usage: { prompt_tokens: 120, completion_tokens: 8 } },
    );
    const before = openai.requests.length;

    const message = (await clientOf(workspace).messages.create({ ...REQUEST, model: 'claude-mixed' })) as WithService<Anthropic.Message>;
    expect(message.content).toEqual([{ type: 'text', text: 'Green, says the document.' }]);
    expect(message.x_service).toMatchObject({ provider: 'openai', deployment: 'openai', attempts: 2 });
    const translated = openai.requests[before].body as { model: string; messages: Array<{ role: string; content: unknown }> };
    expect(translated.model).toBe('gpt-4o-mini');
    expect(translated.messages[0]).toEqual({ role: 'system', content: 'You answer from the documents only.' });
    expect(translated.messages.map((m) => m.role)).toEqual(['system', 'user', 'assistant', 'user']);
    expect(JSON.stringify(translated)).not.toMatch(/signature|redacted_thinking|cache_control/);

    const stream = clientOf(workspace).messages.stream({ ...REQUEST, model: 'claude-mixed' });
    const final = await stream.finalMessage();
    expect(final.content).toEqual([{ type: 'text', text: 'Green, says the document.' }]);
    expect(messagesCalls()).toHaveLength(2);

    const records = await recordsOf(workspace.id);
    expect(records).toHaveLength(2);
    const oneCall = (120 * PRICES.input_price + 8 * PRICES.output_price) / 1_000_000;
    expect(records.map((r) => [r.status, r.input, r.output, r.charged])).toEqual([
      ['success', 120, 8, oneCall],
      ['success', 120, 8, oneCall],
    ]);
    expect((await expectLedgerEqualsBalance(workspace.id)).balance).toBe(1_000_000 - 2 * oneCall);
  });
});
