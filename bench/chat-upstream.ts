/**
 * The fake OpenAI-compatible upstream of the chat benchmark (bench/chat.ts): the floor
 * that the service and Portkey's gateway are measured against, so it must cost as little
 * as possible. Every answer is serialized once at start; a request is read to its end and
 * answered with a constant buffer. Runs as its own process:
 *
 *   node dist/bench/chat-upstream.js [port]      (prints {"port": n} on its first line)
 *
 * - POST /v1/chat/completions: a fixed short answer with `usage`; with `"stream": true`,
 *   Server-Sent Events: a role chunk, three content chunks, a finish chunk, a usage chunk
 *   when `stream_options.include_usage` is set (the service always sets it), then [DONE].
 *   The whole stream goes out in one write: the floor is the cost of HTTP, not of pacing.
 * - POST /v1/embeddings: one 1536-dimension vector per input (or of `dimensions`), base64
 *   when `encoding_format` says so, with `usage`; the answer of each shape is serialized once.
 *   The body is parsed as JSON here (the number of inputs decides the answer's size).
 * - GET /v1/models: one model.
 *
 * The request body is not parsed as JSON (that would be the floor's main cost); the two
 * flags are found with a regular expression, which is exact for the bodies the benchmark,
 * the service and Portkey send.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

const MODEL = 'gpt-4o-mini-2024-07-18';
const CREATED = 1_700_000_000;
const ANSWER = ['Hello', '! How can I', ' help you today?'];
/** What `Say hello` and the answer above would count; any fixed numbers do, the service prices them. */
const USAGE = { prompt_tokens: 9, completion_tokens: 9, total_tokens: 18 };

const json = (value: unknown) => Buffer.from(JSON.stringify(value));

const COMPLETION = json({
  id: 'chatcmpl-bench',
  object: 'chat.completion',
  created: CREATED,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: ANSWER.join(''), refusal: null }, logprobs: null, finish_reason: 'stop' }],
  usage: USAGE,
});

function sse(includeUsage: boolean): Buffer {
  const chunk = (choices: unknown[], extra: Record<string, unknown> = {}) =>
    `data: ${JSON.stringify({ id: 'chatcmpl-bench', object: 'chat.completion.chunk', created: CREATED, model: MODEL, choices, ...extra })}\n\n`;
  const events = [
    chunk([{ index: 0, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]),
    ...ANSWER.map((text) => chunk([{ index: 0, delta: { content: text }, logprobs: null, finish_reason: null }])),
    chunk([{ index: 0, delta: {}, logprobs: null, finish_reason: 'stop' }]),
    ...(includeUsage ? [chunk([], { usage: USAGE })] : []),
    'data: [DONE]\n\n',
  ];
  return Buffer.from(events.join(''));
}
const STREAM_WITH_USAGE = sse(true);
const STREAM_WITHOUT_USAGE = sse(false);

const MODELS = json({ object: 'list', data: [{ id: 'gpt-4o-mini', object: 'model', created: CREATED, owned_by: 'openai' }] });
const NOT_FOUND = json({ error: { message: 'Not found', type: 'invalid_request_error', code: 'not_found' } });

/** The fake's vector: fixed values of unit scale; every input gets the same one (the benchmark measures transport, not meaning). */
const EMBEDDING_DIMENSIONS = 1_536;
const VECTOR = Float32Array.from({ length: EMBEDDING_DIMENSIONS }, (_, i) => Math.sin(i + 1) / Math.sqrt(EMBEDDING_DIMENSIONS / 2));
const embeddingAnswers = new Map<string, Buffer>();

/** OpenAI's answer to an embeddings body, cached by its shape (inputs, dimensions, encoding). */
function embeddingAnswer(body: string): Buffer {
  const request = JSON.parse(body) as { input?: unknown; dimensions?: number; encoding_format?: string };
  const input = request.input;
  const inputs = typeof input === 'string' ? [input] : Array.isArray(input) && input.every((item) => typeof item === 'number') ? [input] : ((input as unknown[]) ?? []);
  const dimensions = request.dimensions ?? EMBEDDING_DIMENSIONS;
  const base64 = request.encoding_format === 'base64';
  const key = `${inputs.length}:${dimensions}:${base64}`;
  let answer = embeddingAnswers.get(key);
  if (!answer) {
    const vector = VECTOR.subarray(0, dimensions);
    const embedding = base64 ? Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString('base64') : Array.from(vector);
    const tokens = inputs.length * 8;
    answer = json({
      object: 'list',
      data: inputs.map((_, index) => ({ object: 'embedding', index, embedding })),
      model: 'text-embedding-3-small',
      usage: { prompt_tokens: tokens, total_tokens: tokens },
    });
    embeddingAnswers.set(key, answer);
  }
  return answer;
}

const STREAM_FLAG = /"stream"\s*:\s*true/;
const INCLUDE_USAGE_FLAG = /"include_usage"\s*:\s*true/;

function send(res: ServerResponse, status: number, contentType: string, body: Buffer): void {
  res.writeHead(status, { 'content-type': contentType, 'content-length': body.length });
  res.end(body);
}

/** Exported for bench/routing-upstream.ts, which puts its fault modes in front of it. */
export function handle(req: IncomingMessage, res: ServerResponse): void {
  if (req.method === 'GET' && req.url?.startsWith('/v1/models')) {
    req.resume();
    return send(res, 200, 'application/json', MODELS);
  }
  const embeddings = req.url?.startsWith('/v1/embeddings') === true;
  if (req.method !== 'POST' || !(req.url?.startsWith('/v1/chat/completions') || embeddings)) {
    req.resume();
    return send(res, 404, 'application/json', NOT_FOUND);
  }
  let body = '';
  req.setEncoding('utf8');
  req.on('data', (chunk: string) => (body += chunk));
  req.on('end', () => {
    if (embeddings) return send(res, 200, 'application/json', embeddingAnswer(body));
    if (!STREAM_FLAG.test(body)) return send(res, 200, 'application/json', COMPLETION);
    const stream = INCLUDE_USAGE_FLAG.test(body) ? STREAM_WITH_USAGE : STREAM_WITHOUT_USAGE;
    send(res, 200, 'text/event-stream; charset=utf-8', stream);
  });
}

/** Starts the fake on 127.0.0.1; port 0 takes a free one. */
export function startChatUpstream(port = 0): Promise<{ port: number; close: () => Promise<void> }> {
  const server = createServer(handle);
  // Clients keep their connections for the whole run; Node's default closes idle ones after 5 s.
  server.keepAliveTimeout = 120_000;
  server.headersTimeout = 130_000;
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      resolve({
        port: (server.address() as AddressInfo).port,
        close: () => new Promise<void>((done) => server.close(() => done())),
      });
    });
  });
}

if (require.main === module) {
  startChatUpstream(Number(process.argv[2] ?? 0)).then(
    ({ port }) => process.stdout.write(`${JSON.stringify({ port })}\n`),
    (error: unknown) => {
      console.error(`chat-upstream: ${String(error)}`);
      process.exit(1);
    },
  );
}
