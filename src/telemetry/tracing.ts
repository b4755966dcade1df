import {
  type Attributes,
  type Context,
  context,
  createContextKey,
  type Histogram,
  metrics,
  propagation,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
  type Tracer,
} from '@opentelemetry/api';
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from 'node:http';

/**
 * The service's OpenTelemetry spans and GenAI metrics (issue 45), through `@opentelemetry/api`
 * only: the SDK is loaded by telemetry-sdk.ts, and only when OTLP export is configured.
 * While it is off, every helper here is one branch on `on` and returns a shared no-op, so the
 * hot path allocates nothing and starts nothing. This folder imports nothing of src/: any
 * module may call it.
 */

let on = false;
let captureContent = false;
let tracer: Tracer;
let tokenUsage: Histogram;
let operationDuration: Histogram;

/** Turns the helpers on (telemetry-sdk.ts, once the SDK is registered with the API). */
export function enableTracing(options: { captureContent: boolean }): void {
  on = true;
  captureContent = options.captureContent;
  tracer = trace.getTracer('assistant-chat-service');
  const meter = metrics.getMeter('assistant-chat-service');
  // The GenAI conventions' client metrics, with their recommended bucket boundaries.
  tokenUsage = meter.createHistogram('gen_ai.client.token.usage', {
    unit: '{token}',
    description: 'Number of input and output tokens used',
    advice: { explicitBucketBoundaries: [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864] },
  });
  operationDuration = meter.createHistogram('gen_ai.client.operation.duration', {
    unit: 's',
    description: 'GenAI operation duration',
    advice: { explicitBucketBoundaries: [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92] },
  });
}

/** For unit specs: back to off. */
export function disableTracing(): void {
  on = false;
}

/** What an upstream attempt is sent to: the catalog's model as a deployment serves it. */
export interface AttemptInfo {
  operation: 'chat' | 'embeddings';
  /** Our provider name (openai, anthropic, google, simulator, ...). */
  provider: string;
  /** The model as the upstream is asked for it. */
  model: string;
  deployment: string;
  /** 1 for the first attempt of the call, 2 for the next (failover or retry), ... */
  attempt: number;
  maxTokens?: number;
  temperature?: number;
  /** The prompt, recorded only with OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true. */
  messages?: readonly unknown[];
}

/** What an answer (a completion, or a stream's chunk) tells of itself, in OpenAI's shape. */
interface AnswerPart {
  id?: string;
  model?: string;
  choices?: { finish_reason?: string | null; message?: { content?: unknown; tool_calls?: unknown }; delta?: { content?: unknown } }[];
  usage?: { prompt_tokens?: number; completion_tokens?: number } | null;
}

/** One upstream attempt's span (a GenAI client span), ended once, with its metrics. */
export interface AttemptSpan {
  /** Runs `fn` with this span current: the upstream request carries its `traceparent`. */
  run<T>(fn: () => Promise<T>): Promise<T>;
  /** A stream's first chunk: the time to first token. */
  firstToken(): void;
  /** A completion, or a chunk of a stream: the response's id, model, finish reasons, usage. */
  observe(part: AnswerPart): void;
  /** Embeddings: the input tokens the provider billed. */
  embedded(inputTokens: number | undefined): void;
  /** Ends it: without an error, or with the one the attempt failed with. */
  end(error?: unknown): void;
}

const NO_ATTEMPT: AttemptSpan = {
  run: (fn) => fn(),
  firstToken: () => undefined,
  observe: () => undefined,
  embedded: () => undefined,
  end: () => undefined,
};

/** The conventions' provider names where ours differ. */
const PROVIDER_NAMES: Record<string, string> = { google: 'gcp.gemini', gemini: 'gcp.gemini' };

/**
 * A request the sampler left out keeps its (non-recording) span here instead of as the
 * current span: its log lines and upstream calls still carry its trace id, but nothing below
 * it (our spans, the pg instrumentation, which skips statements without a current span) does
 * any work for a trace that will not be kept.
 */
const UNSAMPLED = createContextKey('acs.unsampled_request_span');

/** The request's span: the current one, or the unsampled request's. */
function requestSpan(active: Context): Span | undefined {
  return trace.getSpan(active) ?? (active.getValue(UNSAMPLED) as Span | undefined);
}

/** Where the server middleware leaves the request's context, for reenterMiddleware. */
const REQUEST_CONTEXT = Symbol('otel.requestContext');

export const tracing = {
  get enabled(): boolean {
    return on;
  },

  /**
   * The server span of each `/v1` request (both Express's routes and the direct routes): the
   * client's `traceparent` is its parent; the middleware after it run in its context. Null
   * while off: the middleware is not added.
   */
  serverMiddleware(): ((req: IncomingMessage & { id?: string; path?: string }, res: ServerResponse, next: () => void) => void) | null {
    if (!on) return null;
    return (req, res, next) => {
      const path = req.path ?? req.url ?? '/';
      if (!path.startsWith('/v1/') && path !== '/v1') return next();
      const parent = propagation.extract(context.active(), req.headers);
      // Named by its route once known (below): a raw path would make a name per id.
      const span = tracer.startSpan(
        req.method ?? 'GET',
        {
          kind: SpanKind.SERVER,
          attributes: {
            'http.request.method': req.method ?? 'GET',
            'url.path': path,
            'url.scheme': 'http',
            'network.protocol.version': req.httpVersion,
            'server.address': hostOf(req.headers),
            'client.address': req.socket.remoteAddress,
            'user_agent.original': req.headers['user-agent'],
            'acs.request_id': req.id,
          },
        },
        parent,
      );
      const active = span.isRecording() ? trace.setSpan(parent, span) : trace.deleteSpan(parent).setValue(UNSAMPLED, span);
      (req as { [REQUEST_CONTEXT]?: Context })[REQUEST_CONTEXT] = active;
      res.once('close', () => {
        const request = req as IncomingMessage & { route?: { path?: unknown }; baseUrl?: string; principal?: { workspaceId?: string; apiKeyId?: string | null } };
        const status = res.writableFinished ? res.statusCode : 499;
        // Nest's routes have a template; a direct route is its path.
        const route = typeof request.route?.path === 'string' ? `${request.baseUrl ?? ''}${request.route.path}` : status === 404 ? undefined : path;
        if (route) span.updateName(`${req.method} ${route}`);
        span.setAttributes({
          'http.route': route,
          'http.response.status_code': status,
          'acs.workspace_id': request.principal?.workspaceId,
          'acs.api_key_id': request.principal?.apiKeyId ?? undefined,
        });
        if (status >= 500) {
          span.setAttribute('error.type', String(status));
          span.setStatus({ code: SpanStatusCode.ERROR });
        }
        span.end();
      });
      context.with(active, next);
    };
  },

  /**
   * Goes back into the request's context after the body parser: its `next` is called from the
   * socket's events, which run outside it (binding the request's emitters instead costs a
   * closure per listener of every stream). Null while off.
   */
  reenterMiddleware(): ((req: IncomingMessage, res: ServerResponse, next: () => void) => void) | null {
    if (!on) return null;
    return (req, _res, next) => {
      const active = (req as { [REQUEST_CONTEXT]?: Context })[REQUEST_CONTEXT];
      if (active) context.with(active, next);
      else next();
    };
  },

  /** `listener` run in the current context (a response's `close`, emitted outside it); itself while off. */
  bind<F extends (...args: never[]) => unknown>(listener: F): F {
    return on ? context.bind(context.active(), listener) : listener;
  },

  /** A step of admitting a request (`api_key`, `rate_limit`, `hold`), a span when tracing is on. */
  admission<T>(step: string, fn: () => Promise<T>): Promise<T> {
    if (!on) return fn();
    return inSpan(`admission ${step}`, { 'acs.admission.step': step }, fn);
  },

  /** One call of a server tool (`execute_tool {name}`); `ran` tells whether it produced results. */
  toolCall<T>(name: string, callId: string, fn: () => Promise<T>, ran: (outcome: T) => boolean): Promise<T> {
    if (!on) return fn();
    return inSpan(
      `execute_tool ${name}`,
      { 'gen_ai.operation.name': 'execute_tool', 'gen_ai.tool.name': name, 'gen_ai.tool.call.id': callId, 'gen_ai.tool.type': 'function' },
      fn,
      (outcome, span) => {
        if (!ran(outcome)) span.setAttribute('error.type', 'tool_error');
      },
    );
  },

  /** The settlement of a request: its cost (exact, millicents) and how it ended. */
  settlement<T>(costMillicents: () => number, ending: { status: string; errorCode: string | null }, fn: () => Promise<T>): Promise<T> {
    if (!on) return fn();
    return inSpan('settlement', { 'acs.settlement.status': ending.status, 'acs.settlement.error_code': ending.errorCode ?? undefined }, fn, (_, span) =>
      span.setAttribute('cost_millicents', costMillicents()),
    );
  },

  /** An upstream attempt: a GenAI client span `{operation} {model}`, ended by its caller. */
  upstreamAttempt(info: AttemptInfo): AttemptSpan {
    return on ? new TracedAttempt(info, context.active().getValue(UNSAMPLED) === undefined) : NO_ATTEMPT;
  },

  /** `headers` with the current span's `traceparent` (a copy), or `headers` itself while off or outside a span. */
  withTraceHeaders<H extends Record<string, unknown> | undefined>(headers: H): H {
    if (!on) return headers;
    const active = context.active();
    const span = requestSpan(active);
    if (span === undefined) return headers;
    const carrier: Record<string, string> = {};
    // An unsampled request's traceparent says so (flags 00): the provider need not keep it either.
    propagation.inject(trace.setSpan(active, span), carrier);
    return { ...headers, ...carrier } as H;
  },

  /** The fields a log line of the current request carries: its trace and span ids (pino's mixin). */
  logFields(): { trace_id?: string; span_id?: string } {
    const span = requestSpan(context.active());
    if (!span) return {};
    const { traceId, spanId } = span.spanContext();
    return { trace_id: traceId, span_id: spanId };
  },
};

/** Runs `fn` in a child span of the current one (none outside a request: background work is not traced). */
async function inSpan<T>(name: string, attributes: Attributes, fn: () => Promise<T>, onResult?: (result: T, span: Span) => void): Promise<T> {
  if (trace.getSpan(context.active()) === undefined) return fn();
  const span = tracer.startSpan(name, { attributes });
  try {
    const result = await context.with(trace.setSpan(context.active(), span), fn);
    onResult?.(result, span);
    return result;
  } catch (error) {
    markFailed(span, error);
    throw error;
  } finally {
    span.end();
  }
}

function markFailed(span: Span, error: unknown): void {
  span.setAttribute('error.type', errorType(error));
  span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : undefined });
}

/** The conventions' `error.type`: our API error's code, an upstream status, or the error's name. */
function errorType(error: unknown): string {
  const e = error as { code?: unknown; status?: unknown; name?: unknown } | null;
  if (typeof e?.code === 'string') return e.code;
  if (typeof e?.status === 'number') return String(e.status);
  return typeof e?.name === 'string' ? e.name : '_OTHER';
}

function hostOf(headers: IncomingHttpHeaders): string | undefined {
  const host = headers.host;
  return host ? host.replace(/:\d+$/, '') : undefined;
}

/**
 * An attempt's span and its metrics. In a request the sampler left out (`traced` false), the
 * metrics only: the conventions' metrics count every call, sampled or not.
 */
class TracedAttempt implements AttemptSpan {
  private readonly span: Span | undefined;
  private readonly context: Context | undefined;
  private readonly started = performance.now();
  private readonly common: Attributes;
  private ended = false;
  private responseId?: string;
  private responseModel?: string;
  private finishReasons: string[] = [];
  private inputTokens?: number;
  private outputTokens?: number;
  /** A stream's text, kept only when contents are captured. */
  private text = '';
  private firstTokenAt?: number;

  constructor(
    private readonly info: AttemptInfo,
    traced: boolean,
  ) {
    const provider = PROVIDER_NAMES[info.provider] ?? info.provider;
    this.common = { 'gen_ai.operation.name': info.operation, 'gen_ai.provider.name': provider, 'gen_ai.request.model': info.model };
    if (!traced) return;
    this.span = tracer.startSpan(`${info.operation} ${info.model}`, {
      kind: SpanKind.CLIENT,
      attributes: {
        ...this.common,
        'gen_ai.request.max_tokens': info.maxTokens,
        'gen_ai.request.temperature': info.temperature,
        'acs.deployment': info.deployment,
        'acs.attempt': info.attempt,
        ...(captureContent && info.messages ? { 'gen_ai.input.messages': JSON.stringify(info.messages.map(inputMessage)) } : {}),
      },
    });
    this.context = trace.setSpan(context.active(), this.span);
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    return this.context ? context.with(this.context, fn) : fn();
  }

  firstToken(): void {
    this.firstTokenAt ??= performance.now();
  }

  observe(part: AnswerPart): void {
    if (part.id) this.responseId = part.id;
    if (part.model) this.responseModel = part.model;
    for (const choice of part.choices ?? []) {
      if (choice.finish_reason) this.finishReasons.push(choice.finish_reason);
      if (captureContent) {
        const content = choice.message?.content ?? choice.delta?.content;
        if (typeof content === 'string') this.text += content;
      }
    }
    if (part.usage) {
      this.inputTokens = part.usage.prompt_tokens ?? this.inputTokens;
      this.outputTokens = part.usage.completion_tokens ?? this.outputTokens;
    }
  }

  embedded(inputTokens: number | undefined): void {
    this.inputTokens = inputTokens;
  }

  end(error?: unknown): void {
    if (this.ended) return;
    this.ended = true;
    const attributes: Attributes = { ...this.common, 'gen_ai.response.model': this.responseModel };
    if (error !== undefined) attributes['error.type'] = errorType(error);
    operationDuration.record((performance.now() - this.started) / 1000, attributes);
    if (this.inputTokens !== undefined) tokenUsage.record(this.inputTokens, { ...attributes, 'gen_ai.token.type': 'input' });
    if (this.outputTokens !== undefined) tokenUsage.record(this.outputTokens, { ...attributes, 'gen_ai.token.type': 'output' });
    if (this.span) this.endSpan(this.span, error);
  }

  private endSpan(span: Span, error: unknown): void {
    span.setAttributes({
      'gen_ai.response.id': this.responseId,
      'gen_ai.response.model': this.responseModel,
      'gen_ai.usage.input_tokens': this.inputTokens,
      'gen_ai.usage.output_tokens': this.outputTokens,
    });
    if (this.finishReasons.length > 0) span.setAttribute('gen_ai.response.finish_reasons', this.finishReasons);
    if (this.firstTokenAt !== undefined) span.setAttribute('gen_ai.response.time_to_first_chunk', (this.firstTokenAt - this.started) / 1000);
    if (captureContent && error === undefined && this.info.operation === 'chat') {
      const output = [{ role: 'assistant', parts: [{ type: 'text', content: this.text }], finish_reason: this.finishReasons[0] ?? 'stop' }];
      span.setAttribute('gen_ai.output.messages', JSON.stringify(output));
    }
    if (error !== undefined) markFailed(span, error);
    span.end();
  }
}

/** A chat message in the conventions' shape (`gen_ai.input.messages`): its role and its parts. */
function inputMessage(message: unknown): { role: string; parts: unknown[] } {
  const { role, content, tool_calls: toolCalls, tool_call_id: toolCallId } = message as {
    role?: string;
    content?: unknown;
    tool_calls?: { id?: string; function?: { name?: string; arguments?: string } }[];
    tool_call_id?: string;
  };
  const parts: unknown[] = [];
  if (typeof content === 'string') parts.push(role === 'tool' ? { type: 'tool_call_response', id: toolCallId, response: content } : { type: 'text', content });
  else if (Array.isArray(content)) {
    for (const part of content as { type?: string; text?: string }[]) parts.push(part.type === 'text' ? { type: 'text', content: part.text } : { type: part.type });
  }
  for (const call of toolCalls ?? []) parts.push({ type: 'tool_call', id: call.id, name: call.function?.name, arguments: call.function?.arguments });
  return { role: role ?? 'user', parts };
}
