import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { DataSource } from 'typeorm';

/** Seconds; from 5 ms (a cached answer) to 2 minutes (a long completion). */
const LATENCY_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120];

/** What `pg`'s pool says of itself (the TypeORM driver's master pool). */
interface PoolCounts {
  totalCount: number;
  idleCount: number;
  waitingCount: number;
}

/** What a settled request's usage record says, as far as the metrics need it. */
export interface SettledRequest {
  model: string;
  status: string;
  inputTokens: number;
  outputTokens: number;
  cachedTokens: number;
  chargedMillicents: number;
}

/**
 * The service's Prometheus metrics, in a registry of this application's own (tests run
 * several applications in one process). Modules record through the typed fields; the hot
 * path only increments counters and observes histograms, with labels of bounded
 * cardinality (route templates, catalog model ids, provider names, error codes), never a
 * raw URL or an id. Gauges that read state (the database pool, the wallet's holds) are
 * computed when scraped. Served on `/metrics` (MetricsController, MetricsServer).
 */
@Injectable()
export class MetricsService {
  readonly registry = new Registry();

  readonly httpRequests = new Counter({
    name: 'acs_http_requests_total',
    help: 'HTTP requests answered, by method, route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [this.registry],
  });
  readonly httpDuration = new Histogram({
    name: 'acs_http_request_duration_seconds',
    help: 'Time from a request to the end of its response (a stream: its whole length), by method, route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly upstreamRequests = new Counter({
    name: 'acs_upstream_requests_total',
    help: 'Calls to upstream model providers (a call and its retries count once), by provider, model and outcome (ok, error, aborted: the client left or the stop cut it)',
    labelNames: ['provider', 'model', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly upstreamDuration = new Histogram({
    name: 'acs_upstream_request_duration_seconds',
    help: 'Length of an upstream call: a whole completion, or a stream from request to last chunk; by provider, model and kind (complete, stream)',
    labelNames: ['provider', 'model', 'kind'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly upstreamFirstToken = new Histogram({
    name: 'acs_upstream_time_to_first_token_seconds',
    help: 'Time from opening an upstream stream to its first chunk, by provider and model',
    labelNames: ['provider', 'model'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });
  readonly upstreamErrors = new Counter({
    name: 'acs_upstream_errors_total',
    help: 'Upstream calls that failed, by provider, model and error code (upstream_timeout, upstream_idle_timeout, ...)',
    labelNames: ['provider', 'model', 'code'] as const,
    registers: [this.registry],
  });

  readonly deploymentAttempts = new Counter({
    name: 'acs_deployment_attempts_total',
    help: 'Upstream attempts per deployment (src/providers/routing), by model, deployment label and outcome (ok; failed: moved on to another deployment or retried; refused: the upstream refused the request itself; aborted)',
    labelNames: ['model', 'deployment', 'outcome'] as const,
    registers: [this.registry],
  });
  readonly deploymentDuration = new Histogram({
    name: 'acs_deployment_latency_seconds',
    help: 'Time of an answered attempt per deployment: a whole completion, or a stream to its first chunk',
    labelNames: ['model', 'deployment'] as const,
    buckets: LATENCY_BUCKETS,
    registers: [this.registry],
  });

  readonly tokens = new Counter({
    name: 'acs_tokens_total',
    help: 'Tokens of settled requests, by model and kind (input, output, cached)',
    labelNames: ['model', 'kind'] as const,
    registers: [this.registry],
  });
  readonly charged = new Counter({
    name: 'acs_charged_millicents_total',
    help: 'Money charged to wallets for settled requests, in millicents, by model',
    labelNames: ['model'] as const,
    registers: [this.registry],
  });
  readonly settlements = new Counter({
    name: 'acs_settlements_total',
    help: 'Requests settled (charge, release of the hold and usage record committed), by outcome (success, error_charged, error_uncharged)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly autoTopups = new Counter({
    name: 'acs_auto_topups_total',
    help: 'Outcomes of auto top-up payments, by outcome (succeeded, pending, retry_scheduled: failed and tried again later, failed: given up)',
    labelNames: ['outcome'] as const,
    registers: [this.registry],
  });
  readonly rateLimitRefusals = new Counter({
    name: 'acs_rate_limit_refusals_total',
    help: 'Requests refused with 429 by the rate limit, by scope (workspace, key, address)',
    labelNames: ['scope'] as const,
    registers: [this.registry],
  });

  constructor(@InjectDataSource() dataSource: DataSource) {
    collectDefaultMetrics({ register: this.registry, prefix: 'acs_' });
    new Gauge({
      name: 'acs_db_pool_connections',
      help: "This process's PostgreSQL pool, by state (total, idle, waiting: requests queued for a connection)",
      labelNames: ['state'] as const,
      registers: [this.registry],
      collect() {
        const pool = (dataSource.driver as unknown as { master?: PoolCounts }).master;
        if (!pool) return;
        this.set({ state: 'total' }, pool.totalCount);
        this.set({ state: 'idle' }, pool.idleCount);
        this.set({ state: 'waiting' }, pool.waitingCount);
      },
    });
  }

  /**
   * A gauge computed when scraped, for state another module owns (the wallet's holds): its
   * `collect` sets the values. Registered once, by the owner's provider.
   */
  gauge<L extends string>(name: string, help: string, labelNames: readonly L[], collect: (gauge: Gauge<L>) => Promise<void> | void): Gauge<L> {
    return new Gauge<L>({
      name,
      help,
      labelNames,
      registers: [this.registry],
      collect() {
        return collect(this);
      },
    });
  }

  /** A request's settlement committed: its tokens, its charge and how it ended. */
  settled(request: SettledRequest): void {
    const { model } = request;
    if (request.inputTokens > 0) this.tokens.inc({ model, kind: 'input' }, request.inputTokens);
    if (request.outputTokens > 0) this.tokens.inc({ model, kind: 'output' }, request.outputTokens);
    if (request.cachedTokens > 0) this.tokens.inc({ model, kind: 'cached' }, request.cachedTokens);
    if (request.chargedMillicents > 0) this.charged.inc({ model }, request.chargedMillicents);
    const outcome = request.status === 'success' ? 'success' : request.chargedMillicents > 0 ? 'error_charged' : 'error_uncharged';
    this.settlements.inc({ outcome });
  }

  /** The text exposition format, for Prometheus. */
  async exposition(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
