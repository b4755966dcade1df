import OpenAI from 'openai';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { decodeVector } from '../src/assistants/documents/dense-search';
import { EMBEDDING_BATCH } from '../src/assistants/documents/document-embeddings';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { documentView, DocumentsService } from '../src/assistants/documents/documents.service';
import { ProvidersService } from '../src/providers/providers.service';
import { countTextTokens } from '../src/providers/tokens';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { fakeGeminiEmbedding, FakeGemini, GEMINI_EMBED_BATCH_LIMIT, startFakeGemini } from './fakes/fake-gemini';
import { fakeEmbedding, fakeEmbeddingTokens, FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { waitFor } from './support/wait-for';
import { walletInvariants } from './support/wallet-invariants';

type XService = { cost_millicents: number; provider: string | null; deployment: string | null; attempts: number };
type Embeddings = OpenAI.CreateEmbeddingResponse & { x_service: XService };

/** Millicents per million input tokens: OpenAI's list prices of the two models, and the simulated one's. */
const SMALL_PRICE = 2_000;
const LARGE_PRICE = 13_000;
const SIM_PRICE = 1_000;
const GEMINI_PRICE = 15_000;
const LOCAL_PRICE = 100;

function catalog(models: object[]): string {
  const file = path.join(mkdtempSync(path.join(tmpdir(), 'embeddings-catalog-')), 'models.json');
  writeFileSync(file, JSON.stringify({ models }));
  return file;
}

function deployment(label: string, fake: FakeOpenAi) {
  process.env[`EMBEDDINGS_TEST_KEY_${label.toUpperCase()}`] = `sk-${label}`;
  return { label, provider: 'openai', base_url: fake.url, api_key_env: `EMBEDDINGS_TEST_KEY_${label.toUpperCase()}` };
}

const embeddingCalls = (fake: FakeOpenAi) => fake.requests.filter((r) => r.path.endsWith('/embeddings'));

describe('POST /v1/embeddings', () => {
  let upstream: FakeOpenAi;
  let failing: FakeOpenAi;
  let gemini: FakeGemini;
  let local: FakeOpenAi;
  /** The only deployment of `doc-embed`, the embedding model of the documents' tests. */
  let docsUpstream: FakeOpenAi;
  let t: TestApp;
  let db: DataSource;
  let workspace: TestWorkspace;

  const embed = (body: Partial<OpenAI.EmbeddingCreateParams>, client = workspace.client) =>
    client.embeddings.create({ model: 'text-embedding-3-small', input: 'Hello', ...body } as OpenAI.EmbeddingCreateParams) as unknown as Promise<Embeddings>;
  /** The bare HTTP answer, for what the SDK would hide (the wire format of `embedding`, the error body). */
  const post = async (body: unknown, apiKey = workspace.apiKey, headers: Record<string, string> = {}) => {
    const response = await fetch(`${t.baseUrl}/v1/embeddings`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${apiKey}`, 'Content-Type': 'application/json', ...headers },
      body: JSON.stringify(body),
    });
    return { status: response.status, headers: response.headers, body: (await response.json()) as Record<string, any> };
  };

  beforeAll(async () => {
    [upstream, failing, gemini, local, docsUpstream] = await Promise.all([
      startFakeOpenAi(),
      startFakeOpenAi(),
      startFakeGemini({ apiKey: 'gemini-key' }),
      startFakeOpenAi({ localEmbeddings: { dimensions: 384 } }),
      startFakeOpenAi(),
    ]);
    process.env.EMBEDDINGS_TEST_KEY_GEMINI = 'gemini-key';
    failing.setDefault({ kind: 'http_error', status: 500, body: { error: { message: 'boom', type: 'server_error' } } });
    const embedding = { provider: 'openai', kind: 'embedding', adjustable_dimensions: true, context_length: 8_192, output_price: 0 };
    t = await startTestApp({
      config: {
        llmSimulator: 'off',
        modelCatalogFile: catalog([
          { ...embedding, id: 'text-embedding-3-small', dimensions: 1536, vocabulary_size: 100_277, input_price: SMALL_PRICE, deployments: [deployment('primary', upstream)] },
          {
            ...embedding,
            id: 'text-embedding-3-large',
            dimensions: 3072,
            input_price: LARGE_PRICE,
            deployments: [deployment('failing', failing), deployment('healthy', upstream)],
          },
          {
            id: 'gemini-embedding-001',
            provider: 'google',
            kind: 'embedding',
            dimensions: 3072,
            adjustable_dimensions: true,
            max_input_tokens: 2_048,
            input_price: GEMINI_PRICE,
            output_price: 0,
            deployments: [{ label: 'gemini', provider: 'google', base_url: gemini.url, api_key_env: 'EMBEDDINGS_TEST_KEY_GEMINI' }],
          },
          // A local OpenAI-compatible text-embeddings server: floats only, no usage, its own model name.
          {
            id: 'bge-small',
            provider: 'openai',
            kind: 'embedding',
            dimensions: 384,
            max_input_tokens: 512,
            input_price: LOCAL_PRICE,
            output_price: 0,
            deployments: [{ ...deployment('local', local), upstream_model: 'BAAI/bge-small-en-v1.5' }],
          },
          { ...embedding, id: 'doc-embed', dimensions: 1536, input_price: SMALL_PRICE, deployments: [deployment('docs', docsUpstream)] },
          // Its only deployment fails; its fallback model answers (in another vector space).
          { ...embedding, id: 'fragile-embed', dimensions: 1536, input_price: SMALL_PRICE, deployments: [deployment('fragile', failing)], fallbacks: ['doc-embed'] },
          // Takes fewer tokens than a chunk has.
          { ...embedding, id: 'tiny-embed', dimensions: 1536, max_input_tokens: 64, input_price: SMALL_PRICE, deployments: [deployment('docs', docsUpstream)] },
          { id: 'sim-embed', provider: 'simulator', kind: 'embedding', dimensions: 256, context_length: 8_192, input_price: SIM_PRICE, output_price: 0 },
          { id: 'gpt-4o-mini', provider: 'simulator', context_length: 128_000, max_output_tokens: 16_384, input_price: 15_000, output_price: 60_000 },
        ]),
      },
    });
    db = t.app.get(DataSource);
    workspace = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 10_000_000 });
  });
  afterAll(async () => {
    await t?.close();
    await Promise.all([upstream?.close(), failing?.close(), gemini?.close(), local?.close(), docsUpstream?.close()]);
  });

  it("gives the same vectors through the SDK's default (base64) and with float, of the model's size and of `dimensions`", async () => {
    const input = 'The food was delicious and the waiter was friendly.';
    const viaDefault = await embed({ input });
    const viaFloat = await embed({ input, encoding_format: 'float' });
    expect(viaDefault.data[0].embedding).toHaveLength(1536);
    expect(viaDefault.data[0].embedding).toEqual(viaFloat.data[0].embedding);
    // Exactly the upstream's float32 values.
    expect(viaFloat.data[0].embedding).toEqual(Array.from(fakeEmbedding(input, 1536)));
    expect(viaDefault).toMatchObject({ object: 'list', model: 'text-embedding-3-small', data: [{ object: 'embedding', index: 0 }] });

    // On the wire, base64 is the little-endian float32 bytes (a quarter of the width if read as anything else).
    const raw = await post({ model: 'text-embedding-3-small', input, encoding_format: 'base64' });
    expect(typeof raw.body.data[0].embedding).toBe('string');
    const bytes = Buffer.from(raw.body.data[0].embedding as string, 'base64');
    expect(bytes.length).toBe(1536 * 4);
    expect(Array.from({ length: 1536 }, (_, i) => bytes.readFloatLE(i * 4))).toEqual(viaFloat.data[0].embedding);

    const short = await embed({ input, dimensions: 256 });
    const shortFloat = await embed({ input, dimensions: 256, encoding_format: 'float' });
    expect(short.data[0].embedding).toHaveLength(256);
    expect(short.data[0].embedding).toEqual(shortFloat.data[0].embedding);
    expect(embeddingCalls(upstream).at(-1)!.body).toMatchObject({ model: 'text-embedding-3-small', dimensions: 256 });
  });

  it('answers alike on the direct route and through Nest (a request with an Idempotency-Key), refusals too', async () => {
    const body = { model: 'text-embedding-3-small', input: ['same', 'answer'], encoding_format: 'base64' };
    const direct = await post(body);
    const viaNest = await post(body, workspace.apiKey, { 'Idempotency-Key': `embeddings-${Date.now()}` });
    expect(viaNest.body).toEqual(direct.body);
    for (const answer of [direct, viaNest]) {
      expect(answer.status).toBe(200);
      expect(answer.headers.get('content-type')).toBe('application/json; charset=utf-8');
      expect(answer.headers.get('x-ratelimit-limit')).not.toBeNull();
    }
    // Express's ETag, a hash of the whole answer, is what tells Nest's answer from the direct route's.
    expect({ direct: direct.headers.has('etag'), nest: viaNest.headers.has('etag') }).toEqual({ direct: false, nest: true });
    const refusals = await Promise.all([post({ ...body, dimensions: 0 }), post({ ...body, dimensions: 0 }, workspace.apiKey, { 'Idempotency-Key': `bad-${Date.now()}` })]);
    expect(refusals.map((r) => [r.status, r.body.error.param])).toEqual([
      [400, 'dimensions'],
      [400, 'dimensions'],
    ]);
    await t.quiet(workspace.id);
  });

  it('takes every input form: a string, strings, a token array, token arrays; one vector per input, in order', async () => {
    const forms: Array<[OpenAI.EmbeddingCreateParams['input'], Array<string | number[]>]> = [
      ['one text', ['one text']],
      [['first', 'second', 'third'], ['first', 'second', 'third']],
      [[9906, 1917, 0], [[9906, 1917, 0]]],
      [[[9906], [1917, 0, 42]], [[9906], [1917, 0, 42]]],
      // cl100k_base's last id, and the most tokens one input may have.
      [[100_276, 0], [[100_276, 0]]],
      [Array.from({ length: 8_192 }, () => 7), [Array.from({ length: 8_192 }, () => 7)]],
    ];
    for (const [input, inputs] of forms) {
      const answer = await embed({ input });
      expect(answer.data.map((d) => d.index)).toEqual(inputs.map((_, i) => i));
      answer.data.forEach((d, i) => expect(d.embedding).toEqual(Array.from(fakeEmbedding(inputs[i], 1536))));
      expect(answer.usage).toEqual({ prompt_tokens: inputs.reduce((sum: number, item) => sum + fakeEmbeddingTokens(item), 0), total_tokens: answer.usage.prompt_tokens });
      expect(embeddingCalls(upstream).at(-1)!.body.input).toEqual(inputs);
    }
    // OpenAI's most inputs in one request (short vectors: the fake hashes every value).
    const passages = Array.from({ length: 2_048 }, (_, i) => `passage ${i}`);
    const all = await embed({ input: passages, dimensions: 4 });
    expect(all.data.map((d) => d.embedding)).toEqual(passages.map((p) => Array.from(fakeEmbedding(p, 4))));
  });

  it('refuses bad requests with a 400 naming the field, never a 500', async () => {
    const cases: Array<[unknown, string]> = [
      [{ model: 'text-embedding-3-small', input: '' }, 'input'],
      [{ model: 'text-embedding-3-small', input: [] }, 'input'],
      [{ model: 'text-embedding-3-small', input: ['a', 1] }, 'input'],
      [{ model: 'text-embedding-3-small', input: Array.from({ length: 2049 }, () => 'a') }, 'input'],
      [{ model: 'text-embedding-3-small', input: 'word '.repeat(9_000) }, 'input'],
      [{ model: 'text-embedding-3-small', input: Array.from({ length: 40 }, () => 'word '.repeat(8_000)) }, 'input'],
      // A token array: 8192 tokens at most, ids of cl100k_base only, whole numbers >= 0.
      [{ model: 'text-embedding-3-small', input: Array.from({ length: 8_193 }, () => 1) }, 'input'],
      [{ model: 'text-embedding-3-small', input: Array.from({ length: 37 }, () => Array.from({ length: 8_192 }, () => 1)) }, 'input'],
      [{ model: 'text-embedding-3-small', input: [100_277] }, 'input'],
      [{ model: 'text-embedding-3-small', input: [[1], [5, 200_000]] }, 'input'],
      [{ model: 'text-embedding-3-small', input: [[1, -1]] }, 'input'],
      [{ model: 'text-embedding-3-small', input: [[1, 2.5]] }, 'input'],
      [{ model: 'text-embedding-3-small', input: 'x', dimensions: 1537 }, 'dimensions'],
      [{ model: 'text-embedding-3-small', input: 'x', dimensions: 0 }, 'dimensions'],
      [{ model: 'sim-embed', input: 'x', dimensions: 128 }, 'dimensions'],
      [{ model: 'text-embedding-3-small', input: 'x', encoding_format: 'int8' }, 'encoding_format'],
      [{ input: 'x' }, 'model'],
    ];
    for (const [body, param] of cases) {
      const answer = await post(body);
      expect({ status: answer.status, param: answer.body.error?.param }).toEqual({ status: 400, param });
    }
    await t.quiet(workspace.id);
  });

  it('charges usage.prompt_tokens times the input price, once, with one usage record each; nothing stays held', async () => {
    const payer = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
    const before = await walletInvariants(db, payer.id);
    const answers: Embeddings[] = [];
    // 4000 characters: 1000 tokens as the fake counts them, 2 millicents at $0.02 per million.
    for (const input of ['x'.repeat(4_000), ['y'.repeat(4_000), 'z'.repeat(2_000)], 'short text']) {
      answers.push(await embed({ input: input as string }, payer.client));
    }
    for (const answer of answers) {
      expect(answer.x_service).toMatchObject({ provider: 'openai', deployment: 'primary', attempts: 1 });
      expect(answer.x_service.cost_millicents).toBe((answer.usage.prompt_tokens * SMALL_PRICE) / 1_000_000);
    }
    expect(answers.map((a) => a.usage.prompt_tokens)).toEqual([1_000, 1_500, 3]);
    await t.quiet(payer.id);
    const after = await walletInvariants(db, payer.id);
    expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
    // 2 + 3 + 0.006 millicents: whole millicents are charged, the remainder carried.
    expect(before.balance - after.balance).toBe(5);
    const records = (await db.query(
      `SELECT source, model, status, input_tokens::int AS input, output_tokens::int AS output, total_cost_millicents::float AS cost, deployment
         FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`,
      [payer.id],
    )) as unknown[];
    expect(records).toEqual(
      answers.map((a) => ({ source: 'embeddings', model: 'text-embedding-3-small', status: 'success', input: a.usage.prompt_tokens, output: 0, cost: a.x_service.cost_millicents, deployment: 'primary' })),
    );
    // /v1/usage groups them under their model.
    const summary = await payer.client.get<{ data: { by_model: { model: string; requests: number; cost_millicents: number }[] } }>('/usage');
    expect(summary.data.by_model).toEqual([{ model: 'text-embedding-3-small', requests: 3, cost_millicents: 5.006 }]);
  });

  it('refuses with 402 what the wallet cannot cover, holding and charging nothing', async () => {
    const poor = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 0 });
    const calls = embeddingCalls(upstream).length;
    await expect(embed({ input: 'Hello' }, poor.client)).rejects.toMatchObject({ status: 402, code: 'insufficient_balance' });
    expect(embeddingCalls(upstream)).toHaveLength(calls);
    await t.quiet(poor.id);
    expect(await walletInvariants(db, poor.id)).toMatchObject({ balance: 0, ledger: 0, reserved: 0, holds: 0 });
  });

  it("refuses a model the key may not use with 403, and runs one it may", async () => {
    const restricted = await t.createWorkspace({ tier: 'enterprise' });
    const keys = t.app.get(ApiKeysService);
    await keys.setLimits(restricted.apiKeyId, { allowedModels: ['gpt-4o-mini'] });
    const calls = embeddingCalls(upstream).length;
    await expect(embed({}, restricted.client)).rejects.toMatchObject({ status: 403, code: 'model_not_allowed' });
    expect(embeddingCalls(upstream)).toHaveLength(calls);
    await keys.setLimits(restricted.apiKeyId, { allowedModels: ['text-embedding-3-small'] });
    await expect(embed({}, restricted.client)).resolves.toMatchObject({ model: 'text-embedding-3-small' });
  });

  it('fails over from a deployment answering 500 to a healthy one, charges the answer only, and cools the failing one down', async () => {
    const failingState = () => t.app.get(ProvidersService).deployments().find((d) => d.model === 'text-embedding-3-large' && d.label === 'failing');
    const answers: Embeddings[] = [];
    // Until the failing deployment is in cooldown (3 failures; the router draws the order by weight).
    for (let i = 0; i < 60 && failingState()?.state !== 'cooldown'; i++) answers.push(await embed({ model: 'text-embedding-3-large', input: 'failover' }));
    expect(failingState()).toMatchObject({ state: 'cooldown' });
    expect(embeddingCalls(failing).length).toBeGreaterThanOrEqual(3);
    for (const answer of answers) {
      expect(answer.data[0].embedding).toEqual(Array.from(fakeEmbedding('failover', 3072)));
      expect(answer.x_service).toMatchObject({ provider: 'openai', deployment: 'healthy', cost_millicents: (answer.usage.prompt_tokens * LARGE_PRICE) / 1e6 });
    }
    expect(answers.some((a) => a.x_service.attempts > 1)).toBe(true);
    // In cooldown it gets nothing: every request goes to the healthy one at its first attempt.
    const calls = embeddingCalls(failing).length;
    for (let i = 0; i < 10; i++) {
      await expect(embed({ model: 'text-embedding-3-large', input: 'cooled' })).resolves.toMatchObject({ x_service: { deployment: 'healthy', attempts: 1 } });
    }
    expect(embeddingCalls(failing)).toHaveLength(calls);
  });

  it('answers 429 with Retry-After and X-RateLimit headers at the tier limit', async () => {
    const free = await t.createWorkspace({ tier: 'free' });
    for (let i = 1; i <= 5; i++) {
      const { response } = await free.client.embeddings.create({ model: 'text-embedding-3-small', input: 'Hello' }).withResponse();
      expect(response.headers.get('x-ratelimit-limit')).toBe('5');
      expect(response.headers.get('x-ratelimit-remaining')).toBe(String(5 - i));
    }
    const error = await embed({}, free.client).catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.RateLimitError);
    const limited = error as InstanceType<typeof OpenAI.RateLimitError>;
    expect(Number(limited.headers?.get('retry-after'))).toBeGreaterThan(0);
    expect(limited.headers?.get('x-ratelimit-remaining')).toBe('0');
    await t.quiet(free.id);
    const [refused] = await db.query(`SELECT count(*)::int AS n FROM usage_records WHERE workspace_id = $1 AND source = 'embeddings' AND error_code = 'rate_limit_exceeded'`, [free.id]);
    expect(refused.n).toBe(1);
  });

  it('embeds through a Google deployment: base64 and float alike, dimensions as unit vectors, 2048 inputs in batches of 100', async () => {
    const viaDefault = await embed({ model: 'gemini-embedding-001', input: 'Returns are accepted within 30 days.' });
    const viaFloat = await embed({ model: 'gemini-embedding-001', input: 'Returns are accepted within 30 days.', encoding_format: 'float' });
    expect(viaDefault.data[0].embedding).toEqual(viaFloat.data[0].embedding);
    expect(viaFloat.data[0].embedding).toEqual(Array.from(fakeGeminiEmbedding('Returns are accepted within 30 days.')));
    expect(viaFloat.x_service).toMatchObject({ provider: 'google', deployment: 'gemini', cost_millicents: (viaFloat.usage.prompt_tokens * GEMINI_PRICE) / 1e6 });
    expect(viaFloat.usage.prompt_tokens).toBeGreaterThan(0);
    const call = gemini.requests.at(-1)!;
    expect({ model: call.model, action: call.action, apiKey: call.apiKey }).toEqual({ model: 'gemini-embedding-001', action: 'batchEmbedContents', apiKey: 'gemini-key' });
    expect(call.body).toEqual({ requests: [{ model: 'models/gemini-embedding-001', content: { role: 'user', parts: [{ text: 'Returns are accepted within 30 days.' }] } }] });

    // Gemini leaves a shortened vector as its first values; the answer is of unit length, as OpenAI's are.
    const short = await embed({ model: 'gemini-embedding-001', input: ['alpha', 'beta'], dimensions: 256 });
    const shortFloat = await embed({ model: 'gemini-embedding-001', input: ['alpha', 'beta'], dimensions: 256, encoding_format: 'float' });
    expect(short.data.map((d) => d.embedding)).toEqual(shortFloat.data.map((d) => d.embedding));
    expect(gemini.requests.at(-1)!.body!.requests).toEqual([
      expect.objectContaining({ outputDimensionality: 256, content: { role: 'user', parts: [{ text: 'alpha' }] } }),
      expect.objectContaining({ outputDimensionality: 256, content: { role: 'user', parts: [{ text: 'beta' }] } }),
    ]);
    shortFloat.data.forEach((d, i) => {
      const prefix = fakeGeminiEmbedding(['alpha', 'beta'][i], 256);
      expect(d.embedding).toHaveLength(256);
      expect(Math.hypot(...d.embedding)).toBeCloseTo(1, 6);
      expect(Math.hypot(...prefix)).toBeLessThan(0.9);
      const scale = Math.hypot(...prefix);
      d.embedding.forEach((value, k) => expect(value).toBeCloseTo(prefix[k] / scale, 6));
    });

    // OpenAI's 2048 inputs are 21 calls of at most 100, answered in input order.
    const before = gemini.requests.length;
    const inputs = Array.from({ length: 2_048 }, (_, i) => `document ${i}`);
    const many = await embed({ model: 'gemini-embedding-001', input: inputs, encoding_format: 'float', dimensions: 8 });
    const batches = gemini.requests.slice(before);
    expect(batches.map((r) => (r.body!.requests as unknown[]).length)).toEqual([...Array.from({ length: 20 }, () => GEMINI_EMBED_BATCH_LIMIT), 48]);
    expect(many.data).toHaveLength(2_048);
    const alone = await embed({ model: 'gemini-embedding-001', input: 'document 1234', dimensions: 8, encoding_format: 'float' });
    expect(many.data[1_234]).toEqual({ object: 'embedding', index: 1_234, embedding: alone.data[0].embedding });

    // Token arrays are OpenAI's tokenizer's: a 400 naming input, before anything is held.
    await expect(embed({ model: 'gemini-embedding-001', input: [[1, 2, 3]] })).rejects.toMatchObject({ status: 400, param: 'input' });
  });

  it('embeds through an OpenAI-compatible local server (base_url) that answers floats and no usage, billing our count', async () => {
    const input = ['Returns are accepted within 30 days.', 'Refunds go back to the card used.'];
    const viaDefault = await embed({ model: 'bge-small', input });
    const viaFloat = await embed({ model: 'bge-small', input, encoding_format: 'float' });
    expect(viaDefault.data.map((d) => d.embedding)).toEqual(input.map((text) => Array.from(fakeEmbedding(text, 384))));
    expect(viaFloat.data.map((d) => d.embedding)).toEqual(viaDefault.data.map((d) => d.embedding));
    const call = embeddingCalls(local).at(-1)!;
    expect(call.body).toMatchObject({ model: 'BAAI/bge-small-en-v1.5', input });
    expect(call.headers.authorization).toBe('Bearer sk-local');
    // Our tokenizer's count (the server said none): 8 and 9 tokens with o200k.
    expect(viaFloat.usage).toEqual({ prompt_tokens: 17, total_tokens: 17 });
    expect(viaFloat.x_service).toMatchObject({ provider: 'openai', deployment: 'local', cost_millicents: (17 * LOCAL_PRICE) / 1e6 });
    await expect(embed({ model: 'bge-small', input: 'word '.repeat(600) })).rejects.toMatchObject({ status: 400, param: 'input', code: 'input_too_long' });
  });

  it("answers deterministic unit vectors of the model's size from the simulator", async () => {
    const first = await embed({ model: 'sim-embed', input: ['alpha', 'beta'] });
    const again = await embed({ model: 'sim-embed', input: ['beta'], encoding_format: 'float' });
    expect(first.data.map((d) => d.embedding.length)).toEqual([256, 256]);
    expect(again.data[0].embedding).toEqual(first.data[1].embedding);
    expect(first.data[0].embedding).not.toEqual(first.data[1].embedding);
    const norm = Math.hypot(...first.data[0].embedding);
    expect(norm).toBeCloseTo(1, 5);
    expect(first.x_service).toMatchObject({ provider: 'simulator', deployment: 'simulator' });
    expect(first.x_service.cost_millicents).toBe((first.usage.prompt_tokens * SIM_PRICE) / 1e6);
  });

  it('refuses a chat model here and an embedding model on the chat paths, with a 400 naming model', async () => {
    await expect(
      workspace.client.chat.completions.create({ model: 'text-embedding-3-small', messages: [{ role: 'user', content: 'Hi' }] }),
    ).rejects.toMatchObject({ status: 400, param: 'model', code: 'wrong_model_kind' });
    await expect(embed({ model: 'gpt-4o-mini' })).rejects.toMatchObject({ status: 400, param: 'model', code: 'wrong_model_kind' });
    await expect(workspace.client.responses.create({ model: 'text-embedding-3-small', input: 'Hi' })).rejects.toMatchObject({ status: 400, param: 'model' });
    const models = await workspace.client.models.list();
    const kinds = Object.fromEntries(models.data.map((m) => [m.id, (m as unknown as { kind: string }).kind]));
    expect(kinds).toEqual({
      'text-embedding-3-small': 'embedding',
      'text-embedding-3-large': 'embedding',
      'gemini-embedding-001': 'embedding',
      'bge-small': 'embedding',
      'doc-embed': 'embedding',
      'fragile-embed': 'embedding',
      'tiny-embed': 'embedding',
      'sim-embed': 'embedding',
      'gpt-4o-mini': 'chat',
    });
    expect(models.data.find((m) => m.id === 'sim-embed')).toMatchObject({ embedding: { dimensions: 256, adjustable: false } });
  });
  describe("chunk embeddings of assistants' documents", () => {
    /** Distinct sentences, enough for `chunks` chunks of the default size (400 tokens). */
    const longText = (chunks: number, topic: string) =>
      Array.from({ length: chunks * 22 }, (_, i) => `Paragraph ${i} of the ${topic} manual says that step ${i * 7} follows step ${i * 3} in section ${i % 13}.`).join(
        '\n\n',
      );

    async function documentOf(workspace: TestWorkspace, text: string, embeddingModel: string | null = 'doc-embed') {
      const assistant = await t.app.get(AssistantsService).create(workspace.id, { name: `Docs ${Math.random()}`, model: 'gpt-4o-mini', embeddingModel });
      const document = await t.app.get(DocumentsService).enqueue({ workspaceId: workspace.id, assistantId: assistant.id, fileName: 'manual.txt', data: Buffer.from(text) });
      return { assistant, document };
    }
    const chunksOf = (documentId: string) =>
      db.query(`SELECT position, content, embedding, embedding_model FROM document_chunks WHERE document_id = $1 ORDER BY position`, [documentId]) as Promise<
        Array<{ position: number; content: string; embedding: Buffer | null; embedding_model: string | null }>
      >;
    const documentRecords = (workspaceId: string) =>
      db.query(
        `SELECT request_id, model, status, input_tokens::int AS input, total_cost_millicents::float AS cost, charged_millicents::int AS charged
           FROM usage_records WHERE workspace_id = $1 AND source = 'document_embeddings' ORDER BY request_id`,
        [workspaceId],
      ) as Promise<Array<{ request_id: string; model: string; status: string; input: number; cost: number; charged: number }>>;
    /** Each chunk's vector is the fake's for its text, and every chunk's text went upstream exactly `times` in all. */
    async function expectEmbeddedOnce(documentId: string, sentSince: number) {
      const chunks = await chunksOf(documentId);
      for (const chunk of chunks) {
        expect(chunk.embedding_model).toBe('doc-embed');
        expect(decodeVector(chunk.embedding!)).toEqual(fakeEmbedding(chunk.content, 1536));
      }
      const sent = embeddingCalls(docsUpstream).slice(sentSince).flatMap((call) => call.body.input as string[]);
      return { chunks, sent };
    }
    /** What the chunks cost as the fake counts their tokens, in millicents (fractional), and the whole millicents charged for it. */
    const costOf = (contents: string[]) => {
      const tokens = contents.reduce((sum, content) => sum + fakeEmbeddingTokens(content), 0);
      return { tokens, millicents: (tokens * SMALL_PRICE) / 1e6, charged: Math.floor((tokens * SMALL_PRICE) / 1e6) };
    };

    it('embeds each chunk once when the document is read: charged its tokens times the price, one usage record a batch', async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const before = await walletInvariants(db, owner.id);
      const sentSince = embeddingCalls(docsUpstream).length;
      const { document } = await documentOf(owner, longText(EMBEDDING_BATCH + 6, 'boiler'));
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();

      const { chunks, sent } = await expectEmbeddedOnce(document.id, sentSince);
      expect(chunks.length).toBeGreaterThan(EMBEDDING_BATCH);
      expect(sent).toEqual(chunks.map((chunk) => chunk.content));
      expect(embeddingCalls(docsUpstream).length - sentSince).toBe(Math.ceil(chunks.length / EMBEDDING_BATCH));
      const [state] = await db.query(`SELECT status, embeddings_due FROM documents WHERE id = $1`, [document.id]);
      expect(state).toEqual({ status: 'ready', embeddings_due: false });

      const cost = costOf(chunks.map((chunk) => chunk.content));
      const records = await documentRecords(owner.id);
      expect(records).toHaveLength(Math.ceil(chunks.length / EMBEDDING_BATCH));
      expect(records.every((r) => r.model === 'doc-embed' && r.status === 'success')).toBe(true);
      expect(records.reduce((sum, r) => sum + r.input, 0)).toBe(cost.tokens);
      expect(records.reduce((sum, r) => sum + r.cost, 0)).toBeCloseTo(cost.millicents, 6);
      const after = await walletInvariants(db, owner.id);
      expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
      expect(before.balance - after.balance).toBe(cost.charged);

      // Nothing is due any more: a sweep calls nobody and charges nothing.
      await ingestion.sweep();
      expect(embeddingCalls(docsUpstream).length - sentSince).toBe(records.length);
      expect((await walletInvariants(db, owner.id)).balance).toBe(after.balance);
    });

    it('a failed embeddings call leaves the document ready for lexical search, its embeddings pending; a sweep completes them, charged once', async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const before = await walletInvariants(db, owner.id);
      const sentSince = embeddingCalls(docsUpstream).length;
      docsUpstream.respondWith(() => ({ kind: 'http_error', status: 503 }));
      const { assistant, document } = await documentOf(owner, longText(3, 'kettle'));
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();
      docsUpstream.respondWith(null);

      expect(embeddingCalls(docsUpstream).length).toBeGreaterThan(sentSince);
      const [pending] = await db.query(`SELECT status, embeddings_due FROM documents WHERE id = $1`, [document.id]);
      expect(pending).toEqual({ status: 'ready', embeddings_due: true });
      expect(documentView(await t.app.get(DocumentsService).getInWorkspace(owner.id, document.id))).toMatchObject({ status: 'ready', embeddings_pending: true });
      expect((await chunksOf(document.id)).every((chunk) => chunk.embedding === null)).toBe(true);
      expect(await documentRecords(owner.id)).toEqual([]);
      expect(await walletInvariants(db, owner.id)).toMatchObject({ balance: before.balance, reserved: 0, holds: 0 });
      // Lexical search finds it meanwhile (the query's embedding fails too: the dense leg is left out).
      docsUpstream.respondWith(() => ({ kind: 'http_error', status: 503 }));
      const found = await t.app.get(DocumentsService).search(assistant.id, 'kettle manual section', { maxResults: 3 });
      docsUpstream.respondWith(null);
      expect(found.length).toBeGreaterThan(0);

      // The lease the failed reader left runs out; the next sweep embeds the chunks.
      await db.query(`UPDATE documents SET embedding_lease_until = now() - interval '1 second' WHERE id = $1`, [document.id]);
      const retriedSince = embeddingCalls(docsUpstream).length;
      await ingestion.sweep();
      const { chunks, sent } = await expectEmbeddedOnce(document.id, retriedSince);
      expect(documentView(await t.app.get(DocumentsService).getInWorkspace(owner.id, document.id)).embeddings_pending).toBe(false);
      expect(sent).toEqual(chunks.map((chunk) => chunk.content));
      const cost = costOf(sent);
      expect((await documentRecords(owner.id)).reduce((sum, r) => sum + r.input, 0)).toBe(cost.tokens);
      const after = await walletInvariants(db, owner.id);
      expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
      expect(before.balance - after.balance).toBe(cost.charged);
    });

    it('a reader that stopped mid-way loses nothing: the sweep embeds only what is missing, and a batch settled twice is charged once', async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const before = await walletInvariants(db, owner.id);
      const sentSince = embeddingCalls(docsUpstream).length;
      // The first batch answers at once; the second one's answer comes late, after the reader "died".
      docsUpstream.script({ kind: 'text', text: '' }, { kind: 'text', text: '', delayMs: 3_000 });
      const { document } = await documentOf(owner, longText(EMBEDDING_BATCH + 6, 'pump'));
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await waitFor(() => embeddingCalls(docsUpstream).length === sentSince + 2);
      const [firstBatch] = await db.query(`SELECT count(*)::int AS n FROM document_chunks WHERE document_id = $1 AND embedding IS NOT NULL`, [document.id]);
      expect(firstBatch.n).toBe(EMBEDDING_BATCH);

      // Its lease runs out (as when its process is killed): a sweep takes the document up.
      await db.query(`UPDATE documents SET embedding_lease_until = now() - interval '1 second' WHERE id = $1`, [document.id]);
      await ingestion.sweep();
      const calls = embeddingCalls(docsUpstream).slice(sentSince).map((call) => call.body.input as string[]);
      expect(calls).toHaveLength(3);
      // The sweep asked for the second batch only; the first was neither sent nor charged again.
      expect(calls[2]).toEqual(calls[1]);
      // The late answer of the stopped reader settles too: the batch's key was settled, so it changes nothing.
      await ingestion.idle();

      const { chunks } = await expectEmbeddedOnce(document.id, sentSince);
      expect([...calls[0], ...calls[1]]).toEqual(chunks.map((chunk) => chunk.content));
      const records = await documentRecords(owner.id);
      expect(records).toHaveLength(2);
      const cost = costOf(chunks.map((chunk) => chunk.content));
      expect(records.reduce((sum, r) => sum + r.input, 0)).toBe(cost.tokens);
      const after = await walletInvariants(db, owner.id);
      expect(after).toMatchObject({ reserved: 0, holds: 0, balance: after.ledger });
      expect(before.balance - after.balance).toBe(cost.charged);
    });

    it('a re-index embeds the new chunks in a new round: charged for them once, and a new generation of the vectors', async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const { assistant, document } = await documentOf(owner, longText(3, 'pump'));
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();
      const firstRecords = (await documentRecords(owner.id)).length;
      const [before] = await db.query(`SELECT embedding_generation::int AS generation FROM assistants WHERE id = $1`, [assistant.id]);

      await t.app.get(AssistantsService).update(assistant.id, { chunkMaxTokens: 200, chunkOverlapTokens: 50 });
      const sentSince = embeddingCalls(docsUpstream).length;
      const balance = (await walletInvariants(db, owner.id)).balance;
      expect(await t.app.get(DocumentsService).reindex(assistant.id)).toMatchObject({ documents: 1 });
      const [due] = await db.query(`SELECT embeddings_due FROM documents WHERE id = $1`, [document.id]);
      expect(due.embeddings_due).toBe(true);
      const [after] = await db.query(`SELECT embedding_generation::int AS generation FROM assistants WHERE id = $1`, [assistant.id]);
      expect(after.generation).toBeGreaterThan(before.generation);

      await ingestion.sweep();
      const { chunks, sent } = await expectEmbeddedOnce(document.id, sentSince);
      expect(sent).toEqual(chunks.map((chunk) => chunk.content));
      const records = await documentRecords(owner.id);
      expect(records).toHaveLength(firstRecords + Math.ceil(chunks.length / EMBEDDING_BATCH));
      const wallet = await walletInvariants(db, owner.id);
      expect(wallet).toMatchObject({ reserved: 0, holds: 0, balance: wallet.ledger });
      expect(balance - wallet.balance).toBe(costOf(chunks.map((chunk) => chunk.content)).charged);
    });

    it("a chunk longer than the model's input limit is embedded by its beginning, never refused", async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const sentSince = embeddingCalls(docsUpstream).length;
      const { document } = await documentOf(owner, longText(2, 'fan'), 'tiny-embed');
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();
      const chunks = await chunksOf(document.id);
      const sent = embeddingCalls(docsUpstream).slice(sentSince).flatMap((call) => call.body.input as string[]);
      expect(sent).toHaveLength(chunks.length);
      sent.forEach((input, i) => {
        expect(chunks[i].content.startsWith(input)).toBe(true);
        expect(countTextTokens(input)).toBeLessThanOrEqual(64);
        expect(decodeVector(chunks[i].embedding!)).toEqual(fakeEmbedding(input, 1536));
      });
      const [state] = await db.query(`SELECT embeddings_due FROM documents WHERE id = $1`, [document.id]);
      expect(state.embeddings_due).toBe(false);
    });

    it("never stores a fallback model's vectors as the assistant's model's: the embeddings wait for its own deployments", async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const before = await walletInvariants(db, owner.id);
      const sentSince = embeddingCalls(docsUpstream).length;
      const { document } = await documentOf(owner, longText(2, 'heater'), 'fragile-embed');
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();
      expect(embeddingCalls(docsUpstream)).toHaveLength(sentSince);
      expect((await chunksOf(document.id)).every((chunk) => chunk.embedding === null)).toBe(true);
      const [state] = await db.query(`SELECT embeddings_due FROM documents WHERE id = $1`, [document.id]);
      expect(state.embeddings_due).toBe(true);
      expect(await walletInvariants(db, owner.id)).toMatchObject({ balance: before.balance, reserved: 0, holds: 0 });
    });

    it('embedding_model: 400 naming the field for an unknown or a chat model; a new model embeds the documents again', async () => {
      const owner = await t.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
      const assistants = t.app.get(AssistantsService);
      await expect(assistants.create(owner.id, { name: 'A', model: 'gpt-4o-mini', embeddingModel: 'nope' })).rejects.toMatchObject({ status: 400, param: 'embedding_model' });
      await expect(assistants.create(owner.id, { name: 'A', model: 'gpt-4o-mini', embeddingModel: 'gpt-4o-mini' })).rejects.toMatchObject({
        status: 400,
        param: 'embedding_model',
        code: 'wrong_model_kind',
      });
      // Without a model of its own or its workspace's, a document is lexical-only: nothing is due, nothing is called.
      const sentSince = embeddingCalls(docsUpstream).length;
      const { assistant, document } = await documentOf(owner, longText(2, 'valve'), null);
      const ingestion = t.app.get(DocumentIngestion);
      ingestion.start(document.id);
      await ingestion.idle();
      expect(embeddingCalls(docsUpstream)).toHaveLength(sentSince);
      expect((await chunksOf(document.id)).every((chunk) => chunk.embedding === null)).toBe(true);

      // Naming one makes its documents due; the sweep embeds them.
      await assistants.update(assistant.id, { embeddingModel: 'doc-embed' });
      await ingestion.sweep();
      await expectEmbeddedOnce(document.id, sentSince);
      expect((await documentRecords(owner.id)).length).toBe(1);
    });
  });
});
