import { Injectable, Logger, OnModuleInit } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Cancellation } from '../common/cancellation';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { MetricsService } from '../metrics/metrics.service';
import type { ModelDefinition, ProviderName } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import type { ChatCompletion, ChatCompletionChunk, ModelCall, ProviderAdapter } from './provider-adapter';
import { createConfiguredAdapters } from './provider-registry';
import { SimulatorAdapter } from './simulator/simulator.adapter';
import { isAbort, isRetryable, toUpstreamApiError } from './upstream-errors';

/** A stream whose first chunk has arrived: from here on, failures can no longer be retried. */
export interface OpenedStream {
  first: ChatCompletionChunk;
  rest: AsyncIterator<ChatCompletionChunk>;
}

const BASE_BACKOFF_MS = 200;

/** One upstream call being measured (see ProvidersService.upstreamCall). */
interface UpstreamCall {
  firstChunk(): void;
  /** Once, when it ends: without an error, or with the one it failed with. */
  ended(error?: unknown): void;
}

/**
 * Chooses the adapter of a model and makes upstream calls with bounded retries and
 * timeouts, turning every upstream failure into an API error (502, 503, 504, or 400 for
 * what the provider refused).
 */
@Injectable()
export class ProvidersService implements OnModuleInit {
  private readonly logger = new Logger('Providers');
  private readonly adapters: Map<ProviderName, ProviderAdapter>;
  private readonly simulator: SimulatorAdapter;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly models: ModelsService,
    private readonly metrics: MetricsService,
  ) {
    this.adapters = createConfiguredAdapters(config);
    this.simulator = new SimulatorAdapter({ wordDelayMs: config.simulatorWordDelayMs });
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

  isSimulated(model: ModelDefinition): boolean {
    if (model.provider === 'simulator' || this.config.llmSimulator === 'on') return true;
    if (this.adapters.has(model.provider)) return false;
    return this.config.llmSimulator === 'auto' && !this.config.production;
  }

  adapterFor(model: ModelDefinition): ProviderAdapter {
    if (this.isSimulated(model)) return this.simulator;
    const adapter = this.adapters.get(model.provider);
    if (!adapter) {
      throw new ApiError('service_unavailable', `The model ${model.id} is not available: its provider (${model.provider}) is not configured.`, {
        code: 'provider_not_configured',
      });
    }
    return adapter;
  }

  /** A whole completion; `run` aborts it (the client leaving, the stop's drain deadline). */
  async complete(request: ModelCall, run: Cancellation): Promise<ChatCompletion> {
    const adapter = this.adapterFor(request.model);
    const call = this.upstreamCall(request, run, 'complete');
    try {
      // The attempt's cancellation first, then the spread: see usageRecord (billing/usage-record.ts).
      const completion = await this.withRetries(request, run, () => this.withTimeout(request, run, (cancellation) => adapter.complete({ cancellation, ...request })));
      call.ended();
      return completion;
    } catch (error) {
      call.ended(error);
      throw error;
    }
  }

  /**
   * Opens a stream and waits (bounded by the upstream timeout) for its first chunk, retrying
   * failures until then. After that, each further chunk must come within
   * UPSTREAM_IDLE_TIMEOUT_MS, or the upstream call is aborted and the stream fails with
   * `upstream_timeout` (code `upstream_idle_timeout`); failures mid-stream arrive as API errors.
   */
  async openStream(request: ModelCall, run: Cancellation): Promise<OpenedStream> {
    const adapter = this.adapterFor(request.model);
    const call = this.upstreamCall(request, run, 'stream');
    try {
      const opened = await this.withRetries(request, run, () =>
        this.withTimeout(
          request,
          run,
          async (upstream, unlink) => {
            const chunks = adapter.stream({ cancellation: upstream, ...request })[Symbol.asyncIterator]();
            const first = await chunks.next();
            if (first.done) throw Object.assign(new Error('The upstream stream ended before its first chunk'), { status: 502 });
            return { first: first.value, rest: this.watched(chunks, request, run, { upstream, unlink }, call) };
          },
          { linkedAfter: true },
        ),
      );
      call.firstChunk();
      return opened;
    } catch (error) {
      call.ended(error);
      throw error;
    }
  }

  /** The rest of a stream, with an idle timeout between chunks and provider errors mapped. */
  private watched(
    chunks: AsyncIterator<ChatCompletionChunk>,
    request: ModelCall,
    run: Cancellation,
    { upstream, unlink }: { upstream: Cancellation; unlink: () => void },
    call: UpstreamCall,
  ): AsyncIterator<ChatCompletionChunk> {
    const idleMs = this.config.upstreamIdleTimeoutMs;
    const { provider } = request.model;
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
            unlink();
          }
          return next;
        } catch (error) {
          unlink();
          if (run.aborted || isAbort(error)) {
            call.ended(error);
            throw error;
          }
          const mapped = toUpstreamApiError(error, provider);
          call.ended(mapped);
          throw mapped;
        } finally {
          clearTimeout(timer);
        }
      },
      return: async () => {
        // Closed before its end: the client left, or the server's stop cut it.
        call.ended(new DOMException('closed early', 'AbortError'));
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
  private upstreamCall(request: ModelCall, run: Cancellation, kind: 'complete' | 'stream'): UpstreamCall {
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

  private async withRetries<T>(request: ModelCall, run: Cancellation, attempt: () => Promise<T>): Promise<T> {
    for (let retry = 0; ; retry++) {
      try {
        return await attempt();
      } catch (error) {
        if (run.aborted || isAbort(error)) throw error;
        if (retry >= this.config.upstreamMaxRetries || !isRetryable(error)) {
          throw toUpstreamApiError(error, request.model.provider);
        }
        const delay = BASE_BACKOFF_MS * 2 ** retry * (0.5 + Math.random());
        this.logger.warn(`Upstream ${request.model.provider} failed (${describe(error)}); retry ${retry + 1} in ${Math.round(delay)} ms`);
        await sleep(delay, undefined, { signal: run.signal });
      }
    }
  }

  /**
   * Bounds one attempt (a whole completion, or a stream's first chunk) by UPSTREAM_TIMEOUT_MS.
   * The attempt's cancellation follows `run` (the client leaving, the stop's drain deadline)
   * until the attempt fails or, for a completion, ends; an opened stream stays linked until it
   * ends (`unlink`, which `watched` calls), so a disconnect still aborts it later on. The
   * stream's idle timeout aborts it too.
   */
  private async withTimeout<T>(
    request: ModelCall,
    run: Cancellation,
    attempt: (upstream: Cancellation, unlink: () => void) => Promise<T>,
    options: { linkedAfter: boolean } = { linkedAfter: false },
  ): Promise<T> {
    const { cancellation: upstream, unlink } = Cancellation.following(run);
    let timedOut = false;
    let failed = true;
    const timer = setTimeout(() => {
      timedOut = true;
      upstream.abort();
    }, this.config.upstreamTimeoutMs);
    try {
      const result = await attempt(upstream, unlink);
      failed = false;
      return result;
    } catch (error) {
      if (timedOut && !run.aborted) {
        throw new ApiError('upstream_timeout', `The ${request.model.provider} provider did not answer in time.`);
      }
      throw error;
    } finally {
      clearTimeout(timer);
      if (failed || !options.linkedAfter) unlink();
    }
  }
}

function describe(error: unknown): string {
  const e = error as { status?: number; name?: string; message?: string };
  return e.status ? `HTTP ${e.status}` : (e.name ?? e.message ?? 'error');
}
