import { context, propagation, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import { InMemorySpanExporter, SamplingDecision, SimpleSpanProcessor, TracerProvider } from '@opentelemetry/sdk-trace';
import { EventEmitter } from 'node:events';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { disableTracing, enableTracing, tracing } from './tracing';

const exporter = new InMemorySpanExporter();
/** Whether the sampler keeps the next root span (every child follows its parent). */
let sampleRoots = true;
const provider = new TracerProvider({
  spanProcessors: [new SimpleSpanProcessor({ exporter })],
  sampler: {
    shouldSample: (parent) => ({
      decision: (trace.getSpan(parent)?.spanContext().traceFlags ?? (sampleRoots ? 1 : 0)) & 1 ? SamplingDecision.RECORD_AND_SAMPLED : SamplingDecision.NOT_RECORD,
    }),
    toString: () => 'test sampler',
  },
});
trace.setGlobalTracerProvider(provider);
context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
propagation.setGlobalPropagator(new W3CTraceContextPropagator());

const prompt = [
  { role: 'system', content: 'Be brief.' },
  { role: 'user', content: 'Hello' },
];

/** One attempt of a completion inside a request's span, as ProvidersService runs it. */
async function attemptInARequest(): Promise<Record<string, unknown>> {
  const request = trace.getTracer('test').startSpan('POST /v1/chat/completions');
  await context.with(trace.setSpan(context.active(), request), async () => {
    const attempt = tracing.upstreamAttempt({ operation: 'chat', provider: 'openai', model: 'gpt-4o-mini', deployment: 'main', attempt: 1, messages: prompt });
    await attempt.run(async () => undefined);
    attempt.observe({ id: 'chatcmpl-1', model: 'gpt-4o-mini-2024-07-18', choices: [{ finish_reason: 'stop', message: { content: 'Hi there.' } }] });
    attempt.end();
  });
  request.end();
  const span = exporter.getFinishedSpans().find((s) => s.name === 'chat gpt-4o-mini');
  return { ...span!.attributes };
}

describe('tracing', () => {
  afterEach(() => {
    disableTracing();
    exporter.reset();
    sampleRoots = true;
  });

  it('is a no-op while off: nothing is recorded, headers are the same object, no middleware', async () => {
    const headers = { Accept: 'application/json' };
    expect(tracing.withTraceHeaders(headers)).toBe(headers);
    expect(tracing.serverMiddleware()).toBeNull();
    expect(await tracing.admission('hold', async () => 42)).toBe(42);
    expect(tracing.upstreamAttempt({ operation: 'chat', provider: 'openai', model: 'm', deployment: 'd', attempt: 1 })).toBe(
      tracing.upstreamAttempt({ operation: 'chat', provider: 'openai', model: 'n', deployment: 'e', attempt: 2 }),
    );
    await attemptInARequest().catch(() => undefined);
    expect(exporter.getFinishedSpans().map((s) => s.name)).toEqual(['POST /v1/chat/completions']);
  });

  it('records no message contents unless OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT is true', async () => {
    enableTracing({ captureContent: false });
    const attributes = await attemptInARequest();
    expect(attributes).toMatchObject({ 'gen_ai.response.id': 'chatcmpl-1', 'gen_ai.response.finish_reasons': ['stop'] });
    expect(attributes).not.toHaveProperty(['gen_ai.input.messages']);
    expect(attributes).not.toHaveProperty(['gen_ai.output.messages']);
  });

  it('records the prompt and the answer in the conventions’ shape when asked to', async () => {
    enableTracing({ captureContent: true });
    const attributes = await attemptInARequest();
    expect(JSON.parse(attributes['gen_ai.input.messages'] as string)).toEqual([
      { role: 'system', parts: [{ type: 'text', content: 'Be brief.' }] },
      { role: 'user', parts: [{ type: 'text', content: 'Hello' }] },
    ]);
    expect(JSON.parse(attributes['gen_ai.output.messages'] as string)).toEqual([
      { role: 'assistant', parts: [{ type: 'text', content: 'Hi there.' }], finish_reason: 'stop' },
    ]);
  });

  it('gives the upstream request the attempt span’s traceparent, and the log line its ids', async () => {
    enableTracing({ captureContent: false });
    const request = trace.getTracer('test').startSpan('request');
    let sent: Record<string, unknown> = {};
    let logged: Record<string, unknown> = {};
    await context.with(trace.setSpan(context.active(), request), async () => {
      const attempt = tracing.upstreamAttempt({ operation: 'chat', provider: 'openai', model: 'm', deployment: 'd', attempt: 1 });
      await attempt.run(async () => {
        sent = tracing.withTraceHeaders({ Accept: 'application/json' });
        logged = tracing.logFields();
      });
      attempt.end();
    });
    request.end();
    const attempt = exporter.getFinishedSpans().find((s) => s.name === 'chat m')!;
    const { traceId, spanId } = attempt.spanContext();
    expect(sent).toEqual({ Accept: 'application/json', traceparent: `00-${traceId}-${spanId}-01` });
    expect(logged).toEqual({ trace_id: traceId, span_id: spanId });
  });

  it('does no span work below a request the sampler left out, yet its logs and upstream calls carry its trace id', async () => {
    enableTracing({ captureContent: false });
    sampleRoots = false;
    const req = Object.assign(new EventEmitter(), { method: 'POST', url: '/v1/chat/completions', headers: {}, httpVersion: '1.1', socket: {} });
    const res = Object.assign(new EventEmitter(), { writableFinished: true, statusCode: 200 });
    let sent: Record<string, unknown> = {};
    let logged: Record<string, unknown> = {};
    let currentInHold: unknown = 'unset';
    await new Promise<void>((resolve, reject) => {
      tracing.serverMiddleware()!(req as unknown as IncomingMessage, res as unknown as ServerResponse, () => {
        tracing
          .admission('hold', async () => {
            currentInHold = trace.getSpan(context.active());
            const attempt = tracing.upstreamAttempt({ operation: 'chat', provider: 'openai', model: 'm', deployment: 'd', attempt: 1 });
            await attempt.run(async () => {
              sent = tracing.withTraceHeaders({});
              logged = tracing.logFields();
            });
            attempt.end();
          })
          .then(() => resolve(), reject);
      });
    });
    res.emit('close');
    expect(exporter.getFinishedSpans()).toEqual([]);
    // No current span: the pg instrumentation (requireParentSpan) skips the request's statements.
    expect(currentInHold).toBeUndefined();
    expect(sent.traceparent).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    expect(logged.trace_id).toBe((sent.traceparent as string).slice(3, 35));
  });
});
