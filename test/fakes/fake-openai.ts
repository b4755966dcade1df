import { createHash } from 'node:crypto';
import { createServer, IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

/** What the fake answers to the next chat request. */
export type OpenAiScenario =
  | { kind: 'text'; text: string; usage?: Usage | null; finishReason?: string; chunkDelayMs?: number; /** Before a plain answer. */ delayMs?: number }
  /** `text`: said before the calls (streamed word by word first, `chunkDelayMs` apart). */
  | { kind: 'tool_calls'; calls: Array<{ id: string; name: string; arguments: string }>; usage?: Usage; text?: string; chunkDelayMs?: number }
  /** `echoAuthorization`: the error message repeats the request's Authorization header and its bare token, as careless upstreams do. */
  | { kind: 'http_error'; status: number; body?: unknown; headers?: Record<string, string>; echoAuthorization?: boolean }
  /** Streams some words, then breaks: an in-band error event, the socket cut, or silence with the socket open. */
  | { kind: 'stream_failure'; words: string[]; failure: 'error_event' | 'socket' | 'malformed' | 'stall' }
  /** Never answers (for timeouts). */
  | { kind: 'hang' };

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  cached_tokens?: number;
  /** Reported in completion_tokens_details, as OpenAI's reasoning models do. */
  reasoning_tokens?: number;
}

export interface RecordedRequest {
  path: string;
  headers: IncomingMessage['headers'];
  body: Record<string, unknown>;
  /** Set when the client (our service) closed the connection before the answer ended. */
  closedEarly: boolean;
}

export interface FakeOpenAi {
  /** Base URL for OPENAI_BASE_URL, with the /v1 suffix the SDK expects. */
  url: string;
  requests: RecordedRequest[];
  /** Queues answers for the next requests; when the queue is empty, the default answer is used. */
  script(...scenarios: OpenAiScenario[]): void;
  setDefault(scenario: OpenAiScenario): void;
  /** Answers each request the queue does not by what its body asks (null: back to the default answer). */
  respondWith(responder: ((body: Record<string, unknown>) => OpenAiScenario) | null): void;
  /** The vector of each embeddings input from now on (null: back to `fakeEmbedding`), to encode what a test needs. */
  embedWith(vectorOf: EmbeddingFunction | null): void;
  close(): Promise<void>;
}

/**
 * A local server speaking OpenAI's Chat Completions wire format (JSON and SSE), so the
 * service's real OpenAI adapter and SDK run unmodified against it.
 */
/**
 * `localEmbeddings`: answers `/embeddings` as a local OpenAI-compatible text-embeddings server
 * may: numbers whatever `encoding_format` asks, vectors of this size, and no `usage`.
 */
export interface FakeOpenAiOptions {
  localEmbeddings?: { dimensions: number };
}

export async function startFakeOpenAi(options: FakeOpenAiOptions = {}): Promise<FakeOpenAi> {
  const queue: OpenAiScenario[] = [];
  let fallback: OpenAiScenario = { kind: 'text', text: 'Hello from the fake upstream.' };
  let responder: ((body: Record<string, unknown>) => OpenAiScenario) | null = null;
  const requests: RecordedRequest[] = [];
  const open = new Set<ServerResponse>();
  let vectorOf: EmbeddingFunction = fakeEmbedding;

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = chunks.length ? (JSON.parse(Buffer.concat(chunks).toString('utf8')) as Record<string, unknown>) : {};
      const recorded: RecordedRequest = { path: req.url ?? '', headers: req.headers, body, closedEarly: false };
      requests.push(recorded);
      res.on('close', () => {
        if (!res.writableFinished) recorded.closedEarly = true;
      });
      open.add(res);
      res.on('close', () => open.delete(res));
      const embeddings = req.method === 'POST' && req.url?.endsWith('/embeddings') === true;
      if (!embeddings && (req.method !== 'POST' || !req.url?.endsWith('/chat/completions'))) {
        res.writeHead(404).end();
        return;
      }
      if (embeddings) {
        const scenario = queue.shift() ?? responder?.(body) ?? fallback;
        // An error or a hang as for chat; any other scenario is answered with vectors.
        if (scenario.kind === 'http_error' || scenario.kind === 'hang') void answer(scenario, body, res, req.headers.authorization);
        // A text scenario's delayMs delays the vectors too (a slow upstream).
        else if (scenario.kind === 'text' && scenario.delayMs) setTimeout(() => answerEmbeddings(body, res, vectorOf, options.localEmbeddings), scenario.delayMs);
        else answerEmbeddings(body, res, vectorOf, options.localEmbeddings);
        return;
      }
      void answer(queue.shift() ?? responder?.(body) ?? fallback, body, res, req.headers.authorization);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}/v1`,
    requests,
    script: (...scenarios) => queue.push(...scenarios),
    setDefault: (scenario) => {
      fallback = scenario;
    },
    respondWith: (next) => {
      responder = next;
    },
    embedWith: (next) => {
      vectorOf = next ?? fakeEmbedding;
    },
    close: async () => {
      for (const res of open) res.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

async function answer(scenario: OpenAiScenario, body: Record<string, unknown>, res: ServerResponse, authorization = ''): Promise<void> {
  const model = String(body.model);
  const stream = body.stream === true;
  const base = { id: 'chatcmpl-fake123', created: 1_795_000_000, model, system_fingerprint: 'fp_fake' };

  if (scenario.kind === 'hang') return;
  if (scenario.kind === 'http_error') {
    res.writeHead(scenario.status, { 'Content-Type': 'application/json', ...scenario.headers });
    const message = scenario.echoAuthorization
      ? `Invalid request: the header 'Authorization: ${authorization}' was sent with key ${authorization.replace(/^Bearer /, '')}`
      : `fake upstream error ${scenario.status}`;
    res.end(JSON.stringify(scenario.body ?? { error: { message, type: scenario.echoAuthorization ? 'invalid_request_error' : 'server_error' } }));
    return;
  }

  if (!stream) {
    if (scenario.kind === 'text' && scenario.delayMs) await new Promise((resolve) => setTimeout(resolve, scenario.delayMs));
    const message =
      scenario.kind === 'tool_calls'
        ? {
            role: 'assistant',
            content: scenario.text ?? null,
            tool_calls: scenario.calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } })),
          }
        : { role: 'assistant', content: scenario.kind === 'text' ? scenario.text : scenario.words.join('') };
    const usage = scenario.kind === 'stream_failure' ? undefined : scenario.usage;
    res.writeHead(200, { 'Content-Type': 'application/json' });
    res.end(
      JSON.stringify({
        ...base,
        object: 'chat.completion',
        choices: [
          {
            index: 0,
            message,
            finish_reason: scenario.kind === 'tool_calls' ? 'tool_calls' : scenario.kind === 'text' ? (scenario.finishReason ?? 'stop') : 'stop',
            logprobs: null,
          },
        ],
        ...(usage === null ? {} : { usage: toWireUsage(usage ?? { prompt_tokens: 10, completion_tokens: 5 }) }),
      }),
    );
    return;
  }

  res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
  const send = (data: unknown) => res.write(`data: ${typeof data === 'string' ? data : JSON.stringify(data)}\n\n`);
  const chunk = (delta: unknown, finish: string | null = null) => ({
    ...base,
    object: 'chat.completion.chunk',
    choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }],
  });
  const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true;
  send(chunk({ role: 'assistant', content: '' }));

  if (scenario.kind === 'stream_failure') {
    for (const word of scenario.words) send(chunk({ content: word }));
    if (scenario.failure === 'error_event') send({ error: { message: 'The upstream model crashed', type: 'server_error' } });
    if (scenario.failure === 'malformed') send('{"choices": [ this is not json');
    if (scenario.failure === 'stall') return;
    if (scenario.failure === 'socket') {
      // Let the words reach the service first: a cut before the first chunk would be retried.
      await new Promise((resolve) => setTimeout(resolve, 100));
      res.destroy();
      return;
    }
    res.end();
    return;
  }

  if (scenario.kind === 'tool_calls') {
    for (const word of scenario.text?.split(/(?<= )/) ?? []) {
      if (scenario.chunkDelayMs) await new Promise((resolve) => setTimeout(resolve, scenario.chunkDelayMs));
      if (res.destroyed) return;
      send(chunk({ content: word }));
    }
    scenario.calls.forEach((call, index) => {
      send(chunk({ tool_calls: [{ index, id: call.id, type: 'function', function: { name: call.name, arguments: '' } }] }));
      // Arguments arrive in pieces, as they do from OpenAI.
      const half = Math.ceil(call.arguments.length / 2);
      send(chunk({ tool_calls: [{ index, function: { arguments: call.arguments.slice(0, half) } }] }));
      send(chunk({ tool_calls: [{ index, function: { arguments: call.arguments.slice(half) } }] }));
    });
    send(chunk({}, 'tool_calls'));
  } else {
    for (const word of scenario.text.split(/(?<= )/)) {
      if (scenario.chunkDelayMs) await new Promise((resolve) => setTimeout(resolve, scenario.chunkDelayMs));
      if (res.destroyed) return;
      send(chunk({ content: word }));
    }
    send(chunk({}, scenario.finishReason ?? 'stop'));
  }
  const usage = scenario.usage === null ? undefined : (scenario.usage ?? { prompt_tokens: 10, completion_tokens: 5 });
  if (includeUsage && usage) send({ ...base, object: 'chat.completion.chunk', choices: [], usage: toWireUsage(usage) });
  send('[DONE]');
  res.end();
}

function toWireUsage(usage: Usage) {
  return {
    prompt_tokens: usage.prompt_tokens,
    completion_tokens: usage.completion_tokens,
    total_tokens: usage.prompt_tokens + usage.completion_tokens,
    prompt_tokens_details: { cached_tokens: usage.cached_tokens ?? 0 },
    ...(usage.reasoning_tokens !== undefined ? { completion_tokens_details: { reasoning_tokens: usage.reasoning_tokens } } : {}),
  };
}

/** Native sizes of the fake's embedding models: `-large` in the upstream name gives 3072, others 1536. */
export function fakeEmbeddingDimensions(model: string): number {
  return model.includes('large') ? 3_072 : 1_536;
}

/** The prompt tokens the fake reports for an input: one per 4 characters (at least 1), a token array's length. */
export function fakeEmbeddingTokens(input: string | number[]): number {
  return typeof input === 'string' ? Math.max(1, Math.ceil(input.length / 4)) : input.length;
}

/**
 * The fake's vector of an input: float32 values drawn from the SHA-256 of the input (the same
 * input always gets the same vector), the first `dimensions` of them when the request asks
 * for fewer.
 */
export function fakeEmbedding(input: string | number[], dimensions: number): Float32Array {
  const vector = new Float32Array(dimensions);
  let block = Buffer.alloc(0);
  for (let i = 0; i < dimensions; i++) {
    if (i % 8 === 0) block = createHash('sha256').update(`${JSON.stringify(input)}:${i / 8}`).digest();
    vector[i] = block.readInt32LE((i % 8) * 4) / 2 ** 31;
  }
  return vector;
}

/** An input's vector of `dimensions` values. */
export type EmbeddingFunction = (input: string | number[], dimensions: number) => Float32Array;

/** OpenAI's `/v1/embeddings`: base64 of little-endian float32 when the body asks for it, numbers otherwise. */
function answerEmbeddings(body: Record<string, unknown>, res: ServerResponse, vectorOf: EmbeddingFunction, local?: { dimensions: number }): void {
  const model = String(body.model);
  const raw = body.input as string | string[] | number[] | number[][];
  const inputs: Array<string | number[]> = typeof raw === 'string' ? [raw] : raw.every((item) => typeof item === 'number') ? [raw as number[]] : (raw as Array<string | number[]>);
  const dimensions = local ? local.dimensions : typeof body.dimensions === 'number' ? body.dimensions : fakeEmbeddingDimensions(model);
  const base64 = !local && body.encoding_format === 'base64';
  const tokens = inputs.reduce((sum: number, input) => sum + fakeEmbeddingTokens(input), 0);
  res.writeHead(200, { 'Content-Type': 'application/json' });
  res.end(
    JSON.stringify({
      object: 'list',
      data: inputs.map((input, index) => {
        const vector = vectorOf(input, dimensions);
        return { object: 'embedding', index, embedding: base64 ? Buffer.from(vector.buffer).toString('base64') : Array.from(vector) };
      }),
      model,
      ...(local ? {} : { usage: { prompt_tokens: tokens, total_tokens: tokens } }),
    }),
  );
}
