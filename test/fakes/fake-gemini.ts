import { createHash } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';

/**
 * A fake Gemini Developer API on 127.0.0.1: a real HTTP server speaking the wire format the
 * `@google/genai` SDK uses with `httpOptions.baseUrl` set to `url`:
 *
 *   POST /v1beta/models/{model}:generateContent                 JSON in, JSON out
 *   POST /v1beta/models/{model}:streamGenerateContent?alt=sse   JSON in, `data: {...}` events out
 *   POST /v1beta/models/{model}:embedContent                    one content in, `{embedding: {values}}` out
 *   POST /v1beta/models/{model}:batchEmbedContents              at most 100 requests in, `{embeddings: [{values}]}` out
 *
 * (the API key in the `x-goog-api-key` header). Every request is recorded; each answer is
 * scripted per test with `script(...)` (one reply per request, in order), falling back to
 * `setDefault(...)` and then to a short text answer. A reply describes an answer once
 * (`{ answer }`) and is rendered for whichever endpoint was called, so tests through the
 * whole app need not know whether the app streams.
 */
export interface FakeGemini {
  /** The base URL for `httpOptions.baseUrl` (no trailing slash, no version). */
  url: string;
  requests: RecordedGeminiRequest[];
  /** Queues replies, one per coming request. A function reply decides from the request. */
  script(...replies: FakeGeminiScript[]): void;
  /** What requests get once the queue is empty (by default: `{ answer: { text: 'Hello from the fake Gemini.' } }`). */
  setDefault(reply: FakeGeminiScript): void;
  /** Forgets recorded requests, queued replies and the default. */
  reset(): void;
  /** Resolves once a request has arrived (counting those already recorded): `await fake.waitForRequests(1)`. */
  waitForRequests(count: number, timeoutMs?: number): Promise<RecordedGeminiRequest[]>;
  close(): Promise<void>;
}

export interface RecordedGeminiRequest {
  method: string;
  /** Path without the query, e.g. `/v1beta/models/gemini-2.5-flash:generateContent`. */
  path: string;
  query: Record<string, string>;
  /** `gemini-2.5-flash` for the path above; undefined for other paths. */
  model?: string;
  /** `generateContent`, `streamGenerateContent`, ... */
  action?: string;
  stream: boolean;
  headers: IncomingHttpHeaders;
  apiKey?: string;
  /** The parsed JSON body (undefined when it did not parse); `rawBody` has the text. */
  body: GeminiRequestBody | undefined;
  rawBody: string;
  /** True once the client closed the connection before the reply was complete. */
  clientClosedEarly: boolean;
  /** Resolves when the exchange is over (reply sent, failed on purpose, or client gone). */
  finished: Promise<void>;
}

/** The parts of a generateContent request body the tests look at; the rest is there too. */
export interface GeminiRequestBody {
  contents?: Array<{ role?: string; parts?: Array<Record<string, any>> }>;
  systemInstruction?: { role?: string; parts?: Array<Record<string, any>> };
  tools?: Array<{ functionDeclarations?: Array<Record<string, any>> }>;
  toolConfig?: { functionCallingConfig?: { mode?: string; allowedFunctionNames?: string[] } };
  generationConfig?: Record<string, any>;
  [key: string]: unknown;
}

export type FakeGeminiScript = FakeGeminiReply | ((request: RecordedGeminiRequest) => FakeGeminiReply);

export type FakeGeminiReply =
  | ({ answer: GeminiAnswer } & StreamControl)
  | { error: GeminiErrorReply }
  /** Stream events exactly: objects are JSON-encoded, strings go out verbatim (malformed data). generateContent answers the last one. */
  | ({ events: Array<unknown> } & StreamControl)
  /** Any status and body, for both endpoints. */
  | { raw: { status?: number; headers?: Record<string, string>; body: string } };

/** A model answer, rendered as one JSON body or as a stream of events. */
export interface GeminiAnswer {
  /** A string is streamed word by word; an array gives the stream pieces exactly. */
  text?: string | string[];
  /** A thought part before the text (thinking models with `includeThoughts`; adapters must skip it). */
  thought?: string;
  functionCalls?: Array<{ name: string; args?: Record<string, unknown>; id?: string }>;
  /** Default `STOP`; `null` leaves it out (a stream that never says it finished). */
  finishReason?: string | null;
  usage?: GeminiUsage;
  responseId?: string;
  modelVersion?: string;
  /** A blocked prompt: no candidates, only `promptFeedback`. */
  blockReason?: string;
  /**
   * Log probabilities of the first candidate's tokens, sent (as `logprobsResult`) only when the
   * request asks with `responseLogprobs`, and with as many top candidates as its `logprobs` says.
   */
  logprobs?: Array<{ token: string; logProbability: number; top?: Array<{ token: string; logProbability: number }> }>;
  /** Several candidates (`candidateCount`): the answer of each further candidate. */
  moreCandidates?: Array<Pick<GeminiAnswer, 'text' | 'functionCalls' | 'finishReason'>>;
}

export interface GeminiUsage {
  promptTokenCount?: number;
  candidatesTokenCount?: number;
  thoughtsTokenCount?: number;
  cachedContentTokenCount?: number;
  toolUsePromptTokenCount?: number;
  totalTokenCount?: number;
}

export interface StreamControl {
  /** Delay before the response headers. */
  headerDelayMs?: number;
  /** Delay before each stream event (the first included); an array gives each event its own (missing: 0). */
  eventDelayMs?: number | number[];
  /** Streams only: destroy the socket after this many events (a connection lost mid-stream). */
  failAfterEvents?: number;
}

export interface GeminiErrorReply {
  status: number;
  message?: string;
  /** Google's status name; derived from `status` when absent (429 -> RESOURCE_EXHAUSTED, ...). */
  statusName?: string;
  /** Adds Google's RetryInfo detail (`"retryDelay": "<n>s"`). */
  retryDelaySeconds?: number;
  /** ErrorInfo reason, e.g. `API_KEY_INVALID`. */
  reason?: string;
  headers?: Record<string, string>;
  headerDelayMs?: number;
}

const STATUS_NAMES: Record<number, string> = {
  400: 'INVALID_ARGUMENT',
  401: 'UNAUTHENTICATED',
  403: 'PERMISSION_DENIED',
  404: 'NOT_FOUND',
  409: 'ABORTED',
  429: 'RESOURCE_EXHAUSTED',
  499: 'CANCELLED',
  500: 'INTERNAL',
  501: 'NOT_IMPLEMENTED',
  503: 'UNAVAILABLE',
  504: 'DEADLINE_EXCEEDED',
};

const ACTIONS = ['generateContent', 'streamGenerateContent', 'embedContent', 'batchEmbedContents'];

const DEFAULT_REPLY: FakeGeminiReply = { answer: { text: 'Hello from the fake Gemini.' } };

export interface FakeGeminiOptions {
  /** When set, requests with another `x-goog-api-key` get Google's answer to a wrong key (400 API_KEY_INVALID). */
  apiKey?: string;
}

export async function startFakeGemini(options: FakeGeminiOptions = {}): Promise<FakeGemini> {
  const requests: RecordedGeminiRequest[] = [];
  const queue: FakeGeminiScript[] = [];
  let fallback: FakeGeminiScript = DEFAULT_REPLY;
  const sockets = new Set<Socket>();
  const waiters: Array<{ count: number; resolve: () => void }> = [];

  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const recorded = record(req, Buffer.concat(chunks).toString('utf8'), res);
      requests.push(recorded);
      for (const waiter of [...waiters]) {
        if (requests.length >= waiter.count) {
          waiters.splice(waiters.indexOf(waiter), 1);
          waiter.resolve();
        }
      }
      const reply = pickReply(recorded);
      respond(recorded, reply, res).catch(() => res.destroy());
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  function pickReply(request: RecordedGeminiRequest): FakeGeminiReply {
    if (options.apiKey !== undefined && request.apiKey !== options.apiKey) {
      return { error: { status: 400, message: 'API key not valid. Please pass a valid API key.', reason: 'API_KEY_INVALID' } };
    }
    if (!request.model || !ACTIONS.includes(request.action ?? '') || request.method !== 'POST') {
      return { error: { status: 404, message: `Method ${request.method} ${request.path} is not found in this fake.` } };
    }
    const script = queue.shift() ?? fallback;
    return typeof script === 'function' ? script(request) : script;
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...replies) => queue.push(...replies),
    setDefault: (reply) => {
      fallback = reply;
    },
    reset: () => {
      requests.length = 0;
      queue.length = 0;
      fallback = DEFAULT_REPLY;
    },
    waitForRequests: (count, timeoutMs = 5_000) =>
      new Promise((resolve, reject) => {
        if (requests.length >= count) return resolve(requests);
        const timer = setTimeout(() => reject(new Error(`The fake Gemini got ${requests.length} of ${count} requests`)), timeoutMs);
        waiters.push({ count, resolve: () => (clearTimeout(timer), resolve(requests)) });
      }),
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

function record(req: IncomingMessage, rawBody: string, res: ServerResponse): RecordedGeminiRequest {
  const url = new URL(req.url ?? '/', 'http://fake');
  const match = /^\/v1beta\/models\/([^/:]+):([A-Za-z]+)$/.exec(url.pathname);
  let body: GeminiRequestBody | undefined;
  try {
    body = JSON.parse(rawBody) as GeminiRequestBody;
  } catch {
    body = undefined;
  }
  const recorded = {
    method: req.method ?? 'GET',
    path: url.pathname,
    query: Object.fromEntries(url.searchParams),
    model: match ? decodeURIComponent(match[1]) : undefined,
    action: match?.[2],
    stream: match?.[2] === 'streamGenerateContent',
    headers: req.headers,
    apiKey: typeof req.headers['x-goog-api-key'] === 'string' ? req.headers['x-goog-api-key'] : undefined,
    body,
    rawBody,
    clientClosedEarly: false,
  } as RecordedGeminiRequest;
  recorded.finished = new Promise<void>((resolve) => {
    res.on('close', () => {
      if (!res.writableFinished) recorded.clientClosedEarly = true;
      resolve();
    });
  });
  return recorded;
}

async function respond(request: RecordedGeminiRequest, reply: FakeGeminiReply, res: ServerResponse): Promise<void> {
  // (Not `req.destroyed`: a request is destroyed once its body has been read.)
  let closed = false;
  res.on('close', () => (closed = true));
  const gone = () => closed || res.destroyed;

  if ('raw' in reply) {
    res.writeHead(reply.raw.status ?? 200, { 'content-type': 'application/json; charset=UTF-8', ...reply.raw.headers });
    res.end(reply.raw.body);
    return;
  }
  if ('error' in reply) {
    await sleep(reply.error.headerDelayMs);
    if (gone()) return;
    res.writeHead(reply.error.status, { 'content-type': 'application/json; charset=UTF-8', ...reply.error.headers });
    res.end(JSON.stringify(googleErrorBody(reply.error)));
    return;
  }

  await sleep(reply.headerDelayMs);
  if (gone()) return;
  if (request.action === 'embedContent' || request.action === 'batchEmbedContents') {
    // Any reply but an error or a raw body is answered with the vectors.
    const answer = embeddingAnswer(request);
    res.writeHead(answer.status, { 'content-type': 'application/json; charset=UTF-8' });
    res.end(JSON.stringify(answer.body));
    return;
  }
  if (!request.stream) {
    res.writeHead(200, { 'content-type': 'application/json; charset=UTF-8' });
    res.end(JSON.stringify('answer' in reply ? renderAnswer(reply.answer, request) : reply.events[reply.events.length - 1]));
    return;
  }

  const events = 'answer' in reply ? renderStream(reply.answer, request) : reply.events;
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  res.flushHeaders();
  for (let i = 0; i < events.length; i++) {
    if (reply.failAfterEvents !== undefined && i >= reply.failAfterEvents) {
      res.destroy();
      return;
    }
    await sleep(Array.isArray(reply.eventDelayMs) ? reply.eventDelayMs[i] : reply.eventDelayMs);
    if (gone()) return;
    // Strings go out verbatim after `data: `, so tests can send malformed events.
    const event = events[i];
    const data = `data: ${typeof event === 'string' ? event : JSON.stringify(event)}\r\n\r\n`;
    // Flushed before going on, so that a failure after it cannot swallow it.
    await new Promise<void>((resolve) => res.write(data, () => resolve()));
  }
  if (reply.failAfterEvents !== undefined && reply.failAfterEvents <= events.length) {
    res.destroy();
    return;
  }
  res.end();
}

/** Google's error body: `{"error": {"code", "message", "status", "details"?}}`. */
export function googleErrorBody(error: GeminiErrorReply): { error: Record<string, unknown> } {
  const details: unknown[] = [];
  if (error.reason) {
    details.push({ '@type': 'type.googleapis.com/google.rpc.ErrorInfo', reason: error.reason, domain: 'googleapis.com' });
  }
  if (error.retryDelaySeconds !== undefined) {
    details.push({ '@type': 'type.googleapis.com/google.rpc.RetryInfo', retryDelay: `${error.retryDelaySeconds}s` });
  }
  return {
    error: {
      code: error.status,
      message: error.message ?? `The fake Gemini failed with HTTP ${error.status}.`,
      status: error.statusName ?? STATUS_NAMES[error.status] ?? 'UNKNOWN',
      ...(details.length > 0 ? { details } : {}),
    },
  };
}

/** The whole answer as `generateContent` returns it. */
export function renderAnswer(answer: GeminiAnswer, request?: RecordedGeminiRequest): Record<string, unknown> {
  const base = envelope(answer, usageOf(answer, request));
  if (answer.blockReason) return { ...base, promptFeedback: { blockReason: answer.blockReason } };
  const all = [answer, ...(answer.moreCandidates ?? [])];
  return {
    ...base,
    candidates: all.map((one, index) => ({
      content: { role: 'model', parts: [...(index === 0 ? thoughtParts(answer) : []), ...textParts(one.text), ...callParts(one.functionCalls)] },
      ...finish(one.finishReason),
      ...(index === 0 ? logprobsOf(answer, request) : {}),
      index,
    })),
  };
}

/** `logprobsResult` as Gemini sends it, when the request asked for it. */
function logprobsOf(answer: GeminiAnswer, request?: RecordedGeminiRequest): Record<string, unknown> {
  const config = request?.body?.generationConfig;
  if (!answer.logprobs || config?.responseLogprobs !== true) return {};
  const top = typeof config.logprobs === 'number' ? config.logprobs : 0;
  return {
    logprobsResult: {
      chosenCandidates: answer.logprobs.map(({ token, logProbability }) => ({ token, logProbability })),
      topCandidates: answer.logprobs.map((step) => ({ candidates: (step.top ?? []).slice(0, top) })),
      logProbabilitySum: answer.logprobs.reduce((sum, step) => sum + step.logProbability, 0),
    },
  };
}

/**
 * The answer as `streamGenerateContent` events: the thought, the text piece by piece, the
 * function calls whole (as Gemini sends them), the finish reason and full usage on the last
 * event; every event carries the running usage, as Gemini's do.
 */
export function renderStream(answer: GeminiAnswer, request?: RecordedGeminiRequest): Array<Record<string, unknown>> {
  const usage = usageOf(answer, request);
  const running = { promptTokenCount: usage.promptTokenCount, totalTokenCount: usage.promptTokenCount };
  if (answer.blockReason) return [{ ...envelope(answer, usage), promptFeedback: { blockReason: answer.blockReason } }];

  const all = [answer, ...(answer.moreCandidates ?? [])];
  const events: Array<Record<string, unknown>> = [];
  all.forEach((one, index) => {
    const pieces: Part[][] = [];
    if (index === 0 && answer.thought) pieces.push(thoughtParts(answer));
    const text = typeof one.text === 'string' ? one.text.split(/(?<= )/) : (one.text ?? []);
    for (const piece of text) pieces.push([{ text: piece }]);
    if (one.functionCalls?.length) pieces.push(callParts(one.functionCalls));
    if (pieces.length === 0) pieces.push([{ text: '' }]);
    pieces.forEach((parts, n) => {
      const last = n === pieces.length - 1;
      events.push({
        ...envelope(answer, running),
        candidates: [
          { content: { role: 'model', parts }, index, ...(last ? finish(one.finishReason) : {}), ...(last && index === 0 ? logprobsOf(answer, request) : {}) },
        ],
      });
    });
  });
  events[events.length - 1] = { ...events[events.length - 1], usageMetadata: usage };
  return events;
}

type Part = Record<string, unknown>;

function envelope(answer: GeminiAnswer, usage: GeminiUsage): Record<string, unknown> {
  return {
    usageMetadata: usage,
    modelVersion: answer.modelVersion ?? 'fake-gemini-001',
    responseId: answer.responseId ?? 'fakeResponse0001',
  };
}

function thoughtParts(answer: GeminiAnswer): Part[] {
  return answer.thought ? [{ text: answer.thought, thought: true }] : [];
}

function textParts(text: GeminiAnswer['text']): Part[] {
  const joined = Array.isArray(text) ? text.join('') : text;
  return joined ? [{ text: joined }] : [];
}

function callParts(calls: GeminiAnswer['functionCalls']): Part[] {
  return (calls ?? []).map((call) => ({ functionCall: { name: call.name, args: call.args ?? {}, ...(call.id ? { id: call.id } : {}) } }));
}

function finish(reason: string | null | undefined): Record<string, unknown> {
  return reason === null ? {} : { finishReason: reason ?? 'STOP' };
}

/** The scripted usage, or a deterministic estimate (4 characters a token). */
function usageOf(answer: GeminiAnswer, request?: RecordedGeminiRequest): GeminiUsage {
  const estimate = (text: string) => Math.max(1, Math.ceil(text.length / 4));
  const promptTokenCount = answer.usage?.promptTokenCount ?? estimate(JSON.stringify(request?.body?.contents ?? ''));
  const all = [answer, ...(answer.moreCandidates ?? [])];
  const candidatesTokenCount =
    answer.usage?.candidatesTokenCount ??
    all.reduce((sum, one) => sum + estimate(textParts(one.text).map((p) => p.text).join('') + JSON.stringify(one.functionCalls ?? '')), 0);
  const usage: GeminiUsage = { ...answer.usage, promptTokenCount, candidatesTokenCount };
  usage.totalTokenCount =
    answer.usage?.totalTokenCount ??
    promptTokenCount + candidatesTokenCount + (usage.thoughtsTokenCount ?? 0) + (usage.toolUsePromptTokenCount ?? 0);
  return usage;
}

function sleep(ms: number | undefined): Promise<void> {
  // Unreferenced: a test that ends while a reply is still waiting does not keep Jest alive.
  return ms && ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms).unref()) : Promise.resolve();
}

/** Gemini's native embedding size (gemini-embedding-001), and the most requests one batchEmbedContents takes. */
export const FAKE_GEMINI_EMBEDDING_DIMENSIONS = 3_072;
export const GEMINI_EMBED_BATCH_LIMIT = 100;

/**
 * The fake's Gemini embedding of a text, as Gemini makes them (Matryoshka): the native vector
 * has unit length, and `outputDimensionality` keeps its first values without normalising them
 * again (Google's docs ask the caller to). Float32, drawn from a generator seeded with the
 * SHA-256 of the text (one hash a vector: 2048 inputs stay cheap).
 */
export function fakeGeminiEmbedding(text: string, dimensions = FAKE_GEMINI_EMBEDDING_DIMENSIONS): Float32Array {
  let seed = createHash('sha256').update(`gemini:${text}`).digest().readUInt32LE(0);
  const next = () => {
    seed = (seed + 0x6d2b79f5) >>> 0;
    let t = Math.imul(seed ^ (seed >>> 15), seed | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 2 ** 31 - 1;
  };
  const full = Array.from({ length: FAKE_GEMINI_EMBEDDING_DIMENSIONS }, next);
  const norm = Math.sqrt(full.reduce((sum, value) => sum + value * value, 0));
  return Float32Array.from(full.slice(0, dimensions), (value) => value / norm);
}

type EmbedContentRequest = { model?: string; content?: { parts?: Array<{ text?: unknown }> }; outputDimensionality?: unknown; taskType?: unknown };

/** The answer of `embedContent` or `batchEmbedContents`, or Google's 400 for what the real API refuses. */
function embeddingAnswer(request: RecordedGeminiRequest): { status: number; body: unknown } {
  const invalid = (message: string) => ({ status: 400, body: googleErrorBody({ status: 400, message }) });
  const body = request.body as (EmbedContentRequest & { requests?: EmbedContentRequest[] }) | undefined;
  const batch = request.action === 'batchEmbedContents';
  const items = batch ? body?.requests : body ? [body] : undefined;
  if (!Array.isArray(items) || items.length === 0) return invalid('* BatchEmbedContentsRequest.requests: contents is not specified');
  if (items.length > GEMINI_EMBED_BATCH_LIMIT) return invalid(`* BatchEmbedContentsRequest.requests: at most ${GEMINI_EMBED_BATCH_LIMIT} requests can be in one batch`);
  const vectors: number[][] = [];
  for (const [index, item] of items.entries()) {
    if (batch && item.model !== `models/${request.model}`) {
      return invalid(`* BatchEmbedContentsRequest.requests[${index}].model: the model must match the one of the URL, models/${request.model}`);
    }
    const text = (item.content?.parts ?? []).map((part) => (typeof part.text === 'string' ? part.text : '')).join('');
    if (text === '') return invalid(`* BatchEmbedContentsRequest.requests[${index}].content: contains an empty text`);
    const dimensions = item.outputDimensionality ?? FAKE_GEMINI_EMBEDDING_DIMENSIONS;
    if (typeof dimensions !== 'number' || dimensions < 1 || dimensions > FAKE_GEMINI_EMBEDDING_DIMENSIONS) return invalid('outputDimensionality is out of range');
    vectors.push(Array.from(fakeGeminiEmbedding(text, dimensions)));
  }
  return { status: 200, body: batch ? { embeddings: vectors.map((values) => ({ values })) } : { embedding: { values: vectors[0] } } };
}
