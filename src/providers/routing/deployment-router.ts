import { Logger } from '@nestjs/common';
import type { ModelDefinition } from '../../models/model-catalog';
import type { Deployment } from './deployment';
import type { RoutingState, SharedHealth } from './routing-state';

/** Failures of one deployment within this window... */
const FAILURE_WINDOW_MS = 30_000;
/** ...that put it in cooldown. */
const FAILURES_TO_COOL_DOWN = 3;
/** How often a replica reads the cooldowns the others decided. */
const REFRESH_MS = 1_000;
/** Budgets are per minute. */
const MINUTE_MS = 60_000;
/** Latencies kept per deployment for its median (the CLI's and the metrics' figure). */
const LATENCIES_KEPT = 200;

export type DeploymentState = 'healthy' | 'cooldown' | 'probation';

/** What a deployment has done lately in this replica, and its shared state: the CLI and /metrics show it. */
export interface DeploymentSnapshot {
  id: string;
  model: string;
  label: string;
  provider: string;
  region: string | null;
  weight: number;
  state: DeploymentState;
  cooldownUntil: number | null;
  inFlight: number;
  /** Attempts and failed attempts in the last minute (this replica). */
  requests: number;
  errors: number;
  /** Median latency of the last answered attempts (ms); null before any. */
  p50Ms: number | null;
}

/** Why an attempt failed, as routing needs it. */
export interface AttemptFailure {
  /** An upstream 429: with its Retry-After, the deployment cools down that long. */
  rateLimited: boolean;
  retryAfterMs?: number;
}

interface Recent {
  windowStart: number;
  requests: number;
  errors: number;
  latencies: number[];
  inFlight: number;
}

/**
 * Chooses, for each model call, the order in which deployments are tried: the healthy ones of
 * the model, by weight and least busy first (weight / (1 + attempts in flight), drawn at
 * random), then those of its fallback models in turn, and last the ones in cooldown (soonest
 * back first), so that a model whose every deployment cooled down is still tried rather than
 * refused. A deployment fails over on errors the request is not to blame for; enough of them
 * (3 in 30 s), or a 429 with Retry-After, cool it down for every replica; after the cooldown it
 * is on probation, and its first failure cools it down again.
 */
export class DeploymentRouter {
  private readonly logger = new Logger('Routing');
  private view = new Map<string, SharedHealth>();
  private readonly recent = new Map<string, Recent>();
  private readonly ids: string[];
  private readonly refresher: NodeJS.Timeout;
  /** Per model with deployments: the model at the highest prices of its deployments (computed once: the hold reads it per request). */
  private readonly ceilings = new Map<string, ModelDefinition>();

  constructor(
    private readonly state: RoutingState,
    private readonly deployments: ReadonlyMap<string, readonly Deployment[]>,
    private readonly cooldownMs: number,
  ) {
    this.ids = [...deployments.values()].flat().map((d) => d.id);
    for (const [id, list] of deployments) {
      const model = list[0].model;
      const max = (price: (m: ModelDefinition) => number) => Math.max(price(model), ...list.map((d) => price(d.served)));
      this.ceilings.set(id, { ...model, inputPrice: max((m) => m.inputPrice), outputPrice: max((m) => m.outputPrice), cachedInputPrice: max((m) => m.cachedInputPrice), cacheWritePrice: max((m) => m.cacheWritePrice) });
    }
    this.refresher = setInterval(() => void this.refresh(), REFRESH_MS).unref();
    void this.refresh();
  }

  of(model: ModelDefinition): readonly Deployment[] {
    return this.deployments.get(model.id) ?? [];
  }

  /** The model at the highest prices any of its deployments charges; the model itself when it has none. */
  priceCeiling(model: ModelDefinition): ModelDefinition {
    return this.ceilings.get(model.id) ?? model;
  }

  /** The deployments to try for a call to `models[0]`, falling back on the others in order. */
  plan(models: readonly ModelDefinition[]): Deployment[] {
    const now = Date.now();
    const healthy: Deployment[] = [];
    const cooling: Deployment[] = [];
    for (const model of models) {
      const ready: Deployment[] = [];
      for (const d of this.of(model)) {
        if ((this.view.get(d.id)?.cooldownUntil ?? 0) > now) cooling.push(d);
        else ready.push(d);
      }
      healthy.push(...this.byWeight(ready));
    }
    cooling.sort((a, b) => this.view.get(a.id)!.cooldownUntil - this.view.get(b.id)!.cooldownUntil);
    return [...healthy, ...cooling];
  }

  /** Takes a request (and its tokens) from the deployment's own budgets; false when either would go over. */
  async admit(d: Deployment, tokens: number): Promise<boolean> {
    if (d.rpm !== undefined && !(await this.state.take(`${d.id}:rpm`, 1, d.rpm, MINUTE_MS))) return false;
    if (d.tpm !== undefined && !(await this.state.take(`${d.id}:tpm`, Math.min(tokens, d.tpm), d.tpm, MINUTE_MS))) return false;
    return true;
  }

  /** An attempt starts on `d`; `answered`, `failed` or `abandoned` says how it ended. */
  begin(d: Deployment): void {
    const recent = this.recentOf(d.id);
    recent.requests += 1;
    recent.inFlight += 1;
  }

  /** The attempt on `d` answered (a completion, or a stream's first chunk). */
  answered(d: Deployment, latencyMs: number): void {
    const recent = this.recentOf(d.id);
    recent.inFlight -= 1;
    recent.latencies.push(latencyMs);
    if (recent.latencies.length > LATENCIES_KEPT) recent.latencies.shift();
    const health = this.view.get(d.id);
    if (health?.probation) {
      this.view.delete(d.id);
      void this.state.recovered(d.id);
      this.logger.log(`Deployment ${d.id} answered again after its cooldown`);
    }
  }

  /** The attempt on `d` was abandoned (the client left, the stop cut it): not the deployment's failure. */
  abandoned(d: Deployment): void {
    this.recentOf(d.id).inFlight -= 1;
  }

  /** The attempt on `d` failed in a way that moves the request on: counted, and maybe a cooldown. */
  async failed(d: Deployment, failure: AttemptFailure): Promise<void> {
    const recent = this.recentOf(d.id);
    recent.inFlight -= 1;
    recent.errors += 1;
    const onProbation = this.view.get(d.id)?.probation === true;
    let coolFor: number | undefined;
    if (failure.rateLimited && failure.retryAfterMs !== undefined) coolFor = failure.retryAfterMs;
    else if (onProbation) coolFor = this.cooldownMs;
    else if ((await this.state.failure(d.id, FAILURE_WINDOW_MS)) >= FAILURES_TO_COOL_DOWN) coolFor = this.cooldownMs;
    if (coolFor === undefined) return;
    // This replica stops routing there at once; the others at their next refresh.
    this.view.set(d.id, { cooldownUntil: Math.max(this.view.get(d.id)?.cooldownUntil ?? 0, Date.now() + coolFor), probation: true });
    await this.state.coolDown(d.id, coolFor);
    this.logger.warn(`Deployment ${d.id} is in cooldown for ${Math.round(coolFor / 1000)} s`);
  }

  /** What each budgeted deployment's rpm and tpm windows have taken so far (shared across replicas). */
  async budgets(): Promise<{ model: string; label: string; budget: 'rpm' | 'tpm'; used: number }[]> {
    const result: { model: string; label: string; budget: 'rpm' | 'tpm'; used: number }[] = [];
    for (const d of [...this.deployments.values()].flat()) {
      if (d.rpm !== undefined) result.push({ model: d.model.id, label: d.label, budget: 'rpm', used: await this.state.taken(`${d.id}:rpm`) });
      if (d.tpm !== undefined) result.push({ model: d.model.id, label: d.label, budget: 'tpm', used: await this.state.taken(`${d.id}:tpm`) });
    }
    return result;
  }

  snapshot(): DeploymentSnapshot[] {
    const now = Date.now();
    return [...this.deployments.values()].flat().map((d) => {
      const health = this.view.get(d.id);
      const recent = this.recentOf(d.id);
      const cooling = (health?.cooldownUntil ?? 0) > now;
      return {
        id: d.id,
        model: d.model.id,
        label: d.label,
        provider: d.served.provider,
        region: d.region ?? null,
        weight: d.weight,
        state: cooling ? 'cooldown' : health?.probation ? 'probation' : 'healthy',
        cooldownUntil: cooling ? health!.cooldownUntil : null,
        inFlight: recent.inFlight,
        requests: recent.requests,
        errors: recent.errors,
        p50Ms: median(recent.latencies),
      };
    });
  }

  close(): void {
    clearInterval(this.refresher);
    this.state.close();
  }

  private async refresh(): Promise<void> {
    try {
      this.view = await this.state.health(this.ids);
    } catch (error) {
      this.logger.warn(`Could not read the deployments' health: ${String(error)}`);
    }
  }

  /** A weighted random order, each weight divided by 1 + the attempts in flight there. */
  private byWeight(ready: Deployment[]): Deployment[] {
    if (ready.length <= 1) return ready;
    const left = ready.map((d) => ({ d, w: d.weight / (1 + this.recentOf(d.id).inFlight) }));
    const order: Deployment[] = [];
    while (left.length > 0) {
      let pick = Math.random() * left.reduce((sum, x) => sum + x.w, 0);
      let index = 0;
      while (index < left.length - 1 && pick >= left[index].w) pick -= left[index++].w;
      order.push(left.splice(index, 1)[0].d);
    }
    return order;
  }

  private recentOf(id: string): Recent {
    const now = Date.now();
    let recent = this.recent.get(id);
    if (!recent) {
      recent = { windowStart: now, requests: 0, errors: 0, latencies: [], inFlight: 0 };
      this.recent.set(id, recent);
    } else if (now - recent.windowStart >= MINUTE_MS) {
      recent.windowStart = now;
      recent.requests = 0;
      recent.errors = 0;
    }
    return recent;
  }
}

function median(values: number[]): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return Math.round(sorted[Math.floor(sorted.length / 2)]);
}
