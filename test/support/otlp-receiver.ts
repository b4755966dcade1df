import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import protobuf from 'protobufjs';

/**
 * An OTLP/HTTP receiver (what an OpenTelemetry Collector listens with on 4318): takes
 * `POST /v1/traces` and `/v1/metrics` in protobuf (`application/x-protobuf`) or JSON
 * (`application/json`), and keeps the spans and metric points it was sent, decoded.
 */
export interface ReceivedSpan {
  traceId: string;
  spanId: string;
  /** '' for a root span. */
  parentSpanId: string;
  name: string;
  /** OTLP's SpanKind: 1 internal, 2 server, 3 client. */
  kind: number;
  attributes: Record<string, unknown>;
  status: { code: number; message?: string };
  resource: Record<string, unknown>;
}

export interface ReceivedMetricPoint {
  name: string;
  unit: string;
  attributes: Record<string, unknown>;
  count: number;
  sum: number;
}

export interface OtlpReceiver {
  url: string;
  spans: ReceivedSpan[];
  metrics: ReceivedMetricPoint[];
  /** The content types of the exports received, by path. */
  contentTypes: Record<string, Set<string>>;
  /** Every body as it came, as text (protobuf's bytes as latin1), to look for what must not be there. */
  rawBodies: string[];
  close(): Promise<void>;
}

/** The part of OTLP's trace schema (opentelemetry-proto, trace/v1 and common/v1) the receiver reads. */
const TRACE_PROTO = `
syntax = "proto3";
package otlp;
message ExportTraceServiceRequest { repeated ResourceSpans resource_spans = 1; }
message ResourceSpans { Resource resource = 1; repeated ScopeSpans scope_spans = 2; }
message Resource { repeated KeyValue attributes = 1; }
message ScopeSpans { repeated Span spans = 2; }
message Span {
  bytes trace_id = 1; bytes span_id = 2; string trace_state = 3; bytes parent_span_id = 4; string name = 5; int32 kind = 6;
  fixed64 start_time_unix_nano = 7; fixed64 end_time_unix_nano = 8; repeated KeyValue attributes = 9; Status status = 15;
}
message Status { string message = 2; int32 code = 3; }
message KeyValue { string key = 1; AnyValue value = 2; }
message AnyValue {
  oneof value { string string_value = 1; bool bool_value = 2; int64 int_value = 3; double double_value = 4; ArrayValue array_value = 5; bytes bytes_value = 7; }
}
message ArrayValue { repeated AnyValue values = 1; }
`;
const traceRequest = protobuf.parse(TRACE_PROTO, { keepCase: false }).root.lookupType('otlp.ExportTraceServiceRequest');

interface OtlpKeyValue {
  key: string;
  value?: OtlpAnyValue;
}
interface OtlpAnyValue {
  stringValue?: string;
  boolValue?: boolean;
  intValue?: number | string;
  doubleValue?: number;
  arrayValue?: { values?: OtlpAnyValue[] };
}
interface OtlpSpan {
  traceId: string | Uint8Array;
  spanId: string | Uint8Array;
  parentSpanId?: string | Uint8Array;
  name: string;
  kind?: number;
  attributes?: OtlpKeyValue[];
  status?: { code?: number; message?: string };
}
interface OtlpTraces {
  resourceSpans?: { resource?: { attributes?: OtlpKeyValue[] }; scopeSpans?: { spans?: OtlpSpan[] }[] }[];
}
interface OtlpMetrics {
  resourceMetrics?: {
    scopeMetrics?: {
      metrics?: { name: string; unit?: string; histogram?: { dataPoints?: { attributes?: OtlpKeyValue[]; count?: number | string; sum?: number }[] } }[];
    }[];
  }[];
}

function valueOf(value: OtlpAnyValue | undefined): unknown {
  if (!value) return undefined;
  if (value.stringValue !== undefined) return value.stringValue;
  if (value.boolValue !== undefined) return value.boolValue;
  if (value.intValue !== undefined) return Number(value.intValue);
  if (value.doubleValue !== undefined) return value.doubleValue;
  if (value.arrayValue !== undefined) return (value.arrayValue.values ?? []).map(valueOf);
  return undefined;
}

function attributesOf(list: OtlpKeyValue[] | undefined): Record<string, unknown> {
  return Object.fromEntries((list ?? []).map((kv) => [kv.key, valueOf(kv.value)]));
}

/** OTLP/JSON writes ids in hex; protobuf as bytes. */
function hex(id: string | Uint8Array | undefined): string {
  if (id === undefined) return '';
  return typeof id === 'string' ? id.toLowerCase() : Buffer.from(id).toString('hex');
}

export async function startOtlpReceiver(): Promise<OtlpReceiver> {
  const receiver: Omit<OtlpReceiver, 'url' | 'close'> = { spans: [], metrics: [], contentTypes: {}, rawBodies: [] };
  const keepTraces = (body: OtlpTraces) => {
    for (const resourceSpans of body.resourceSpans ?? []) {
      const resource = attributesOf(resourceSpans.resource?.attributes);
      for (const scope of resourceSpans.scopeSpans ?? []) {
        for (const span of scope.spans ?? []) {
          receiver.spans.push({
            traceId: hex(span.traceId),
            spanId: hex(span.spanId),
            parentSpanId: hex(span.parentSpanId),
            name: span.name,
            kind: span.kind ?? 0,
            attributes: attributesOf(span.attributes),
            status: { code: span.status?.code ?? 0, message: span.status?.message },
            resource,
          });
        }
      }
    }
  };
  const keepMetrics = (body: OtlpMetrics) => {
    for (const resource of body.resourceMetrics ?? []) {
      for (const scope of resource.scopeMetrics ?? []) {
        for (const metric of scope.metrics ?? []) {
          for (const point of metric.histogram?.dataPoints ?? []) {
            receiver.metrics.push({ name: metric.name, unit: metric.unit ?? '', attributes: attributesOf(point.attributes), count: Number(point.count ?? 0), sum: point.sum ?? 0 });
          }
        }
      }
    }
  };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const type = (req.headers['content-type'] ?? '').split(';')[0];
      const path = req.url ?? '';
      (receiver.contentTypes[path] ??= new Set()).add(type);
      receiver.rawBodies.push(body.toString('latin1'));
      try {
        const json = type === 'application/json';
        if (path === '/v1/traces') {
          keepTraces(json ? (JSON.parse(body.toString('utf8')) as OtlpTraces) : (traceRequest.toObject(traceRequest.decode(body), { longs: Number }) as OtlpTraces));
        } else if (path === '/v1/metrics' && json) {
          keepMetrics(JSON.parse(body.toString('utf8')) as OtlpMetrics);
        }
        res.writeHead(200, { 'Content-Type': json ? 'application/json' : 'application/x-protobuf' });
        res.end(json ? '{}' : undefined);
      } catch (error) {
        res.writeHead(400, { 'Content-Type': 'text/plain' });
        res.end(String(error));
      }
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    ...receiver,
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  };
}
