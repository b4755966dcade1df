import { randomBytes } from 'node:crypto';
import { createServer, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * A stand-in for Anthropic's Messages API on 127.0.0.1: `POST /v1/messages` answered with
 * JSON, or with server-sent events when the request says `stream: true`, in the wire
 * format Anthropic uses. It records every request and answers each with the next scripted
 * scenario (or the default one). Point an Anthropic client at `url` (the SDK appends
 * `/v1/messages`), e.g. ANTHROPIC_BASE_URL for the whole app.
 *
 *   const fake = await startFakeAnthropic();
 *   fake.script(textReply('Hello!', { usage: { input_tokens: 12, output_tokens: 3 } }));
 *   ... call the adapter or the app ...
 *   expect(fake.requests[0].body.system).toBe('Be brief.');
 *   await fake.close();
 */

export interface RecordedRequest {
  method: string;
  path: string;
  headers: IncomingHttpHeaders;
  /** The parsed JSON body (undefined when it did not parse). */
  body: any;  
  rawBody: string;
  receivedAt: number;
  /** Status the fake answered with. */
  status?: number;
  /** SSE events written (pings included), for streams. */
  eventsSent: number;
  /** Set when the client closed the connection before the answer was complete. */
  clientClosedAt?: number;
}

export interface FakeUsage {
  input_tokens?: number;
  output_tokens?: number;
  cache_read_input_tokens?: number;
  cache_creation_input_tokens?: number;
}

export type FakeBlock =
  /** With `citations`, streamed as text_delta pieces then one citations_delta per citation. */
  | { type: 'text'; text: string; citations?: Array<Record<string, unknown>> }
  | { type: 'tool_use'; id?: string; name: string; input: Record<string, unknown> }
  | { type: 'thinking'; thinking: string; signature?: string }
  | { type: 'redacted_thinking'; data: string };

export interface StreamOptions {
  /** Pause before each event after the first, in ms. */
  delayMs?: number;
  /** Characters per text_delta / input_json_delta; text goes word by word and JSON in ~3 pieces by default. */
  chunkSize?: number;
  /** Send `event: ping` after message_start, as Anthropic does (default true). */
  ping?: boolean;
  /** Inject `failure` after this many events (pings included). */
  failAfter?: number;
  /**
   * - `error_event`: an `event: error` frame (default: overloaded_error), then the response ends
   * - `destroy`: the socket is destroyed mid-response
   * - `end`: the response ends cleanly without the remaining events (no message_stop)
   * - `malformed`: a content_block_delta whose data line is not valid JSON, then the rest
   * - `hang`: nothing more is sent and the response stays open
   */
  failure?: 'error_event' | 'destroy' | 'end' | 'malformed' | 'hang';
  error?: { type: string; message: string };
}

export interface ReplyScenario {
  kind: 'reply';
  content: FakeBlock[];
  /** Default: tool_use when the content has a tool_use block, end_turn otherwise. */
  stopReason?: 'end_turn' | 'max_tokens' | 'stop_sequence' | 'tool_use' | 'pause_turn' | 'refusal' | string;
  stopSequence?: string | null;
  /** Default: input ≈ request bytes / 4, output ≈ answer characters / 4. */
  usage?: FakeUsage;
  id?: string;
  /** Default: the model the request named. */
  model?: string;
  /** Wait before answering at all (headers included), in ms. */
  delayMs?: number;
  stream?: StreamOptions;
}

export interface HttpErrorScenario {
  kind: 'http_error';
  status: number;
  /** Anthropic's error type; by default the one Anthropic uses for the status. */
  type?: string;
  message?: string;
  headers?: Record<string, string>;
  /** A body to send verbatim instead of Anthropic's error JSON. */
  rawBody?: string;
  delayMs?: number;
}

/** Hand-written SSE: each frame is an `{event, data}` (data JSON-encoded unless a string) or a raw string. */
export interface RawSseScenario {
  kind: 'sse';
  frames: Array<{ event: string; data: unknown } | string>;
  delayMs?: number;
  end?: 'end' | 'destroy' | 'hang';
}

export interface HandlerScenario {
  kind: 'handler';
  handle(request: RecordedRequest, res: ServerResponse): void | Promise<void>;
}

export type Scenario = ReplyScenario | HttpErrorScenario | RawSseScenario | HandlerScenario;
export type ScenarioSource = Scenario | ((request: RecordedRequest) => Scenario);

/** What `POST /v1/messages/count_tokens` answers: `{input_tokens}`, or an HTTP error. */
export type CountTokensAnswer = { input_tokens: number } | HttpErrorScenario;

export interface FakeAnthropicOptions {
  /** When set, requests with another x-api-key get Anthropic's 401. */
  apiKey?: string;
  /** Check requests against the Messages API's rules and answer 400 as Anthropic would (default true). */
  validate?: boolean;
  /** Answer to requests when no scenario is queued (default: a short text reply). */
  fallback?: ScenarioSource;
}

export interface FakeAnthropic {
  /** Base URL, without /v1. */
  url: string;
  requests: RecordedRequest[];
  /** Queues scenarios, used one per request in order. */
  script(...next: ScenarioSource[]): void;
  /** What requests get once the queue is empty. */
  setFallback(fallback: ScenarioSource): void;
  /** What count_tokens answers from now on (default: input ≈ request bytes / 4). */
  setCountTokens(answer: CountTokensAnswer | undefined): void;
  /** Forgets recorded requests and queued scenarios. */
  reset(): void;
  /** Resolves when `count` requests were received. */
  waitForRequests(count: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

export function textReply(text: string, options: Omit<ReplyScenario, 'kind' | 'content'> = {}): ReplyScenario {
  return { kind: 'reply', content: [{ type: 'text', text }], ...options };
}

export function toolUseReply(
  calls: Array<{ name: string; input: Record<string, unknown>; id?: string }>,
  options: Omit<ReplyScenario, 'kind' | 'content'> & { text?: string } = {},
): ReplyScenario {
  const { text, ...rest } = options;
  return {
    kind: 'reply',
    content: [...(text ? [{ type: 'text' as const, text }] : []), ...calls.map((call) => ({ type: 'tool_use' as const, ...call }))],
    ...rest,
  };
}

const ERROR_TYPES: Record<number, [type: string, message: string]> = {
  400: ['invalid_request_error', 'Invalid request'],
  401: ['authentication_error', 'invalid x-api-key'],
  402: ['billing_error', 'Your credit balance is too low to access the Anthropic API.'],
  403: ['permission_error', 'Your API key does not have permission to use the specified resource.'],
  404: ['not_found_error', 'Not found'],
  413: ['request_too_large', 'Request exceeds the maximum allowed number of bytes.'],
  429: ['rate_limit_error', 'Number of request tokens has exceeded your per-minute rate limit'],
  500: ['api_error', 'Internal server error'],
  504: ['timeout_error', 'Request timeout'],
  529: ['overloaded_error', 'Overloaded'],
};

export function httpError(status: number, options: Omit<HttpErrorScenario, 'kind' | 'status'> = {}): HttpErrorScenario {
  return { kind: 'http_error', status, ...options };
}

export function rateLimited(retryAfterSeconds: number): HttpErrorScenario {
  return httpError(429, { headers: { 'retry-after': String(retryAfterSeconds) } });
}

export async function startFakeAnthropic(options: FakeAnthropicOptions = {}): Promise<FakeAnthropic> {
  const requests: RecordedRequest[] = [];
  const queue: ScenarioSource[] = [];
  let fallback: ScenarioSource = options.fallback ?? textReply('Hello from the fake Anthropic server.');
  const waiters: Array<{ count: number; resolve: () => void }> = [];
  let countTokens: CountTokensAnswer | undefined;

  const server = createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendError(res, 500, 'api_error', `fake-anthropic: ${(error as Error).message}`);
      else res.destroy();
    });
  });

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const rawBody = Buffer.concat(chunks).toString('utf8');
    let body: unknown;
    try {
      body = rawBody ? JSON.parse(rawBody) : undefined;
    } catch {
      body = undefined;
    }
    const recorded: RecordedRequest = {
      method: req.method ?? '',
      path: req.url ?? '',
      headers: req.headers,
      body,
      rawBody,
      receivedAt: Date.now(),
      eventsSent: 0,
    };
    requests.push(recorded);
    res.on('close', () => {
      if (!res.writableFinished) recorded.clientClosedAt = Date.now();
    });
    for (const waiter of waiters.filter((w) => requests.length >= w.count)) {
      waiters.splice(waiters.indexOf(waiter), 1);
      waiter.resolve();
    }

    const answer = (status: number) => (recorded.status = status);
    const path = (req.url ?? '').split('?')[0];
    if (req.method !== 'POST' || (path !== '/v1/messages' && path !== '/v1/messages/count_tokens')) {
      answer(404);
      return sendError(res, 404, 'not_found_error', `Not found: ${req.method} ${path}`);
    }
    if (options.apiKey !== undefined && req.headers['x-api-key'] !== options.apiKey) {
      answer(401);
      return sendError(res, 401, 'authentication_error', 'invalid x-api-key');
    }
    if (!req.headers['anthropic-version']) {
      answer(400);
      return sendError(res, 400, 'invalid_request_error', 'anthropic-version: header is required');
    }
    if (body === undefined) {
      answer(400);
      return sendError(res, 400, 'invalid_request_error', 'The request body is not valid JSON.');
    }

    if (path === '/v1/messages/count_tokens') {
      const counted = countTokens ?? { input_tokens: Math.max(1, Math.ceil(rawBody.length / 4)) };
      if ('kind' in counted) {
        answer(counted.status);
        return sendError(res, counted.status, counted.type ?? ERROR_TYPES[counted.status]?.[0] ?? 'api_error', counted.message ?? 'Error');
      }
      answer(200);
      res.writeHead(200, { 'content-type': 'application/json', 'request-id': requestId() });
      res.end(JSON.stringify(counted));
      return;
    }

    const next = queue.shift() ?? fallback;
    const scenario = typeof next === 'function' ? next(recorded) : next;
    if (scenario.kind === 'handler') return scenario.handle(recorded, res);
    if (scenario.kind === 'http_error') {
      if (scenario.delayMs) await pause(scenario.delayMs);
      answer(scenario.status);
      const [defaultType, defaultMessage] = ERROR_TYPES[scenario.status] ?? ['api_error', 'Error'];
      return sendError(res, scenario.status, scenario.type ?? defaultType, scenario.message ?? defaultMessage, scenario.headers, scenario.rawBody);
    }
    if (options.validate !== false) {
      const problem = validateMessagesRequest(body);
      if (problem) {
        answer(400);
        return sendError(res, 400, 'invalid_request_error', problem);
      }
    }
    const request = body as { stream?: boolean; model?: string };
    if (scenario.kind === 'sse') {
      answer(200);
      return sendFrames(res, recorded, scenario.frames.map(frame), scenario.delayMs ?? 0, scenario.end ?? 'end');
    }
    if (scenario.delayMs) await pause(scenario.delayMs);
    const message = buildMessage(scenario, request.model ?? 'claude', rawBody);
    answer(200);
    if (request.stream !== true) {
      res.writeHead(200, { 'content-type': 'application/json', 'request-id': requestId() });
      res.end(JSON.stringify(message));
      return;
    }
    return sendStream(res, recorded, message, scenario.stream ?? {});
  }

  async function sendStream(res: ServerResponse, recorded: RecordedRequest, message: AnthropicMessage, stream: StreamOptions): Promise<void> {
    const frames = streamFrames(message, stream);
    const failAt = stream.failAfter ?? (stream.failure ? frames.length - 1 : undefined);
    if (failAt === undefined || !stream.failure) return sendFrames(res, recorded, frames, stream.delayMs ?? 0, 'end');
    const before = frames.slice(0, failAt);
    switch (stream.failure) {
      case 'error_event': {
        const error = stream.error ?? { type: 'overloaded_error', message: 'Overloaded' };
        return sendFrames(res, recorded, [...before, frame({ event: 'error', data: { type: 'error', error } })], stream.delayMs ?? 0, 'end');
      }
      case 'malformed': {
        const broken = 'event: content_block_delta\ndata: {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "oops"\n\n';
        return sendFrames(res, recorded, [...before, broken, ...frames.slice(failAt)], stream.delayMs ?? 0, 'end');
      }
      default:
        return sendFrames(res, recorded, before, stream.delayMs ?? 0, stream.failure);
    }
  }

  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;

  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    script: (...next) => queue.push(...next),
    setFallback: (next) => {
      fallback = next;
    },
    setCountTokens: (next) => {
      countTokens = next;
    },
    reset: () => {
      requests.length = 0;
      queue.length = 0;
    },
    waitForRequests: (count, timeoutMs = 5_000) =>
      new Promise<void>((resolve, reject) => {
        if (requests.length >= count) return resolve();
        const timer = setTimeout(() => reject(new Error(`fake-anthropic: ${requests.length} of ${count} requests after ${timeoutMs} ms`)), timeoutMs);
        waiters.push({ count, resolve: () => (clearTimeout(timer), resolve()) });
      }),
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        server.closeAllConnections();
      }),
  };
}

// ---------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------

interface AnthropicMessage {
  id: string;
  type: 'message';
  role: 'assistant';
  model: string;
  content: Array<Record<string, unknown>>;
  stop_reason: string | null;
  stop_sequence: string | null;
  usage: Required<FakeUsage> & { service_tier: string };
}

function buildMessage(scenario: ReplyScenario, model: string, rawBody: string): AnthropicMessage {
  const content = scenario.content.map((block) => {
    if (block.type === 'text') return { type: 'text', text: block.text, ...(block.citations ? { citations: block.citations } : {}) };
    if (block.type === 'thinking') return { type: 'thinking', thinking: block.thinking, signature: block.signature ?? randomId('sig_', 16) };
    if (block.type === 'redacted_thinking') return { type: 'redacted_thinking', data: block.data };
    return { type: 'tool_use', id: block.id ?? randomId('toolu_01', 12), name: block.name, input: block.input };
  });
  const outputChars = scenario.content.reduce(
    (sum, block) =>
      sum +
      (block.type === 'text' ? block.text.length : block.type === 'thinking' ? block.thinking.length : block.type === 'redacted_thinking' ? 0 : JSON.stringify(block.input).length),
    0,
  );
  return {
    id: scenario.id ?? randomId('msg_01', 12),
    type: 'message',
    role: 'assistant',
    model: scenario.model ?? model,
    content,
    stop_reason: scenario.stopReason ?? (content.some((b) => b.type === 'tool_use') ? 'tool_use' : 'end_turn'),
    stop_sequence: scenario.stopSequence ?? null,
    usage: {
      input_tokens: scenario.usage?.input_tokens ?? Math.max(1, Math.ceil(rawBody.length / 4)),
      cache_creation_input_tokens: scenario.usage?.cache_creation_input_tokens ?? 0,
      cache_read_input_tokens: scenario.usage?.cache_read_input_tokens ?? 0,
      output_tokens: scenario.usage?.output_tokens ?? Math.max(1, Math.ceil(outputChars / 4)),
      service_tier: 'standard',
    },
  };
}

/** The events Anthropic streams for a message, each as an SSE frame. */
function streamFrames(message: AnthropicMessage, options: StreamOptions): string[] {
  const { usage } = message;
  const events: Array<{ event: string; data: unknown }> = [
    {
      event: 'message_start',
      data: {
        type: 'message_start',
        message: { ...message, content: [], stop_reason: null, stop_sequence: null, usage: { ...usage, output_tokens: 1 } },
      },
    },
  ];
  if (options.ping !== false) events.push({ event: 'ping', data: { type: 'ping' } });
  message.content.forEach((block, index) => {
    const delta = (d: Record<string, unknown>) => events.push({ event: 'content_block_delta', data: { type: 'content_block_delta', index, delta: d } });
    if (block.type === 'text') {
      events.push({ event: 'content_block_start', data: { type: 'content_block_start', index, content_block: { type: 'text', text: '' } } });
      for (const piece of split(block.text as string, options.chunkSize, 'words')) delta({ type: 'text_delta', text: piece });
      for (const citation of (block.citations as unknown[] | undefined) ?? []) delta({ type: 'citations_delta', citation });
    } else if (block.type === 'redacted_thinking') {
      events.push({ event: 'content_block_start', data: { type: 'content_block_start', index, content_block: block } });
    } else if (block.type === 'thinking') {
      events.push({ event: 'content_block_start', data: { type: 'content_block_start', index, content_block: { type: 'thinking', thinking: '', signature: '' } } });
      for (const piece of split(block.thinking as string, options.chunkSize, 'words')) delta({ type: 'thinking_delta', thinking: piece });
      delta({ type: 'signature_delta', signature: block.signature });
    } else {
      events.push({
        event: 'content_block_start',
        data: { type: 'content_block_start', index, content_block: { type: 'tool_use', id: block.id, name: block.name, input: {} } },
      });
      // Anthropic starts a tool's input with an empty partial_json.
      delta({ type: 'input_json_delta', partial_json: '' });
      const json = JSON.stringify(block.input);
      if (json !== '{}') for (const piece of split(json, options.chunkSize, 'thirds')) delta({ type: 'input_json_delta', partial_json: piece });
    }
    events.push({ event: 'content_block_stop', data: { type: 'content_block_stop', index } });
  });
  events.push({
    event: 'message_delta',
    data: {
      type: 'message_delta',
      delta: { stop_reason: message.stop_reason, stop_sequence: message.stop_sequence },
      usage: { output_tokens: usage.output_tokens },
    },
  });
  events.push({ event: 'message_stop', data: { type: 'message_stop' } });
  return events.map(frame);
}

function split(text: string, size: number | undefined, fallback: 'words' | 'thirds'): string[] {
  if (text === '') return [];
  const step = size ?? (fallback === 'thirds' ? Math.max(1, Math.ceil(text.length / 3)) : 0);
  if (step === 0) return text.split(/(?<= )/);
  const pieces: string[] = [];
  for (let i = 0; i < text.length; i += step) pieces.push(text.slice(i, i + step));
  return pieces;
}

function frame(value: { event: string; data: unknown } | string): string {
  if (typeof value === 'string') return value;
  return `event: ${value.event}\ndata: ${typeof value.data === 'string' ? value.data : JSON.stringify(value.data)}\n\n`;
}

async function sendFrames(
  res: ServerResponse,
  recorded: RecordedRequest,
  frames: string[],
  delayMs: number,
  end: 'end' | 'destroy' | 'hang' | 'error_event' | 'malformed',
): Promise<void> {
  res.writeHead(200, {
    'content-type': 'text/event-stream; charset=utf-8',
    'cache-control': 'no-cache',
    connection: 'keep-alive',
    'request-id': requestId(),
  });
  res.flushHeaders();
  for (const [index, text] of frames.entries()) {
    if (index > 0 && delayMs > 0) await pause(delayMs);
    if (res.destroyed) return; // the client went away
    // Each event is flushed before the next step, so a failure injected after it finds it sent.
    await new Promise<void>((resolve) => res.write(text, () => resolve()));
    recorded.eventsSent++;
  }
  if (end === 'destroy') res.socket?.destroy();
  else if (end !== 'hang') res.end();
}

function sendError(res: ServerResponse, status: number, type: string, message: string, headers: Record<string, string> = {}, rawBody?: string): void {
  const id = requestId();
  res.writeHead(status, { 'content-type': 'application/json', 'request-id': id, ...headers });
  res.end(rawBody ?? JSON.stringify({ type: 'error', error: { type, message }, request_id: id }));
}

/** A timer that does not keep the process (a test run) alive. */
function pause(ms: number): Promise<void> {
  return sleep(ms, undefined, { ref: false });
}

function requestId(): string {
  return randomId('req_011', 12);
}

function randomId(prefix: string, bytes: number): string {
  return prefix + randomBytes(bytes).toString('base64url').replace(/[-_]/g, 'x');
}

// ---------------------------------------------------------------------------------------
// Validation: the Messages API's rules that a translation can get wrong
// ---------------------------------------------------------------------------------------

type Block = { type?: string; text?: string; id?: string; tool_use_id?: string; source?: { type?: string; media_type?: string; data?: string; url?: string } };

/**
 * The problem Anthropic would report for a request, in its words where known; undefined when it would pass.
 * Deliberately conservative: roles must alternate and tool results come first in their turn,
 * as Anthropic has long required (it now merges consecutive turns itself), so that requests
 * passing here pass there.
 */
export function validateMessagesRequest(body: unknown): string | undefined {
  const b = body as Record<string, unknown>;
  if (typeof b !== 'object' || b === null) return 'The request body must be a JSON object.';
  if (typeof b.model !== 'string' || !b.model) return 'model: Field required';
  if (!Number.isInteger(b.max_tokens) || (b.max_tokens as number) < 1) return 'max_tokens: Field required (an integer >= 1)';
  if (!Array.isArray(b.messages) || b.messages.length === 0) return 'messages: at least one message is required';
  if (b.system !== undefined && typeof b.system !== 'string' && !Array.isArray(b.system)) return 'system: Input should be a valid string or list';
  if (b.temperature !== undefined && (typeof b.temperature !== 'number' || b.temperature < 0 || b.temperature > 1)) {
    return 'temperature: Input should be less than or equal to 1';
  }
  if (b.tool_choice !== undefined && !(Array.isArray(b.tools) && b.tools.length > 0)) return 'tool_choice may only be specified while providing tools.';
  if (b.stop_sequences !== undefined && (!Array.isArray(b.stop_sequences) || b.stop_sequences.some((s) => typeof s !== 'string'))) {
    return 'stop_sequences: Input should be a valid list of strings';
  }
  for (const [i, tool] of ((b.tools as Array<Record<string, unknown>> | undefined) ?? []).entries()) {
    if (typeof tool.name !== 'string' || !/^[a-zA-Z0-9_-]{1,128}$/.test(tool.name)) return `tools.${i}.name: String should match pattern '^[a-zA-Z0-9_-]{1,128}$'`;
    if ((tool.input_schema as { type?: string } | undefined)?.type !== 'object') return `tools.${i}.input_schema.type: Input should be 'object'`;
  }

  const messages = b.messages as Array<{ role?: string; content?: unknown }>;
  let pendingToolUses: string[] = [];
  for (const [i, message] of messages.entries()) {
    if (message.role !== 'user' && message.role !== 'assistant') return `messages.${i}.role: Input should be 'user' or 'assistant'`;
    const blocks: Block[] =
      typeof message.content === 'string' ? [{ type: 'text', text: message.content }] : Array.isArray(message.content) ? message.content : [];
    if (!Array.isArray(message.content) && typeof message.content !== 'string') return `messages.${i}.content: Field required`;
    if (blocks.length === 0) return `messages.${i}: all messages must have non-empty content except for the optional final assistant message`;
    for (const [j, block] of blocks.entries()) {
      if (block.type === 'text' && !block.text) return `messages.${i}.content.${j}.text: text content blocks must be non-empty`;
      if (block.type === 'image') {
        const source = block.source;
        if (source?.type === 'base64' && !['image/jpeg', 'image/png', 'image/gif', 'image/webp'].includes(source.media_type ?? '')) {
          return `messages.${i}.content.${j}.source.base64.media_type: Input should be 'image/jpeg', 'image/png', 'image/gif' or 'image/webp'`;
        }
        if (source?.type === 'url' && !/^https?:\/\//.test(source.url ?? '')) return `messages.${i}.content.${j}.source.url: invalid URL`;
      }
      if (block.type === 'tool_use' && message.role !== 'assistant') return `messages.${i}.content.${j}: tool_use blocks belong in assistant messages`;
      if (block.type === 'tool_result' && message.role !== 'user') return `messages.${i}.content.${j}: tool_result blocks belong in user messages`;
    }
    if (pendingToolUses.length > 0) {
      const results = blocks.filter((block) => block.type === 'tool_result').map((block) => block.tool_use_id);
      const missing = pendingToolUses.filter((id) => !results.includes(id));
      if (message.role !== 'user' || missing.length > 0) {
        return `messages.${i}: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${missing.join(', ')}. Each \`tool_use\` block must have a corresponding \`tool_result\` block in the next message.`;
      }
    }
    if (message.role === 'user') {
      const previous = messages[i - 1];
      const offered = new Set(
        (Array.isArray(previous?.content) ? (previous.content as Block[]) : []).filter((block) => block.type === 'tool_use').map((block) => block.id),
      );
      for (const [j, block] of blocks.entries()) {
        if (block.type !== 'tool_result') continue;
        if (!offered.has(block.tool_use_id)) {
          return `messages.${i}.content.${j}: unexpected \`tool_use_id\` found in \`tool_result\` blocks: ${block.tool_use_id}. Each \`tool_result\` block must have a corresponding \`tool_use\` block in the previous message.`;
        }
        if (blocks.slice(0, j).some((earlier) => earlier.type !== 'tool_result')) {
          return `messages.${i}: tool_result blocks must come first in the content of a user message`;
        }
      }
    }
    pendingToolUses = message.role === 'assistant' ? blocks.filter((block) => block.type === 'tool_use').map((block) => block.id ?? '') : [];
    if (i > 0 && messages[i - 1].role === message.role) return `messages: roles must alternate between "user" and "assistant" (messages.${i})`;
  }
  if (pendingToolUses.length > 0) {
    return `messages: \`tool_use\` ids were found without \`tool_result\` blocks immediately after: ${pendingToolUses.join(', ')}.`;
  }
  return undefined;
}
