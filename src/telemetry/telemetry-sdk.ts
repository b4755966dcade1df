import { createNoopMeter } from '@opentelemetry/api';
import { enableTracing } from './tracing';

/** How long the stop waits for the last spans and metrics to reach the collector. */
const FLUSH_BOUND_MS = 5_000;

let sdk: { shutdown(): Promise<void> } | undefined;

/**
 * Whether the environment asks for OTLP export: an endpoint (all signals, or traces), the SDK
 * not disabled, and traces not turned off. Without one the service runs with no SDK at all.
 */
export function otlpConfigured(env: NodeJS.ProcessEnv): boolean {
  const endpoint = env.OTEL_EXPORTER_OTLP_ENDPOINT || env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT;
  return Boolean(endpoint) && env.OTEL_SDK_DISABLED?.trim().toLowerCase() !== 'true' && env.OTEL_TRACES_EXPORTER?.trim() !== 'none';
}

/**
 * Starts the OpenTelemetry SDK when the standard OTEL_* variables ask for it (otlpConfigured),
 * before the application's modules load, so that the `pg` instrumentation patches `pg`. The
 * SDK reads the rest of the standard variables itself: OTEL_EXPORTER_OTLP_{,TRACES_,METRICS_}
 * ENDPOINT, _HEADERS, _PROTOCOL (http/protobuf by default, http/json), OTEL_SERVICE_NAME,
 * OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and _ARG, OTEL_METRIC_EXPORT_INTERVAL.
 */
export function startTelemetry(env: NodeJS.ProcessEnv = process.env): boolean {
  if (sdk || !otlpConfigured(env)) return false;
  // Loaded only here: an unconfigured service never loads the SDK or its exporters.
  /* eslint-disable @typescript-eslint/no-require-imports */
  const { NodeSDK } = require('@opentelemetry/sdk-node') as typeof import('@opentelemetry/sdk-node');
  const { PgInstrumentation } = require('@opentelemetry/instrumentation-pg') as typeof import('@opentelemetry/instrumentation-pg');
  /* eslint-enable @typescript-eslint/no-require-imports */
  // Statements of a request only: the background jobs' queries (sweepers, batched settlements) would each be a trace of their own.
  // OTEL_NODE_DISABLED_INSTRUMENTATIONS=pg (the auto-instrumentations' variable) leaves them out.
  const withPg = !(env.OTEL_NODE_DISABLED_INSTRUMENTATIONS ?? '').split(',').some((name) => name.trim() === 'pg');
  const pg = withPg ? new PgInstrumentation({ requireParentSpan: true }) : undefined;
  const started = new NodeSDK({
    // OTEL_SERVICE_NAME, when set, names it (the SDK reads it); our name otherwise.
    serviceName: env.OTEL_SERVICE_NAME ? undefined : 'assistant-chat-service',
    instrumentations: pg ? [pg] : [],
    // Logs stay pino's lines on stdout, joined to traces by their trace_id: no OTLP log export.
    logRecordProcessors: [],
  });
  started.start();
  // Statements as spans only: the instrumentation's own metrics (a histogram point per query,
  // pool gauges) cost CPU on every query, sampled or not, and /metrics has the pool already.
  pg?.setMeterProvider({ getMeter: () => createNoopMeter() });
  sdk = started;
  enableTracing({ captureContent: env.OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT?.trim().toLowerCase() === 'true' });
  return true;
}

/** Exports what is left (spans, the metrics' last values) and stops the SDK; bounded, never throws. */
export async function stopTelemetry(): Promise<void> {
  if (!sdk) return;
  const stopping = sdk;
  sdk = undefined;
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([stopping.shutdown().catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, FLUSH_BOUND_MS)))]);
  clearTimeout(timer);
}
