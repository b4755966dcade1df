import { Inject, Injectable, Logger } from '@nestjs/common';
import { ApiError } from '../../common/errors/api-error';
import type { ModelDefinition } from '../../models/model-catalog';
import { ModelsService } from '../../models/models.service';
import type { NerfingApplication, UsageSource } from '../../usage/entities/usage-record.entity';
import { MICROS_PER_MILLICENT } from '../../wallet/cost';
import type { NerfingRule, NerfingWindow } from './entities/nerfing-rule.entity';
import { CounterKey, NERFING_COUNTERS, NerfingCounters, WindowUsage } from './nerfing-counters';
import { NerfingRulesService } from './nerfing-rules.service';
import { windowAt } from './windows';

/** A counter outlives its window by this much, so a settlement just after the end still finds it. */
const COUNTER_MARGIN_MS = 60_000;

/** Who sends a chat request, as far as the rules care. */
export interface NerfingSubject {
  workspaceId: string;
  /** The request's `user_id`; null when it sent none (see `streamOf`). */
  userId: string | null;
  source: UsageSource;
}

/** What the rules do to one request. */
export interface NerfingOutcome {
  /** Each rule applied, in order (kept on the usage record). */
  applications: NerfingApplication[];
  /** The model to serve: the one asked for, or a downgrade's. */
  model: ModelDefinition;
  /** The output cap to run with: the one asked for, or a lower cap of a rule. */
  maxTokens: number;
  /** Set when a block rule refuses the request: the 429 to answer with (its application is in `applications`). */
  refusal?: ApiError;
  /**
   * To be called once the request is settled with what it was charged for: adds its tokens
   * and cost to the user's counters. Absent when no rule counts the request.
   */
  settled?: (tokens: number, costMicros: bigint) => void;
}

/** Requests of the user that `all` and `user` rules count, or only those from the widget. */
type Stream = 'any' | 'widget';

/**
 * Applies a workspace's nerfing rules to a chat request, in the chat core (every path: API,
 * playground, widget). Counting is per `user_id`, in calendar windows (windows.ts), in the
 * rate-limit storage's kind of counters (shared through Redis by every replica): a request
 * is counted when it arrives, its tokens and cost when it settles. Then, in order, each rule
 * whose threshold the user has crossed in its window applies: `block` refuses the request
 * (429 until the window ends; later rules do not matter), `cap_output` lowers the output
 * cap, `downgrade` serves its model when that is cheaper than the one asked for.
 *
 * Thresholds: `requests` is crossed by the request after the `value`th in the window (value
 * requests go through); `tokens` and `cost_millicents` once the settled requests of the window
 * reach `value` (the request that crosses it runs as asked: its usage is known only after).
 */
@Injectable()
export class NerfingService {
  private readonly logger = new Logger('Nerfing');
  private lastStorageWarning = 0;
  /** The time windows are taken from; end-to-end tests move it forward to see a window end. */
  clock: () => number = Date.now;

  constructor(
    private readonly rules: NerfingRulesService,
    private readonly models: ModelsService,
    @Inject(NERFING_COUNTERS) private readonly counters: NerfingCounters,
  ) {}

  /** The rules' effect on a request to `model` with output cap `maxTokens`. A block is not thrown: it is `refusal`. */
  async apply(subject: NerfingSubject, model: ModelDefinition, maxTokens: number): Promise<NerfingOutcome> {
    const unchanged: NerfingOutcome = { applications: [], model, maxTokens };
    const all = await this.rules.forRequests(subject.workspaceId);
    if (all.length === 0) return unchanged;
    const rules = all.filter((rule) => appliesTo(rule, subject));
    if (rules.length === 0) return unchanged;

    const now = this.clock();
    const counted = [...new Map(rules.map((rule) => [counterId(rule), rule])).values()];
    const keys = counted.map((rule) => this.counterKey(subject, rule, now));
    const usage = new Map<string, WindowUsage>();
    try {
      (await this.counters.arrive(keys)).forEach((used, i) => usage.set(counterId(counted[i]), used));
    } catch (error) {
      // Failing open, as the rate limits do: an unreachable Redis must not refuse every request.
      this.warnStorageDown(error);
      return unchanged;
    }

    // Tokens and cost are added only where a rule reads them (to every counter of the request: they are shared by window).
    const countsUsage = rules.some((rule) => rule.metric !== 'requests');
    const outcome: NerfingOutcome = {
      ...unchanged,
      settled: countsUsage ? (tokens, costMicros) => this.addUsage(subject, counted, tokens, costMicros) : undefined,
    };
    for (const rule of rules) {
      if (!crossed(rule, usage.get(counterId(rule))!)) continue;
      if (rule.actionType === 'block') {
        outcome.applications.push({ rule_id: rule.id, action: 'block' });
        return { ...outcome, refusal: blocked(rule, windowAt(rule.window, now).end - now), settled: undefined };
      }
      if (rule.actionType === 'cap_output' && rule.actionMaxTokens! < outcome.maxTokens) {
        outcome.maxTokens = rule.actionMaxTokens!;
        outcome.applications.push({ rule_id: rule.id, action: 'cap_output', max_tokens: outcome.maxTokens });
      }
      if (rule.actionType === 'downgrade') {
        // A model taken out of the catalog since, or one that costs no less, is no downgrade.
        const target = this.models.find(rule.actionModel!);
        if (!target || !cheaper(target, outcome.model)) continue;
        outcome.applications.push({ rule_id: rule.id, action: 'downgrade', from_model: outcome.model.id, to_model: target.id });
        outcome.model = target;
      }
    }
    return outcome;
  }

  /** Not awaited by the request: its answer does not wait for the counters. */
  private addUsage(subject: NerfingSubject, counted: NerfingRule[], tokens: number, costMicros: bigint): void {
    if (tokens <= 0 && costMicros <= 0n) return;
    const now = this.clock();
    const keys = counted.map((rule) => this.counterKey(subject, rule, now));
    this.counters.add(keys, tokens, costMicros).catch((error) => this.warnStorageDown(error));
  }

  private counterKey(subject: NerfingSubject, rule: NerfingRule, now: number): CounterKey {
    const window = windowAt(rule.window, now);
    // The hash tag (workspace and user) puts every counter of a request in one Redis slot.
    const user = encodeURIComponent(subject.userId ?? '');
    return { key: `nerf:{${subject.workspaceId}:${user}}:${counterId(rule)}:${window.start}`, ttlMs: window.end - now + COUNTER_MARGIN_MS };
  }

  private warnStorageDown(error: unknown): void {
    if (Date.now() - this.lastStorageWarning < 10_000) return;
    this.lastStorageWarning = Date.now();
    this.logger.warn(`Nerfing counters unavailable, rules are not being applied: ${String(error)}`);
  }
}

/**
 * `all`: every request of the workspace, counted per user_id; requests without one count
 * together, as one anonymous end user. `user`: requests with that user_id. `widget_visitors`:
 * requests from the chat widget, per visitor (their user_id).
 */
function appliesTo(rule: NerfingRule, subject: NerfingSubject): boolean {
  if (rule.scopeType === 'user') return subject.userId === rule.scopeUserId;
  if (rule.scopeType === 'widget_visitors') return subject.source === 'widget';
  return true;
}

function streamOf(rule: NerfingRule): Stream {
  return rule.scopeType === 'widget_visitors' ? 'widget' : 'any';
}

/** Rules of one stream and window share their counter (of requests, tokens and cost). */
function counterId(rule: NerfingRule): `${Stream}:${NerfingWindow}` {
  return `${streamOf(rule)}:${rule.window}`;
}

function crossed(rule: NerfingRule, used: WindowUsage): boolean {
  switch (rule.metric) {
    case 'requests':
      return used.requests > rule.threshold;
    case 'tokens':
      return used.tokens >= rule.threshold;
    case 'cost_millicents':
      return used.costMicros >= BigInt(rule.threshold) * MICROS_PER_MILLICENT;
  }
}

/** No dearer per input nor per output token, and cheaper per one of them. */
function cheaper(target: ModelDefinition, current: ModelDefinition): boolean {
  const notDearer = target.inputPrice <= current.inputPrice && target.outputPrice <= current.outputPrice;
  return notDearer && (target.inputPrice < current.inputPrice || target.outputPrice < current.outputPrice);
}

/** The refusal of a block rule: the API's 429 with Retry-After, until the rule's window ends. */
function blocked(rule: NerfingRule, msLeft: number): ApiError {
  const seconds = Math.max(1, Math.ceil(msLeft / 1000));
  return ApiError.rateLimited(
    `This end user has reached a limit set by the workspace (${rule.threshold} ${rule.metric.replace('_', ' ')} per ${rule.window}). ` +
      `Try again in ${seconds} seconds.`,
    seconds,
  );
}
