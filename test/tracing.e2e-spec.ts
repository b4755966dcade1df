import OpenAI, { APIError } from 'openai';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { AssistantsService } from '../src/assistants/assistants.service';
import { freePort } from '../src/database/embedded-postgres';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { FakeGemini, startFakeGemini } from './fakes/fake-gemini';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, startFakeSearch } from './fakes/fake-search';
import { OtlpReceiver, ReceivedSpan, startOtlpReceiver } from './support/otlp-receiver';
import { ServerProcess } from './support/processes';
import { startTestApp, TestApp } from './support/test-app';
import { createTestDatabase } from './support/test-database';
import { waitFor } from './support/wait-for';

type XService = { cost_millicents: number; deployment: string | null; attempts: number };
type Completion = OpenAI.Chat.ChatCompletion & { x_service: XService };

const UPSTREAM_KEY = 'sk-upstream-otel-test-0123456789abcdef';
const SERVER = 2;
const CLIENT = 3;

/**
 * OpenTelemetry (issue 45) on a real service process, exporting to an OTLP/HTTP receiver
 * started here (traces in protobuf, metrics in JSON): each request's trace has its server
 * span, admission, upstream attempts as GenAI client spans with what the SDK client saw,
 * tool calls, the settlement and the database statements; the client's traceparent is its
 * parent, the upstream gets the attempt's, the log lines carry the trace id, and no key is
 * anywhere in what was exported.
 */
describe('OpenTelemetry traces and GenAI metrics', () => {
  let receiver: OtlpReceiver;
  let upstream: FakeOpenAi;
  let flaky: FakeOpenAi;
  let search: FakeSearch;
  let gemini: FakeGemini;
  let setup: TestApp;
  let server: ServerProcess;
  let baseUrl: string;
  let dataDir: string;

  beforeAll(async () => {
    [receiver, upstream, flaky, search, gemini] = await Promise.all([startOtlpReceiver(), startFakeOpenAi(), startFakeOpenAi(), startFakeSearch(), startFakeGemini()]);
    const databaseUrl = await createTestDatabase();
    dataDir = await mkdtemp(path.join(tmpdir(), 'acs-tracing-'));
    const catalog = path.join(dataDir, 'models.json');
    const model = { provider: 'openai', context_length: 128_000, max_output_tokens: 16_384, input_price: 15_000, output_price: 60_000 };
    await writeFile(
      catalog,
      JSON.stringify({
        models: [
          { id: 'gpt-4o-mini', ...model, deployments: [{ label: 'main', provider: 'openai', base_url: upstream.url, api_key_env: 'OTEL_TEST_UPSTREAM_KEY' }] },
          {
            id: 'gpt-4o',
            ...model,
            // "flaky" is tried first (nearly always, by weight), and fails over to "steady".
            deployments: [
              { label: 'flaky', provider: 'openai', base_url: flaky.url, api_key_env: 'OTEL_TEST_UPSTREAM_KEY', weight: 1_000_000 },
              { label: 'steady', provider: 'openai', base_url: upstream.url, api_key_env: 'OTEL_TEST_UPSTREAM_KEY', weight: 1 },
            ],
          },
          {
            id: 'gemini-test',
            ...model,
            provider: 'google',
            upstream_model: 'gemini-2.5-flash',
            deployments: [{ label: 'gemini', provider: 'google', base_url: gemini.url, api_key_env: 'OTEL_TEST_UPSTREAM_KEY' }],
          },
        ],
      }),
    );
    // For workspaces, keys and assistants only: the traffic goes to the spawned process.
    setup = await startTestApp({ databaseUrl });
    const port = await freePort();
    baseUrl = `http://127.0.0.1:${port}`;
    server = ServerProcess.start({
      PORT: String(port),
      HOST: '127.0.0.1',
      DATABASE_URL: databaseUrl,
      DATA_DIR: dataDir,
      SESSION_SECRET: 'tracing-test-secret-0123456789abcdef',
      MODEL_CATALOG_FILE: catalog,
      OTEL_TEST_UPSTREAM_KEY: UPSTREAM_KEY,
      LLM_SIMULATOR: 'off',
      UPSTREAM_MAX_RETRIES: '0',
      WEB_SEARCH_PROVIDER: 'searxng',
      WEB_SEARCH_BASE_URL: search.url,
      LOG_LEVEL: 'log',
      LOG_FORMAT: 'json',
      OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
      OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf',
      OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: 'http/json',
      OTEL_SERVICE_NAME: 'acs-under-test',
      OTEL_BSP_SCHEDULE_DELAY: '100',
      OTEL_METRIC_EXPORT_INTERVAL: '60000',
    });
    await server.waitForHealth(baseUrl, 60_000);
  });
  afterAll(async () => {
    server?.kill();
    await setup?.close();
    await Promise.all([receiver?.close(), upstream?.close(), flaky?.close(), search?.close(), gemini?.close()]);
    if (dataDir) await rm(dataDir, { recursive: true, force: true });
  });

  const workspaces: { apiKey: string }[] = [];
  async function client(): Promise<{ openai: OpenAI; workspace: Awaited<ReturnType<TestApp['createWorkspace']>> }> {
    const workspace = await setup.createWorkspace({ tier: 'enterprise', balanceMillicents: 1_000_000 });
    workspaces.push(workspace);
    return { openai: new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey: workspace.apiKey, maxRetries: 0 }), workspace };
  }

  /** The spans of the trace whose server span carries `requestId`, once its server span and settlement (if any) are in. */
  async function traceOf(requestId: string, expectSpans: (spans: ReceivedSpan[]) => boolean = () => true): Promise<ReceivedSpan[]> {
    let spans: ReceivedSpan[] = [];
    await waitFor(() => {
      const root = receiver.spans.find((s) => s.kind === SERVER && s.attributes['acs.request_id'] === requestId);
      spans = root ? receiver.spans.filter((s) => s.traceId === root.traceId) : [];
      return spans.length > 0 && expectSpans(spans);
    });
    return spans;
  }

  /** A plain chat completion, and the request id its answer carried. */
  async function chat(openai: OpenAI, body: Record<string, unknown>, headers: Record<string, string> = {}): Promise<{ completion: Completion; requestId: string }> {
    const { data, response } = await openai.chat.completions
      .create(body as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, { headers })
      .withResponse();
    return { completion: data as Completion, requestId: response.headers.get('x-request-id')! };
  }

  const named = (spans: ReceivedSpan[], name: string) => spans.filter((s) => s.name === name);
  const one = (spans: ReceivedSpan[], name: string) => {
    const found = named(spans, name);
    if (found.length !== 1) throw new Error(`${found.length} spans named ${name} in ${spans.map((s) => s.name).join(', ')}`);
    return found[0];
  };
  const childrenOf = (spans: ReceivedSpan[], parent: ReceivedSpan) => spans.filter((s) => s.parentSpanId === parent.spanId);

  it('traces a plain completion under the client traceparent: admission, the GenAI attempt as the SDK saw it, settlement with its cost, pg; upstream and logs joined', async () => {
    const { openai, workspace } = await client();
    upstream.script({ kind: 'text', text: 'Traced hello.', usage: { prompt_tokens: 21, completion_tokens: 4 } });
    const clientTrace = '4bf92f3577b34da6a3ce929d0e0e4736';
    const clientSpan = '00f067aa0ba902b7';
    const before = upstream.requests.length;

    const { completion, requestId } = await chat(
      openai,
      { model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Say hello' }], max_tokens: 20 },
      { traceparent: `00-${clientTrace}-${clientSpan}-01` },
    );

    const spans = await traceOf(requestId, (s) => s.some((x) => x.name === 'settlement') && s.some((x) => x.name.startsWith('pg.')));
    const root = spans.find((s) => s.kind === SERVER)!;
    expect(root).toMatchObject({
      traceId: clientTrace,
      parentSpanId: clientSpan,
      name: 'POST /v1/chat/completions',
      attributes: expect.objectContaining({
        'http.request.method': 'POST',
        'http.route': '/v1/chat/completions',
        'http.response.status_code': 200,
        'acs.workspace_id': workspace.id,
        'acs.api_key_id': workspace.apiKeyId,
      }),
      resource: expect.objectContaining({ 'service.name': 'acs-under-test' }),
    });
    const attempt = one(spans, 'chat gpt-4o-mini');
    expect(attempt.kind).toBe(CLIENT);
    expect(attempt.attributes).toMatchObject({
      'gen_ai.operation.name': 'chat',
      'gen_ai.provider.name': 'openai',
      'gen_ai.request.model': 'gpt-4o-mini',
      'gen_ai.request.max_tokens': 20,
      'gen_ai.response.model': completion.model,
      'gen_ai.response.id': completion.id,
      'gen_ai.response.finish_reasons': [completion.choices[0].finish_reason],
      'gen_ai.usage.input_tokens': completion.usage!.prompt_tokens,
      'gen_ai.usage.output_tokens': completion.usage!.completion_tokens,
      'acs.deployment': 'main',
      'acs.attempt': 1,
    });
    // Contents only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true.
    expect(attempt.attributes).not.toHaveProperty(['gen_ai.input.messages']);
    expect(attempt.attributes).not.toHaveProperty(['gen_ai.output.messages']);
    expect(one(spans, 'settlement').attributes).toMatchObject({ cost_millicents: completion.x_service.cost_millicents, 'acs.settlement.status': 'success' });
    for (const step of ['admission api_key', 'admission rate_limit', 'admission hold', 'settlement', 'chat gpt-4o-mini']) {
      expect(one(spans, step).parentSpanId).toBe(root.spanId);
    }
    // The database statements of the request sit below its spans.
    const statements = spans.filter((s) => s.name.startsWith('pg.'));
    expect(statements.length).toBeGreaterThan(0);
    expect(statements.every((s) => spans.some((p) => p.spanId === s.parentSpanId))).toBe(true);
    expect(childrenOf(spans, one(spans, 'admission hold')).some((s) => s.name.startsWith('pg.'))).toBe(true);

    // The upstream got the attempt's span as its parent.
    const sent = upstream.requests.slice(before).find((r) => r.path.endsWith('/chat/completions'))!;
    expect(sent.headers.traceparent).toBe(`00-${clientTrace}-${attempt.spanId}-01`);
    // The request's log line carries the trace.
    const line = server.stdout
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l) as Record<string, unknown>)
      .find((l) => l.reqId === requestId);
    expect(line).toMatchObject({ trace_id: clientTrace, span_id: expect.stringMatching(/^[0-9a-f]{16}$/) });
  });

  it('ends a stream’s attempt span when the stream ends, with its usage, finish reason and time to first token', async () => {
    const { openai } = await client();
    upstream.script({ kind: 'text', text: 'one two three four', chunkDelayMs: 20, usage: { prompt_tokens: 30, completion_tokens: 8 } });
    const stream = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Count' }], max_tokens: 30, stream: true, stream_options: { include_usage: true } })
      .withResponse();
    const requestId = stream.response.headers.get('x-request-id')!;
    const chunks: OpenAI.Chat.ChatCompletionChunk[] = [];
    for await (const chunk of stream.data) chunks.push(chunk);
    const usage = chunks.find((c) => c.usage)!.usage!;
    const finish = chunks.flatMap((c) => c.choices).find((c) => c.finish_reason)!.finish_reason;

    const spans = await traceOf(requestId, (s) => s.some((x) => x.name === 'settlement') && s.some((x) => x.name === 'chat gpt-4o-mini'));
    const attempt = one(spans, 'chat gpt-4o-mini');
    expect(attempt.attributes).toMatchObject({
      'gen_ai.usage.input_tokens': usage.prompt_tokens,
      'gen_ai.usage.output_tokens': usage.completion_tokens,
      'gen_ai.response.finish_reasons': [finish],
      'gen_ai.response.id': chunks[0].id,
      'gen_ai.response.time_to_first_chunk': expect.any(Number),
    });
    expect(attempt.status.code).toBe(0);
  });

  it('shows a failover as two attempt spans: the failed deployment with error.type, then the one that answered', async () => {
    const { openai } = await client();
    flaky.script({ kind: 'http_error', status: 503, body: { error: { message: 'overloaded' } } });
    upstream.script({ kind: 'text', text: 'From steady.', usage: { prompt_tokens: 10, completion_tokens: 3 } });
    const { completion, requestId } = await chat(openai, { model: 'gpt-4o', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 10 });
    expect(completion.x_service).toMatchObject({ deployment: 'steady', attempts: 2 });

    const spans = await traceOf(requestId, (s) => named(s, 'chat gpt-4o').length === 2 && s.some((x) => x.name === 'settlement'));
    const [first, second] = named(spans, 'chat gpt-4o').sort((a, b) => Number(a.attributes['acs.attempt']) - Number(b.attributes['acs.attempt']));
    expect(first.attributes).toMatchObject({ 'acs.deployment': 'flaky', 'acs.attempt': 1, 'error.type': '503' });
    expect(first.status.code).toBe(2);
    expect(second.attributes).toMatchObject({ 'acs.deployment': 'steady', 'acs.attempt': 2, 'gen_ai.usage.output_tokens': 3 });
    expect(second.attributes).not.toHaveProperty(['error.type']);
    expect(first.parentSpanId).toBe(second.parentSpanId);
  });

  it('sends a Gemini deployment the attempt’s traceparent too, and names its provider as the conventions do', async () => {
    const { openai } = await client();
    const before = gemini.requests.length;
    const { requestId } = await chat(openai, { model: 'gemini-test', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 10 });

    const spans = await traceOf(requestId, (s) => s.some((x) => x.name === 'chat gemini-2.5-flash') && s.some((x) => x.name === 'settlement'));
    const attempt = one(spans, 'chat gemini-2.5-flash');
    expect(attempt.attributes).toMatchObject({ 'gen_ai.provider.name': 'gcp.gemini', 'gen_ai.request.model': 'gemini-2.5-flash', 'acs.deployment': 'gemini' });
    expect(gemini.requests[before].headers.traceparent).toBe(`00-${attempt.traceId}-${attempt.spanId}-01`);
  });

  it('traces an assistant’s tool loop: an attempt per iteration and an execute_tool span per server tool call', async () => {
    const { openai, workspace } = await client();
    const bot = await setup.app.get(AssistantsService).create(workspace.id, { name: 'Researcher', model: 'gpt-4o-mini', tools: ['web_search', 'file_search'] });
    upstream.script(
      {
        kind: 'tool_calls',
        calls: [
          { id: 'call_web', name: 'web_search', arguments: JSON.stringify({ query: 'opentelemetry' }) },
          { id: 'call_files', name: 'file_search', arguments: JSON.stringify({ query: 'handbook' }) },
        ],
        usage: { prompt_tokens: 50, completion_tokens: 12 },
      },
      { kind: 'text', text: 'Here is what I found.', usage: { prompt_tokens: 120, completion_tokens: 9 } },
    );
    const { completion, requestId } = await chat(openai, { assistant_id: bot.id, messages: [{ role: 'user', content: 'Look it up' }] });

    const spans = await traceOf(requestId, (s) => named(s, 'chat gpt-4o-mini').length === 2 && s.some((x) => x.name === 'settlement'));
    const web = one(spans, 'execute_tool web_search');
    const files = one(spans, 'execute_tool file_search');
    expect(web.attributes).toMatchObject({ 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': 'web_search', 'gen_ai.tool.call.id': 'call_web' });
    expect(files.attributes).toMatchObject({ 'gen_ai.tool.name': 'file_search', 'gen_ai.tool.call.id': 'call_files' });
    const root = spans.find((s) => s.kind === SERVER)!;
    expect([web.parentSpanId, files.parentSpanId]).toEqual([root.spanId, root.spanId]);
    expect(named(spans, 'chat gpt-4o-mini').map((s) => s.attributes['gen_ai.usage.output_tokens']).sort()).toEqual([12, 9].sort());
    expect(one(spans, 'settlement').attributes.cost_millicents).toBe(completion.x_service.cost_millicents);
  });

  it('traces a request refused by its key’s spending limit: the hold step fails with the refusal’s code, and no upstream call is made', async () => {
    const { openai, workspace } = await client();
    await setup.app.get(ApiKeysService).setLimits(workspace.apiKeyId, { spendLimitMillicents: 0 });
    const refused = await openai.chat.completions
      .create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], max_tokens: 10 })
      .withResponse()
      .catch((error: unknown) => error as APIError);
    expect(refused).toBeInstanceOf(APIError);
    const error = refused as APIError;
    expect(error.code).toBe('key_limit_exceeded');

    const spans = await traceOf(error.requestID!);
    const root = spans.find((s) => s.kind === SERVER)!;
    expect(root.attributes['http.response.status_code']).toBe(error.status);
    expect(one(spans, 'admission hold')).toMatchObject({ attributes: expect.objectContaining({ 'error.type': 'key_limit_exceeded' }), status: { code: 2 } });
    expect(spans.filter((s) => s.name.startsWith('chat '))).toEqual([]);
  });

  it('traces a Responses API call (a Nest route) the same way', async () => {
    const { openai } = await client();
    upstream.script({ kind: 'text', text: 'A response.', usage: { prompt_tokens: 14, completion_tokens: 3 } });
    const response = await openai.responses.create({ model: 'gpt-4o-mini', input: 'Hello', max_output_tokens: 20 }).withResponse();
    const requestId = response.response.headers.get('x-request-id')!;

    const spans = await traceOf(requestId, (s) => s.some((x) => x.name === 'settlement') && s.some((x) => x.name === 'chat gpt-4o-mini'));
    expect(spans.find((s) => s.kind === SERVER)).toMatchObject({ name: 'POST /v1/responses', attributes: expect.objectContaining({ 'http.route': '/v1/responses' }) });
    expect(one(spans, 'chat gpt-4o-mini').attributes).toMatchObject({
      'gen_ai.usage.input_tokens': response.data.usage!.input_tokens,
      'gen_ai.usage.output_tokens': response.data.usage!.output_tokens,
    });
  });

  it('exports the GenAI metrics and the last spans on SIGTERM, and never a key', async () => {
    const stopped = await server.stop('SIGTERM', 30_000);
    expect(stopped.code).toBe(0);
    await waitFor(() => receiver.metrics.some((m) => m.name === 'gen_ai.client.token.usage'));
    const usage = receiver.metrics.filter((m) => m.name === 'gen_ai.client.token.usage' && m.attributes['gen_ai.request.model'] === 'gpt-4o-mini');
    expect(usage[0]).toMatchObject({ unit: '{token}', attributes: expect.objectContaining({ 'gen_ai.operation.name': 'chat', 'gen_ai.provider.name': 'openai' }) });
    // Every attempt's tokens, by type, as the spans recorded them.
    const attempts = receiver.spans.filter((s) => s.name === 'chat gpt-4o-mini');
    const total = (type: string) => attempts.reduce((sum, s) => sum + Number(s.attributes[`gen_ai.usage.${type}_tokens`] ?? 0), 0);
    const metricSum = (type: string) => usage.filter((m) => m.attributes['gen_ai.token.type'] === type).reduce((sum, m) => sum + m.sum, 0);
    expect(metricSum('input')).toBe(total('input'));
    expect(metricSum('output')).toBe(total('output'));
    const durations = receiver.metrics.filter((m) => m.name === 'gen_ai.client.operation.duration');
    expect(durations.find((m) => m.attributes['error.type'] === '503')).toMatchObject({ unit: 's', attributes: expect.objectContaining({ 'gen_ai.request.model': 'gpt-4o' }) });
    expect(receiver.contentTypes['/v1/traces']).toEqual(new Set(['application/x-protobuf']));
    expect(receiver.contentTypes['/v1/metrics']).toEqual(new Set(['application/json']));

    const exported = receiver.rawBodies.join('\n');
    expect(exported).not.toContain(UPSTREAM_KEY);
    for (const { apiKey } of workspaces) expect(exported).not.toContain(apiKey.slice(3));
  });
});
