import { Injectable, Logger, OnApplicationShutdown, OnModuleInit } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cancellation } from '../common/cancellation';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { MetricsService } from '../metrics/metrics.service';
import type { ModelDefinition } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import type { AttemptTarget, ChatCompletion, ChatCompletionChunk, EmbeddingCall, EmbeddingResult, ModelCall, NativeRequest, ProviderAdapter } from './provider-adapter';
import { buildDeployments, type Deployment } from './routing/deployment';
import { reasoningFor } from './reasoning';
import { DeploymentRouter, type DeploymentSnapshot } from './routing/deployment-router';
import { MemoryRoutingState, RedisRoutingState } from './routing/routing-state';
import { SimulatorAdapter } from './simulator/simulator.adapter';
import { type AttemptSpan, tracing } from '../telemetry/tracing';
import { failsOver, isAbort, isRetryable, retryAfterMs, toUpstreamApiError } from './upstream-errors';

/** A stream whose first chunk has arrived: from here on, failures can no longer be retried. */
export interface OpenedStream {
  first: ChatCompletionChunk;
  rest: AsyncIterator<ChatCompletionChunk>;
}

const BASE_BACKOFF_MS = 200;

/** What routing reads of a call (a chat call or an embeddings call); the rest of a chat call is for its attempts' spans. */
type RoutedCall = Pick<ModelCall, 'model' | 'fallbacks' | 'budgetTokens' | 'route'> & Partial<Pick<ModelCall, 'messages' | 'maxTokens' | 'temperature'>>;

/** One upstream call being measured (see ProvidersService.upstreamCall). */
interface UpstreamCall {
  firstChunk(): void;
  /** Once, when it ends: without an error, or with the one it failed with. */
  ended(error?: unknown): void;
}

/**
 * Makes upstream calls: routes each to a deployment of its model (src/providers/routing),
 * fails over before the first byte to the next deployment and then to the fallback models,
 * retries with backoff within UPSTREAM_MAX_RETRIES, bounds each attempt in time, and turns
 * every upstream failure into an API error (502, 503, 504, or 400 for what the provider refused).
 */
@Injectable()
export class ProvidersService implements OnModuleInit, OnApplicationShutdown {
  private readonly logger = new Logger('Providers');
  readonly router: DeploymentRouter;
  private readonly simulator: SimulatorAdapter;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly models: ModelsService,
    private readonly metrics: MetricsService,
  ) {
    const state = config.redisUrl ? new RedisRoutingState(config.redisUrl) : new MemoryRoutingState();
    this.router = new DeploymentRouter(state, buildDeployments(models.list(), config), config.routingCooldownMs);
    this.simulator = new SimulatorAdapter({ wordDelayMs: config.simulatorWordDelayMs });
    this.registerGauges(metrics);
  }

  onModuleInit(): void {
    const simulated = this.models.list().filter((model) => this.isSimulated(model));
    if (simulated.length > 0) {
      this.logger.warn(
        `SIMULATOR: ${simulated.map((m) => m.id).join(', ')} answer from the built-in simulator, not a real model ` +
          `(${this.config.llmSimulator === 'on' ? 'LLM_SIMULATOR=on' : 'no API key for their provider'}).`,
      );
    }
  }

  onApplicationShutdown(): void {
    this.router.close();
  }

  isSimulated(model: ModelDefinition): boolean {
    if (model.provider === 'simulator' || this.config.llmSimulator === 'on') return true;
    if (this.router.of(model).length > 0) return false;
    return this.config.llmSimulator === 'auto' && !this.config.production;
  }

  private registerGauges(metrics: MetricsService): void {
    metrics.gauge('acs_deployment_cooldown', 'Whether a deployment is in cooldown (1) or taking traffic (0), as this replica sees it', ['model', 'deployment'], (gauge) => {
      for (const d of this.router.snapshot()) gauge.set({ model: d.model, deployment: d.label }, d.state === 'cooldown' ? 1 : 0);
    });
    metrics.gauge('acs_deployment_in_flight', "Attempts under way per deployment in this replica", ['model', 'deployment'], (gauge) => {
      for (const d of this.router.snapshot()) gauge.set({ model: d.model, deployment: d.label }, d.inFlight);
    });
    metrics.gauge(
      'acs_deployment_budget_used',
      "What a deployment's own per-minute budget has taken in its current window, across replicas, by budget (rpm, tpm)",
      ['model', 'deployment', 'budget'],
      async (gauge) => {
        for (const b of await this.router.budgets()) gauge.set({ model: b.model, deployment: b.label, budget: b.budget }, b.used);
      },
    );
  }

  /** The adapter of the model's first deployment: what checks a request before money is held. */
  adapterFor(model: ModelDefinition): ProviderAdapter {
    if (this.isSimulated(model)) return this.simulator;
    const first = this.router.of(model)[0];
    if (!first) throw notConfigured(model);
    return first.adapter;
  }

  /** Every deployment's state, recent traffic and latency in this replica (the CLI and /metrics). */
  deployments(): DeploymentSnapshot[] {
    return this.router.snapshot();
  }

  /** The most a call to `model`, or to one of `fallbacks`, can cost per token: what the hold covers. */
  priceCeiling(model: ModelDefinition, fallbacks: readonly ModelDefinition[] = []): ModelDefinition {
    // A simulated model is billed at its own prices, whatever deployments the catalog gives it.
    const ceiling = (m: ModelDefinition) => (this.isSimulated(m) ? m : this.router.priceCeiling(m));
    const own = ceiling(model);
    if (fallbacks.length === 0) return own;
    const all = [own, ...fallbacks.map(ceiling)];
    const max = (price: (m: ModelDefinition) => number) => Math.max(...all.map(price));
    return { ...model, inputPrice: max((m) => m.inputPrice), outputPrice: max((m) => m.outputPrice), cachedInputPrice: max((m) => m.cachedInputPrice), cacheWritePrice: max((m) => m.cacheWritePrice) };
  }

  /**
   * The input tokens of a native request as the provider of `model`'s first deployment counts
   * them (Anthropic's count_tokens, with that deployment's key and upstream name). Undefined
   * when that provider has no such endpoint, the model is simulated, or the call fails: the
   * caller then counts with our tokenizer. Free: no budget, no routing state.
   */
  async countNativeTokens(model: ModelDefinition, native: NativeRequest): Promise<number | undefined> {
    if (this.isSimulated(model)) return undefined;
    const first = this.router.of(model)[0];
    if (!first?.adapter.countTokens) return undefined;
    try {
      return await first.adapter.countTokens({ model: first.served, native, signal: AbortSignal.timeout(first.timeoutMs) });
    } catch (error) {
      this.logger.warn(`count_tokens on ${first.id} failed (${describe(error)}); counting with our tokenizer`);
      return undefined;
    }
  }

  /** A whole completion; `run` aborts it (the client leaving, the stop's drain deadline). */
  async complete(request: ModelCall, run: Cancellation): Promise<ChatCompletion> {
    const call = this.upstreamCall(request, run, 'complete');
    try {
      const completion = await this.routed(request, run, { linkedAfter: false }, async (d, cancellation, _unlink, span) => {
        // The attempt's own fields first, then the spread: see usageRecord (billing/usage-record.ts).
        const answer = await d.adapter.complete({ cancellation, ...providerRequest(request, d) });
        span.observe(answer);
        span.end();
        return answer;
      });
      call.ended();
      return completion;
    } catch (error) {
      call.ended(error);
      throw error;
    }
  }

  /**
   * Embeddings, routed like `complete`: over the model's deployments with failover, retries
   * and cooldown; `run` aborts it. A deployment whose provider makes no embeddings is refused
   * as the request's own error (400): trying another would not change it.
   */
  async embed(request: EmbeddingCall, run: Cancellation): Promise<EmbeddingResult> {
    const call = this.upstreamCall(request, run, 'complete');
    try {
      const result = await this.routed(request, run, { linkedAfter: false, operation: 'embeddings' }, async (d, cancellation, _unlink, span) => {
        if (!d.adapter.embed) throw ApiError.badRequest(`The ${d.served.provider} provider of ${d.model.id} makes no embeddings.`, 'model', 'unsupported_model');
        const answer = await d.adapter.embed({ model: d.served, input: request.input, dimensions: request.dimensions, cancellation });
        if (answer.vectors.length !== request.input.length) {
          throw Object.assign(new Error(`${answer.vectors.length} embeddings for ${request.input.length} inputs`), { status: 502 });
        }
        span.embedded(answer.promptTokens);
        span.end();
        return answer;
      });
      call.ended();
      return result;
    } catch (error) {
      call.ended(error);
      throw error;
    }
  }

  /**
   * Opens a stream and waits (bounded by the deployment's timeout) for its first chunk, failing
   * over until then. After that, it is never replayed elsewhere: each further chunk must come
   * within UPSTREAM_IDLE_TIMEOUT_MS, or the upstream call is aborted and the stream fails with
   * `upstream_timeout` (code `upstream_idle_timeout`); failures mid-stream arrive as API errors.
   */
  async openStream(request: ModelCall, run: Cancellation): Promise<OpenedStream> {
    const call = this.upstreamCall(request, run, 'stream');
    try {
      const opened = await this.routed(request, run, { linkedAfter: true }, async (d, upstream, unlink, span) => {
        const chunks = d.adapter.stream({ cancellation: upstream, ...providerRequest(request, d) })[Symbol.asyncIterator]();
        const first = await chunks.next();
        if (first.done) throw Object.assign(new Error('The upstream stream ended before its first chunk'), { status: 502 });
        span.firstToken();
        span.observe(first.value);
        // The attempt's span stays open until the stream ends (watched ends it).
        return { first: first.value, rest: this.watched(chunks, d.served, run, { upstream, unlink }, call, span) };
      });
      call.firstChunk();
      return opened;
    } catch (error) {
      call.ended(error);
      throw error;
    }
  }

  /**
   * Tries the call's deployments in the router's order until one answers. A failure the
   * request is not to blame for (no connection, a timeout, 429, 5xx, 401/403/404 of that
   * deployment) moves it to the next deployment at once; once every one was tried, retries
   * with backoff (UPSTREAM_MAX_RETRIES) go to the best one again, for failures worth
   * retrying. A 400 is the request's own: never tried elsewhere. Deployments at their own
   * rpm/tpm budget are skipped. Every attempt is told to `request.route`.
   */
  private async routed<T>(
    request: RoutedCall,
    run: Cancellation,
    options: { linkedAfter: boolean; operation?: 'chat' | 'embeddings' },
    /** Ends `span` once its answer is whole (a stream: when it ends); routed ends it on a failure. */
    attempt: (d: Deployment, upstream: Cancellation, unlink: () => void, span: AttemptSpan) => Promise<T>,
  ): Promise<T> {
    let plan = this.plan(request);
    let attempts = 0;
    let next = 0;
    let retries = 0;
    let lastError: unknown;
    let last: Deployment | undefined;
    for (;;) {
      const d: Deployment | undefined = plan[next++];
      if (!d) {
        if (retries >= this.config.upstreamMaxRetries || lastError === undefined || !isRetryable(lastError)) break;
        const delay = BASE_BACKOFF_MS * 2 ** retries * (0.5 + Math.random());
        retries += 1;
        this.logger.warn(`Upstream ${last!.id} failed (${describe(lastError)}); retry ${retries} in ${Math.round(delay)} ms`);
        await sleep(delay, undefined, { signal: run.signal });
        plan = this.plan(request).slice(0, 1);
        next = 0;
        continue;
      }
      // Only a deployment with a budget of its own costs a look at the shared windows.
      if ((d.rpm !== undefined || d.tpm !== undefined) && !(await this.router.admit(d, request.budgetTokens ?? 0))) continue;
      const target: AttemptTarget = { model: d.model, served: d.served, label: d.label };
      request.route?.attempting(target);
      this.router.begin(d);
      const started = performance.now();
      const span = tracing.upstreamAttempt({
        operation: options.operation ?? 'chat',
        provider: d.served.provider,
        model: d.served.upstreamModel,
        deployment: d.label,
        attempt: ++attempts,
        maxTokens: request.maxTokens,
        temperature: request.temperature,
        messages: request.messages,
      });
      try {
        const result = await span.run(() => this.withTimeout(d, run, (upstream, unlink) => attempt(d, upstream, unlink, span), options));
        this.router.answered(d, performance.now() - started);
        this.metrics.deploymentAttempts.inc({ model: d.model.id, deployment: d.label, outcome: 'ok' });
        this.metrics.deploymentDuration.observe({ model: d.model.id, deployment: d.label }, (performance.now() - started) / 1000);
        request.route?.answered(target);
        return result;
      } catch (error) {
        span.end(error);
        if (run.aborted || isAbort(error) || !failsOver(error)) {
          this.router.abandoned(d);
          this.metrics.deploymentAttempts.inc({ model: d.model.id, deployment: d.label, outcome: run.aborted || isAbort(error) ? 'aborted' : 'refused' });
          if (run.aborted || isAbort(error)) throw error;
          throw toUpstreamApiError(error, d.served.provider);
        }
        this.metrics.deploymentAttempts.inc({ model: d.model.id, deployment: d.label, outcome: 'failed' });
        await this.router.failed(d, { rateLimited: statusOf(error) === 429, retryAfterMs: retryAfterMs(error) });
        if (plan[next]) this.logger.warn(`Upstream ${d.id} failed (${describe(error)}); trying ${plan[next].id}`);
        lastError = error;
        last = d;
      }
    }
    if (lastError === undefined) {
      throw new ApiError('service_unavailable', `Every deployment of ${request.model.id} is at its own request or token budget; retry shortly.`, {
        code: 'upstream_capacity',
        headers: { 'Retry-After': '10' },
      });
    }
    throw toUpstreamApiError(lastError, last!.served.provider);
  }

  /** The deployments to try: the simulator alone for a simulated model; the router's order otherwise. */
  private plan(request: RoutedCall): Deployment[] {
    const { model } = request;
    if (this.isSimulated(model)) return [this.simulatedDeployment(model)];
    const fallbacks = (request.fallbacks ?? []).filter((m) => !this.isSimulated(m));
    const plan = this.router.plan([model, ...fallbacks]);
    if (plan.length === 0) throw notConfigured(model);
    return plan;
  }

  /** The simulator as a deployment: never budgeted, never cooled down (it does not fail over). */
  private simulatedDeployment(model: ModelDefinition): Deployment {
    return {
      id: `${model.id}/simulator`,
      label: 'simulator',
      model,
      served: { ...model, provider: 'simulator' },
      adapter: this.simulator,
      weight: 1,
      timeoutMs: this.config.upstreamTimeoutMs,
      keySource: '',
    };
  }

  /** The rest of a stream, with an idle timeout between chunks and provider errors mapped. */
  private watched(
    chunks: AsyncIterator<ChatCompletionChunk>,
    served: ModelDefinition,
    run: Cancellation,
    { upstream, unlink }: { upstream: Cancellation; unlink: () => void },
    call: UpstreamCall,
    span: AttemptSpan,
  ): AsyncIterator<ChatCompletionChunk> {
    const idleMs = this.config.upstreamIdleTimeoutMs;
    const { provider } = served;
    return {
      next: async () => {
        let timer: NodeJS.Timeout | undefined;
        const idle = new Promise<never>((_, reject) => {
          timer = setTimeout(() => {
            reject(
              new ApiError('upstream_timeout', `The ${provider} provider stopped sending for ${idleMs / 1000} s in the middle of the answer.`, {
                code: 'upstream_idle_timeout',
              }),
            );
            upstream.abort();
          }, idleMs);
        });
        try {
          const next = await Promise.race([chunks.next(), idle]);
          if (next.done) {
            call.ended();
            span.end();
            unlink();
          } else {
            span.observe(next.value);
          }
          return next;
        } catch (error) {
          unlink();
          if (run.aborted || isAbort(error)) {
            call.ended(error);
            span.end(error);
            throw error;
          }
          const mapped = toUpstreamApiError(error, provider);
          call.ended(mapped);
          span.end(mapped);
          throw mapped;
        } finally {
          clearTimeout(timer);
        }
      },
      return: async () => {
        // Closed before its end: the client left, or the server's stop cut it.
        call.ended(new DOMException('closed early', 'AbortError'));
        span.end(new DOMException('closed early', 'AbortError'));
        unlink();
        upstream.abort();
        return (await chunks.return?.()) ?? { done: true, value: undefined };
      },
    };
  }

  /**
   * Metrics of one upstream call (its retries included): counted once when it ends, with its
   * length, and for a stream the time to its first chunk. A call the client abandoned is
   * `aborted`, not an error of the provider.
   */
  private upstreamCall(request: RoutedCall, run: Cancellation, kind: 'complete' | 'stream'): UpstreamCall {
    const { metrics } = this;
    const labels = { provider: this.isSimulated(request.model) ? 'simulator' : request.model.provider, model: request.model.id };
    const started = performance.now();
    let done = false;
    return {
      firstChunk: () => metrics.upstreamFirstToken.observe(labels, (performance.now() - started) / 1000),
      ended: (error?: unknown) => {
        if (done) return;
        done = true;
        const aborted = error !== undefined && (run.aborted || isAbort(error));
        // Own labels first, then the spread: see usageRecord (billing/usage-record.ts).
        metrics.upstreamRequests.inc({ outcome: error === undefined ? 'ok' : aborted ? 'aborted' : 'error', ...labels });
        metrics.upstreamDuration.observe({ kind, ...labels }, (performance.now() - started) / 1000);
        if (error !== undefined && !aborted) {
          metrics.upstreamErrors.inc({ code: error instanceof ApiError ? error.code : 'internal_error', ...labels });
        }
      },
    };
  }

  /**
   * Bounds one attempt (a whole completion, or a stream's first chunk) by the deployment's
   * timeout (UPSTREAM_TIMEOUT_MS unless the catalog gives it one). The attempt's cancellation
   * follows `run` (the client leaving, the stop's drain deadline) until the attempt fails or,
   * for a completion, ends; an opened stream stays linked until it ends (`unlink`, which
   * `watched` calls), so a disconnect still aborts it later on. The stream's idle timeout
   * aborts it too.
   */
  private async withTimeout<T>(
    d: Deployment,
    run: Cancellation,
    attempt: (upstream: Cancellation, unlink: () => void) => Promise<T>,
    options: { linkedAfter: boolean },
  ): Promise<T> {
    const { cancellation: upstream, unlink } = Cancellation.following(run);
    let timedOut = false;
    let failed = true;
    const timer = setTimeout(() => {
      timedOut = true;
      upstream.abort();
    }, d.timeoutMs);
    try {
      const result = await attempt(upstream, unlink);
      failed = false;
      return result;
    } catch (error) {
      if (timedOut && !run.aborted) {
        throw new ApiError('upstream_timeout', `The ${d.served.provider} provider did not answer in time.`);
      }
      throw error;
    } finally {
      clearTimeout(timer);
      if (failed || !options.linkedAfter) unlink();
    }
  }
}

/** The call as the deployment gets it: its model (upstream name), and an output cap it accepts. */
function providerRequest(request: ModelCall, d: Deployment): Omit<ModelCall, 'fallbacks' | 'budgetTokens' | 'route'> {
  return {
    model: d.served,
    messages: request.messages,
    tools: request.tools,
    temperature: request.temperature,
    maxTokens: Math.min(request.maxTokens, d.served.maxOutputTokens),
    maxTokensField: request.maxTokensField,
    // Per attempt: a fallback that does not reason gets no reasoning_effort.
    extra: reasoningFor(d.served, request.extra),
    native: request.native,
  };
}

function notConfigured(model: ModelDefinition): ApiError {
  return new ApiError('service_unavailable', `The model ${model.id} is not available: its provider (${model.provider}) is not configured.`, {
    code: 'provider_not_configured',
  });
}

function statusOf(error: unknown): number | undefined {
  const status = (error as { status?: unknown })?.status;
  return typeof status === 'number' ? status : undefined;
}

function describe(error: unknown): string {
  const e = error as { status?: number; name?: string; message?: string };
  return e.status ? `HTTP ${e.status}` : (e.name ?? e.message ?? 'error');
}
