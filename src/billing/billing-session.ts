import { Logger } from '@nestjs/common';
import { storable } from '../common/database/storable';
import { ApiError } from '../common/errors/api-error';
import { usageErrorCode } from '../common/errors/usage-error-code';
import type { AppendTurnParams } from '../conversations/conversation-turns';
import type { ModelDefinition } from '../models/model-catalog';
import type { ChatMessage, CompletionUsage, FunctionTool, RouteObserver } from '../providers/provider-adapter';
import { countPromptTokens, countPromptTokensAsync, countTextTokensAsync } from '../providers/tokens';
import { ceilMillicents, llmCost, MICROS_PER_MILLICENT, MicroMillicents, promptCeiling, toDecimalString, toMillicentsNumber } from '../wallet/cost';
import { tracing } from '../telemetry/tracing';
import type { Hold, WalletService } from '../wallet/wallet.service';
import { spendPeriodOf } from '../workspaces/key-limits';
import { checkedUsage, isTokenCount, Spend } from './spend';
import type { KeyBudget, KeyBudgets, KeyHold } from './key-budgets';
import type { SettlementWriter } from './settlement-writer';
import { UsageEnding, usageRecord, UsageSubject } from './usage-record';

/** Below this many affordable output tokens a request is refused rather than cut short. */
export const MIN_USEFUL_OUTPUT_TOKENS = 16;
/** Room held for each tool result that the next iteration's prompt will carry. */
const TOKENS_PER_TOOL_RESULT = 1_500;

const logger = new Logger('Chat');

/** Writes that failed beside a charge, or settlements that failed, since start (for logs and, later, metrics). */
export interface BillingIncidents {
  conversation_turn_not_stored: number;
  usage_record_not_stored: number;
  settlement_failed: number;
}

/** The services a billing session works with: the `Billing` provider passes the real ones, unit tests plain fakes. */
export interface BillingPorts {
  wallet: Pick<WalletService, 'reserve' | 'spendable' | 'extendHold' | 'keepHoldAlive' | 'release'>;
  /** Where settlements are written, many to a transaction. */
  settlements: Pick<SettlementWriter, 'submit'>;
  /** How long a hold lives unless its heartbeat pushes the expiry out (HOLD_TTL_MS). */
  holdTtlMs: number;
  /** API keys' spending limits; needed only for an estimate with a `keyBudget`. */
  keyBudgets?: Pick<KeyBudgets, 'reserve' | 'extend' | 'keepAlive' | 'release' | 'held'>;
  incidents: BillingIncidents;
}

/** What a request is estimated to cost, and what its settlement must record. */
export interface Estimate {
  subject: UsageSubject;
  startedAt: number;
  /** Aborted when the client goes away: what fails after that is charged, not refunded. */
  clientGone: { readonly aborted: boolean };
  model: ModelDefinition;
  /** The prompt of the first model call, counted with our tokenizer. */
  promptTokens: number;
  /** The output cap asked for; lowered to what the wallet affords. */
  outputCap: number;
  /** Choices asked for (`n`): each can produce the output cap. */
  choices: number;
  /** Every tool offered to the model: they count in each call's prompt. */
  tools: FunctionTool[];
  /** The most one server tool call can cost (0 without server tools). */
  toolPriceMicros: MicroMillicents;
  /** With `conversation_id`: where a successful turn (the request's messages and the reply) is stored. */
  conversation: { id: string; messages: ChatMessage[] } | null;
  /**
   * Sent with an Idempotency-Key: answered only once its settlement has committed, never from
   * the journal, because a retry of the key after this process died takes the request over
   * unless its usage record shows it was charged.
   */
  idempotent?: boolean;
  /** The request's API key has a spending limit: the estimate is held against it too, first. */
  keyBudget?: KeyBudget;
  /** Told the tokens and exact cost charged, once a charge committed (the nerfing rules' counters). */
  onCharged?: (tokens: number, costMicros: MicroMillicents) => void;
  /** What the request reserved of a budget outside the wallet (a widget's daily cap): raised with the holds, settled with them. */
  spending?: SpendingReservation;
}

/**
 * A request's reservation of a budget outside the wallet and the key (a widget's daily cap),
 * admitted for the first model call's estimate, raised before each further iteration of a tool
 * loop like the holds are.
 */
export interface SpendingReservation {
  /** Raises the reservation to `totalMillicents` by one conditional statement; false when the budget cannot cover it. */
  cover(totalMillicents: number): Promise<boolean>;
  /**
   * Told once, however the request ends, what it was charged (0 when refunded; the hold when
   * the settlement could not be written): the whole reservation becomes that.
   */
  settled(chargedMicros: MicroMillicents): void;
}

/** Which limit refused another iteration of a tool loop: the widget's daily cap, the key's spending limit, or the wallet. */
export type HoldLimit = 'widget' | 'key' | 'wallet';

/** What `open` holds for a call with this prompt and output cap: the most its first model call can cost. */
export function holdEstimateMillicents(model: ModelDefinition, promptTokens: number, outputCap: number, choices: number): number {
  const promptCost = llmCost(promptCeiling(model), { inputTokens: promptTokens, outputTokens: 0, cachedTokens: 0 });
  return holdAmount(promptCost + BigInt(outputCap) * BigInt(choices) * BigInt(model.outputPrice));
}

/**
 * The money side of one chat request, from the hold to its one settlement. Opened with the
 * estimate (which holds the money, or refuses with 402); meters each model and tool call;
 * raises the hold before each further iteration of a tool loop; keeps the hold alive while
 * the request runs; and ends in exactly one settlement: the exact cost charged with the usage
 * record (and conversation turn) in one transaction, or, for a failure before anything reached
 * the client, charged and refunded.
 */
export class BillingSession {
  /** What the request has used so far. */
  readonly spend = new Spend();
  private readonly heartbeat?: NodeJS.Timeout;
  private settleAttempts = 0;

  private constructor(
    private readonly ports: BillingPorts,
    private readonly estimate: Estimate,
    readonly hold: Hold,
    /** The output cap of each model call: the one asked for, or what the wallet (and the key's limit) could cover. */
    readonly maxTokens: number,
    /** What the request holds against its key's spending limit, if the key has one. */
    private readonly keyHold: KeyHold | null,
  ) {
    // A request may run longer than a hold lives (a long stream): its expiry is pushed out
    // meanwhile. A leased request needs none: its lease lives as long as its process.
    const ttl = ports.holdTtlMs;
    if (hold.lease && !keyHold) return;
    this.heartbeat = setInterval(() => {
      if (!hold.lease) ports.wallet.keepHoldAlive(hold, ttl).catch((error) => logger.warn(`Could not extend hold ${hold.id}: ${String(error)}`));
      if (keyHold) ports.keyBudgets!.keepAlive(keyHold, ttl).catch((error) => logger.warn(`Could not extend key hold ${keyHold.id}: ${String(error)}`));
    }, ttl / 3).unref();
  }

  /**
   * Holds prompt + output cap at the model's prices: against the key's spending limit first
   * (when it has one), then in the wallet. When either cannot cover the cap, the cap is
   * lowered to what it can cover; below a useful minimum the request is refused with 402
   * (`key_limit_exceeded` or `insufficient_balance`). One conditional statement per attempt:
   * never a check, then a write.
   */
  static async open(ports: BillingPorts, estimate: Estimate): Promise<BillingSession> {
    const { model, subject, outputCap, choices } = estimate;
    const promptCost = llmCost(promptCeiling(model), { inputTokens: estimate.promptTokens, outputTokens: 0, cachedTokens: 0 });
    const outputCost = (tokens: number) => BigInt(tokens) * BigInt(choices) * BigInt(model.outputPrice);
    const amountFor = (cap: number) => holdAmount(promptCost + outputCost(cap));
    const minimum = Math.min(outputCap, MIN_USEFUL_OUTPUT_TOKENS);
    /** The largest cap that `availableMillicents` covers, at most the one asked for. */
    const coveredCap = (availableMillicents: number) => {
      const perToken = BigInt(choices) * BigInt(Math.max(model.outputPrice, 1));
      const spare = BigInt(availableMillicents) * MICROS_PER_MILLICENT - promptCost;
      return Math.min(outputCap, spare > 0n ? Number(spare / perToken) : 0);
    };

    let cap = outputCap;
    let keyHold: KeyHold | null = null;
    if (estimate.keyBudget) {
      const keys = ports.keyBudgets!;
      let reserved = await keys.reserve(estimate.keyBudget, amountFor(cap), ports.holdTtlMs);
      if (!reserved.hold) {
        cap = coveredCap(reserved.remainingMillicents);
        if (cap >= minimum) reserved = await keys.reserve(estimate.keyBudget, amountFor(cap), ports.holdTtlMs);
      }
      if (!reserved.hold) {
        const needed = ceilMillicents(promptCost + outputCost(minimum));
        // Only on a refusal: whether the limit is spent, or held by requests in flight that settle for less.
        const held = await keys.held(estimate.keyBudget);
        throw keyLimitRefusal(estimate.keyBudget, { remaining: reserved.remainingMillicents, held, needed }, model);
      }
      keyHold = reserved.hold;
    }
    try {
      const hold = (tokens: number) => ports.wallet.reserve(subject.workspaceId, subject.requestId, amountFor(tokens), ports.holdTtlMs);
      const full = await hold(cap);
      if (full) return new BillingSession(ports, estimate, full, cap, keyHold);

      // What a hold can take (other processes' idle lease spare recalled by `reserve`), not what is shown as available.
      const availableMillicents = await ports.wallet.spendable(subject.workspaceId);
      const lowered = Math.min(cap, coveredCap(availableMillicents));
      if (lowered >= minimum) {
        const held = await hold(lowered);
        if (held) return new BillingSession(ports, estimate, held, lowered, keyHold);
      }
      throw new ApiError(
        'insufficient_balance',
        `Your wallet's available balance (${availableMillicents} millicents) does not cover this request on ${model.id} ` +
          `(at least ${ceilMillicents(promptCost + outputCost(minimum))} millicents). Top up the wallet to continue.`,
        { code: 'insufficient_balance' },
      );
    } catch (error) {
      if (keyHold) await ports.keyBudgets!.release(keyHold);
      throw error;
    }
  }

  /** A model call is about to be made with this prompt: a client that leaves before its answer pays for the prompt. */
  calling(messages: ChatMessage[]): void {
    this.spend.calling(messages);
  }

  /**
   * Told of each upstream attempt and of the one that answered: a call is billed at the prices
   * of the deployment that answered it; an attempt that failed over was not billed by its
   * provider and costs nothing (only counted in `attempts`).
   */
  readonly route: RouteObserver = {
    attempting: (target) => {
      this.spend.attempts += 1;
      this.pricing = target.served;
    },
    answered: (target) => {
      this.pricing = target.served;
      this.spend.answeredBy = { model: target.model.id, provider: target.served.provider, deployment: target.label };
    },
  };
  /** The prices of the deployment of the call under way (the hold's, the most expensive candidate's, before any). */
  private pricing: ModelDefinition | undefined;

  /**
   * Adds one model call: the provider's usage report, checked against the model's limits
   * and what we saw generated; our tokenizer's counts where it reported none.
   */
  async meter(messages: ChatMessage[], reported: CompletionUsage | undefined, generatedText: string): Promise<void> {
    const { model } = this.estimate;
    // Counted beside other requests; the prompt only when the provider gave no usable count.
    const countedPrompt = isTokenCount(reported?.prompt_tokens) ? 0 : await this.countPrompt(messages);
    const { usage, problems } = checkedUsage(reported, {
      countPrompt: () => countedPrompt,
      generatedTokens: await countTextTokensAsync(generatedText),
      maxPromptTokens: model.contextLength,
      maxCompletionTokens: this.maxTokens * this.estimate.choices,
    });
    const served = this.pricing ?? model;
    if (problems.length > 0) {
      logger.warn(`${served.provider} reported unusable usage for ${served.id}: ${problems.join('; ')}. Billed the checked counts.`);
    }
    this.spend.addModelCall(served, usage);
  }

  /**
   * Adds a call billed by its input alone (an embeddings call: no output, no tool loop), at
   * the prices of the deployment that answered. The caller checks the count.
   */
  meterInput(promptTokens: number): void {
    this.spend.addModelCall(this.pricing ?? this.estimate.model, { prompt_tokens: promptTokens, completion_tokens: 0, total_tokens: promptTokens });
  }

  addToolCall(name: string, micros: MicroMillicents): void {
    this.spend.addToolCall(name, micros);
  }

  /**
   * Before running tools and calling the model again, makes sure the holds (the widget's
   * reservation, the key's, the wallet's) cover what is spent, these tool calls at the dearest
   * tool's price, and the next call's estimate (TOKENS_PER_TOOL_RESULT a result: `holdNextCall`
   * raises it once the results are in). True, or the limit that cannot: the request then ends
   * cleanly with what it has.
   */
  async holdNextIteration(messages: ChatMessage[], toolCalls: number): Promise<true | HoldLimit> {
    const { model, toolPriceMicros } = this.estimate;
    const nextPromptTokens = (await this.countPrompt(messages)) + toolCalls * TOKENS_PER_TOOL_RESULT;
    const next = llmCost(promptCeiling(model), { inputTokens: nextPromptTokens, outputTokens: this.maxTokens, cachedTokens: 0 });
    return this.holdUpTo(ceilMillicents(this.spend.totalMicros + BigInt(toolCalls) * toolPriceMicros + next));
  }

  /**
   * Once the tools have run, the next call's prompt is known: the holds are raised to cover
   * it exactly (our count, at the dearest prices, with `outputCap`) when the results were
   * longer than `holdNextIteration` assumed. True, or the limit that cannot.
   */
  async holdNextCall(messages: ChatMessage[], outputCap: number): Promise<true | HoldLimit> {
    const next = llmCost(promptCeiling(this.estimate.model), { inputTokens: await this.countPrompt(messages), outputTokens: outputCap, cachedTokens: 0 });
    return this.holdUpTo(ceilMillicents(this.spend.totalMicros + next));
  }

  /** Raises each hold that is below `needed` to it, the narrowest limit first; one conditional statement each. */
  private async holdUpTo(needed: number): Promise<true | HoldLimit> {
    const { keyHold, estimate } = this;
    if (estimate.spending && !(await estimate.spending.cover(needed))) return 'widget';
    if (keyHold && !(await this.ports.keyBudgets!.extend(keyHold, needed - keyHold.amountMillicents, this.ports.holdTtlMs))) return 'key';
    return (await this.ports.wallet.extendHold(this.hold, needed - this.hold.amountMillicents, this.ports.holdTtlMs)) || 'wallet';
  }

  /**
   * The output cap of the next iteration's call: what its prompt (grown by the tools'
   * results) leaves of the model's context, at most the request's cap; 0 when that leaves no
   * room for a useful answer. A call whose prompt and cap exceed the context is never sent:
   * the upstream would refuse it with a 400.
   */
  async nextOutputCap(messages: ChatMessage[]): Promise<number> {
    const room = this.estimate.model.contextLength - (await this.countPrompt(messages));
    return room >= Math.min(this.maxTokens, MIN_USEFUL_OUTPUT_TOKENS) ? Math.min(this.maxTokens, room) : 0;
  }

  /** The request was answered: its cost is charged, and with a conversation the turn is stored. */
  async settle(reply: ChatMessage | undefined): Promise<void> {
    await this.settleWith({ status: 'success', errorCode: null }, { reply });
  }

  /**
   * Ends a stream. What reached the client (`delivered`: text or its own tool calls were
   * written to it) is charged, with the tools that ran and the prompts of the calls it came
   * from, whatever ends the stream: a failure after that (an upstream error, a broken or
   * stalled stream, the server's stop, the database) is charged for what was delivered,
   * never refunded, and recorded as an error with its code. A failure before anything
   * reached the client is refunded (see `fail`). A client that left pays for what was
   * generated (and for a prompt sent upstream without an answer). The settlement is kept
   * until it is written, through a database outage too (SettlementWriter). Throws the error
   * the stream must end with, if any.
   */
  async settleStream(failure: unknown, reply: ChatMessage | undefined, delivered: boolean): Promise<void> {
    const disconnected = this.estimate.clientGone.aborted;
    if (failure && !disconnected && !delivered) throw await this.fail(failure);
    if (disconnected) await this.chargeUnansweredPrompt();
    const ending: UsageEnding = disconnected
      ? { status: 'error', errorCode: 'client_disconnected' }
      : failure
        ? { status: 'error', errorCode: usageErrorCode(failure) }
        : { status: 'success', errorCode: null };
    try {
      await this.settleWith(ending, { reply, delivered: true });
    } catch (error) {
      // Not expected: the writer keeps a delivered stream's settlement until it is written.
      await this.giveUp('stream', error);
      if (!disconnected) throw failure ?? error;
      return;
    }
    if (failure && !disconnected) throw failure;
  }

  /**
   * A request that failed after its hold before anything reached its client (a plain
   * request, or a stream that had shown nothing). What it had already used (earlier
   * iterations of a tool loop) is charged and refunded in the same transaction, so the ledger
   * shows both and the caller pays nothing; the failure is recorded. A client that went away pays
   * for what it used instead. Returns the error to answer with: an API error, or our own
   * failure as it was (the global filter makes it a 500, or a 503 when the database is down).
   */
  async fail(error: unknown): Promise<unknown> {
    // Once the client has gone, whatever failed next (an aborted call, in whichever shape the
    // SDK reports it) failed because it left.
    const failure = this.estimate.clientGone.aborted
      ? new ApiError('bad_request', 'The client closed the request.', { code: 'client_disconnected' })
      : error;
    const clientLeft = failure instanceof ApiError && failure.code === 'client_disconnected';
    if (clientLeft) await this.chargeUnansweredPrompt();
    try {
      await this.settleWith({ status: 'error', errorCode: usageErrorCode(failure) }, { refund: !clientLeft });
    } catch (settleError) {
      await this.giveUp('failed request', settleError);
    }
    return failure;
  }

  /**
   * Charges the exact cost, releases the hold and writes the usage record, in one
   * transaction, shared with other requests' settlements (SettlementWriter); with a
   * conversation, a successful turn (the request's messages and the reply) is stored in the
   * same transaction. A turn or record that the database refuses as data is logged and
   * counted, and the charge for what was delivered still commits (see SettlementWriter).
   * Resolves once the settlement is durable: committed, or, with SETTLEMENT_DURABILITY=journal,
   * appended to the journal (the writer then commits it).
   */
  private settleWith(ending: UsageEnding, options: { refund?: boolean; reply?: ChatMessage; delivered?: boolean }): Promise<void> {
    return tracing.settlement(() => toMillicentsNumber(this.spend.totalMicros), ending, () => this.writeSettlement(ending, options));
  }

  private async writeSettlement(ending: UsageEnding, options: { refund?: boolean; reply?: ChatMessage; delivered?: boolean }): Promise<void> {
    const { subject, model, conversation } = this.estimate;
    const { spend } = this;
    const refund = options.refund === true;
    const { inputTokens, outputTokens, cachedTokens } = spend.tokens;
    // The hold lives until the charge commits, however long a kept settlement waits for the database;
    // so does the key's (its spend counts from that commit on).
    const released = () => {
      clearInterval(this.heartbeat);
      this.releaseKeyHold();
    };
    const latencyMs = Date.now() - this.estimate.startedAt;
    // A fallback model that answered is the request's model: in the ledger and the usage record.
    const answeredModel = spend.answeredBy?.model ?? model.id;
    const recordSubject = answeredModel === subject.model ? subject : { ...subject, model: answeredModel };
    try {
      await this.ports.settlements.submit({
        requestId: subject.requestId,
        order: {
          hold: this.hold,
          charge: {
            workspaceId: subject.workspaceId,
            costMicros: spend.totalMicros,
            description: `${answeredModel}: ${inputTokens} input + ${outputTokens} output tokens${
              spend.toolsUsed.length ? `, ${spend.toolsUsed.join(' and ')}` : ''
            }${spend.iterations > 1 ? ` over ${spend.iterations} calls` : ''}`,
          },
          refund,
          // A second attempt may follow one that did commit: its ledger rows are looked up first.
          retry: this.settleAttempts++ > 0,
        },
        record: storable(
          usageRecord(recordSubject, latencyMs, ending, {
            inputTokens,
            outputTokens,
            totalTokens: inputTokens + outputTokens,
            cachedTokens,
            llmCostMillicents: toMillicentsNumber(spend.llmMicros),
            toolCostMillicents: toMillicentsNumber(spend.toolMicros),
            totalCostMillicents: toMillicentsNumber(spend.totalMicros),
            toolsUsed: spend.toolsUsed,
            iterations: Math.max(spend.iterations, 1),
            provider: spend.answeredBy?.provider ?? null,
            deployment: spend.answeredBy?.deployment ?? null,
            attempts: spend.attempts,
          }),
        ),
        turn: conversation && ending.status === 'success' && options.reply ? this.turnOf(conversation, options.reply) : null,
        waitForCommit: this.estimate.idempotent === true,
        delivered: options.delivered === true,
        released,
      });
    } catch (error) {
      // Failed back to this request, which retries or gives the hold up.
      released();
      throw error;
    }
    if (!refund) this.estimate.onCharged?.(inputTokens + outputTokens, spend.totalMicros);
    this.estimate.spending?.settled(refund ? 0n : spend.totalMicros);
  }

  /** The conversation turn a successful request stores: its messages and the reply, each with its token count. */
  private turnOf(conversation: { id: string; messages: ChatMessage[] }, reply: ChatMessage): AppendTurnParams {
    const { spend } = this;
    const { inputTokens, outputTokens } = spend.tokens;
    return {
      workspaceId: this.estimate.subject.workspaceId,
      conversationId: conversation.id,
      // Only the reply's own annotations are kept: a request's messages may carry a client's, which point at nothing of ours.
      messages: storable([...conversation.messages.map(withoutAnnotations), reply]).map((message) => ({
        ...(message as object),
        tokens: countPromptTokens([message]),
      })) as AppendTurnParams['messages'],
      inputTokens,
      outputTokens,
      costMillicents: toDecimalString(spend.totalMicros),
      toolsUsed: spend.toolsUsed,
    };
  }

  /**
   * The settlement could not be written (the database is gone, say): counted, and the hold
   * released now rather than at its expiry. Releasing cannot undo a settlement that did
   * commit after all: that one already removed the hold.
   */
  private async giveUp(what: string, error: unknown): Promise<void> {
    this.incident('settlement_failed', error, `settling the ${what} failed; its hold ${this.hold.id} is released`);
    // Unknown whether any of it was charged: counted as the whole hold.
    this.estimate.spending?.settled(BigInt(this.hold.amountMillicents) * MICROS_PER_MILLICENT);
    this.releaseKeyHold();
    await this.ports.wallet.release(this.hold).catch((releaseError) =>
      logger.error(`Could not release hold ${this.hold.id} either; the sweeper frees it at its expiry: ${String(releaseError)}`),
    );
  }

  /** Once, in the background: a hold that could not be deleted is freed at its expiry. */
  private releaseKeyHold(): void {
    const { keyHold } = this;
    if (!keyHold || this.keyHoldReleased) return;
    this.keyHoldReleased = true;
    this.ports.keyBudgets!.release(keyHold).catch((error) =>
      logger.warn(`Could not release key hold ${keyHold.id}; it is freed at its expiry: ${String(error)}`),
    );
  }
  private keyHoldReleased = false;

  /** The model call under way when the client left had its prompt sent upstream: that is charged. */
  private async chargeUnansweredPrompt(): Promise<void> {
    const prompt = this.spend.unansweredPrompt;
    if (!prompt) return;
    const { model } = this.estimate;
    const tokens = await this.countPrompt(prompt);
    this.spend.addModelCall(this.pricing ?? model, { prompt_tokens: Math.min(tokens, model.contextLength), completion_tokens: 0, total_tokens: tokens });
  }

  private countPrompt(messages: ChatMessage[]): Promise<number> {
    return countPromptTokensAsync(messages, this.estimate.tools, { limit: this.estimate.model.contextLength });
  }

  /** Something failed beside (or instead of) a charge: logged and counted. */
  private incident(kind: keyof BillingIncidents, error: unknown, consequence = 'the charge stands'): void {
    const { incidents } = this.ports;
    incidents[kind] += 1;
    logger.error(`${kind} for request ${this.estimate.subject.requestId} (${incidents[kind]} so far); ${consequence}: ${String(error)}`);
  }
}

/** Seconds a client is asked to wait for the key's requests in flight to settle. */
export const KEY_HOLD_RETRY_SECONDS = 2;

/**
 * A request that its key's spending limit cannot cover. When what the key's requests in
 * flight hold would cover it, the limit is held, not spent: a 429 with `Retry-After`
 * (`key_limit_held`; the OpenAI SDK retries it), since those requests settle at their exact
 * cost, usually below their hold. Otherwise a 402 `key_limit_exceeded` that says when the
 * period starts again.
 */
function keyLimitRefusal(budget: KeyBudget, amounts: { remaining: number; held: number; needed: number }, model: ModelDefinition): ApiError {
  const { remaining, held, needed } = amounts;
  const period = budget.period === 'none' ? '' : ` per ${budget.period === 'daily' ? 'day' : budget.period === 'weekly' ? 'week' : 'month'} (UTC)`;
  const limit = `This API key's spending limit (${budget.limitMillicents} millicents${period})`;
  if (held > 0 && remaining + held >= needed) {
    return new ApiError(
      'rate_limit_exceeded',
      `${limit} is held by its requests in flight (${held} millicents), leaving ${remaining} millicents, ` +
        `less than this request on ${model.id} needs (at least ${needed} millicents). They settle at their exact cost: try again in ${KEY_HOLD_RETRY_SECONDS} seconds.`,
      {
        code: 'key_limit_held',
        remainingMillicents: remaining,
        retryAfterSeconds: KEY_HOLD_RETRY_SECONDS,
        headers: { 'Retry-After': String(KEY_HOLD_RETRY_SECONDS) },
      },
    );
  }
  const next = spendPeriodOf(budget.period);
  return new ApiError(
    'insufficient_balance',
    `${limit} has ${remaining} millicents left, less than this request on ${model.id} needs (at least ${needed} millicents). ` +
      (next ? `It starts again at ${next.end.toISOString()}, or raise the key's limit.` : "Raise the key's limit to continue."),
    { code: 'key_limit_exceeded', remainingMillicents: remaining },
  );
}

function holdAmount(micros: MicroMillicents): number {
  return Math.max(1, ceilMillicents(micros));
}

function withoutAnnotations(message: ChatMessage): ChatMessage {
  if (!('annotations' in message)) return message;
  const { annotations: _annotations, ...rest } = message as ChatMessage & { annotations?: unknown };
  return rest as ChatMessage;
}
