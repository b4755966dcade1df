import { Injectable, Logger } from '@nestjs/common';
import { Observable } from 'rxjs';
import { ApiError } from '../common/errors/api-error';
import type { Principal } from '../common/http/request-context';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import type { ModelDefinition } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import type { ChatCompletion, ChatCompletionChunk, CompletionUsage, ProviderRequest } from '../providers/provider-adapter';
import { ProvidersService } from '../providers/providers.service';
import { countPromptTokens, countTextTokens } from '../providers/tokens';
import { isAbort, toUpstreamApiError } from '../providers/upstream-errors';
import { UsageService } from '../usage/usage.service';
import { ceilMillicents, llmCost, MICROS_PER_MILLICENT, MicroMillicents, toMillicentsNumber } from '../wallet/cost';
import { Hold, WalletService } from '../wallet/wallet.service';
import { ChatRequest, parseChatRequest } from './chat-request';

/** The extension object of every completion (spec: "x_service"). */
export interface XService {
  cost_millicents: number;
  iterations: number;
  tools_used: string[];
  generated_files: string[] | null;
}

export type ChatCompletionResponse = ChatCompletion & { x_service: XService };
export type ChatCompletionChunkResponse = ChatCompletionChunk & { x_service?: XService };

export interface ChatCallContext {
  principal: Principal;
  requestId: string;
  /** Aborted when the client goes away: the upstream call stops with it. */
  signal: AbortSignal;
}

/** Below this many affordable output tokens a request is refused rather than cut short. */
const MIN_USEFUL_OUTPUT_TOKENS = 16;

/** A request that passed validation and has money held for it. */
interface PreparedCall {
  request: ChatRequest;
  model: ModelDefinition;
  hold: Hold;
  providerRequest: ProviderRequest;
  promptTokens: number;
  startedAt: number;
}

interface Outcome {
  usage: { inputTokens: number; outputTokens: number; cachedTokens: number };
  status: 'success' | 'error';
  errorCode: string | null;
}

/**
 * `POST /v1/chat/completions`: validate, hold the estimate, call the provider, settle the
 * exact cost in one transaction with the usage record. Every path out of a call (success,
 * upstream failure, client disconnect) ends in exactly one settle or release.
 */
@Injectable()
export class ChatService {
  private readonly logger = new Logger('Chat');

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    private readonly wallet: WalletService,
    private readonly usage: UsageService,
  ) {}

  async complete(context: ChatCallContext, body: unknown): Promise<ChatCompletionResponse> {
    const call = await this.prepare(context, body);
    let completion: ChatCompletion;
    try {
      completion = await this.providers.complete(call.providerRequest);
    } catch (error) {
      throw await this.fail(context, call, error);
    }
    const usage = completion.usage ?? this.countUsage(call, textOfCompletion(completion));
    const cost = await this.settle(context, call, {
      usage: toTokenCounts(usage),
      status: 'success',
      errorCode: null,
    });
    return {
      ...completion,
      model: call.model.id,
      usage: withTotals(usage),
      x_service: xService(cost),
    };
  }

  /**
   * Validates, holds and opens the upstream stream before returning, so that every failure
   * up to the first chunk is still an ordinary HTTP error. The observable then emits the
   * chunks; `x_service` rides on the last one.
   */
  async stream(context: ChatCallContext, body: unknown): Promise<Observable<ChatCompletionChunkResponse>> {
    const call = await this.prepare(context, body);
    let opened: Awaited<ReturnType<ProvidersService['openStream']>>;
    try {
      opened = await this.providers.openStream(call.providerRequest);
    } catch (error) {
      throw await this.fail(context, call, error);
    }
    const includeUsage = call.request.dto.stream_options?.include_usage === true;

    return new Observable<ChatCompletionChunkResponse>((subscriber) => {
      const generated: string[] = [];
      let usage: CompletionUsage | undefined;
      let finishChunk: ChatCompletionChunk | undefined;
      let failure: unknown;

      const relay = (chunk: ChatCompletionChunk) => {
        if (chunk.usage) usage = chunk.usage;
        if (chunk.choices.length === 0) return; // the usage chunk: re-sent at the end if asked for
        for (const choice of chunk.choices) {
          if (choice.delta?.content) generated.push(choice.delta.content);
          for (const toolCall of choice.delta?.tool_calls ?? []) generated.push(toolCall.function?.arguments ?? '');
        }
        if (finishChunk) subscriber.next(finishChunk);
        const out: ChatCompletionChunk = { ...chunk, model: call.model.id };
        delete out.usage;
        // The last finishing chunk waits for the usage that follows it, to carry x_service.
        finishChunk = chunk.choices.some((choice) => choice.finish_reason) ? out : undefined;
        if (!finishChunk) subscriber.next(out);
      };

      (async () => {
        try {
          relay(opened.first);
          for (let next = await opened.rest.next(); !next.done; next = await opened.rest.next()) relay(next.value);
        } catch (error) {
          failure = error;
        }
        const disconnected = context.signal.aborted;
        const counted = usage ? toTokenCounts(usage) : toTokenCounts(this.countUsage(call, generated.join('')));
        if (failure && !disconnected) {
          await this.fail(context, call, failure, counted).then((apiError) => subscriber.error(apiError));
          return;
        }
        // A client that went away pays for what was generated until then.
        const cost = await this.settle(context, call, {
          usage: counted,
          status: disconnected ? 'error' : 'success',
          errorCode: disconnected ? 'client_disconnected' : null,
        });
        if (disconnected) return;
        const final: ChatCompletionChunkResponse[] = [];
        if (finishChunk) final.push(finishChunk);
        if (includeUsage) {
          final.push({ ...opened.first, model: call.model.id, choices: [], usage: withTotals(usage ?? this.countUsage(call, generated.join(''))) });
        }
        if (final.length === 0) final.push({ ...opened.first, model: call.model.id, choices: [] });
        final[final.length - 1] = { ...final[final.length - 1], x_service: xService(cost) };
        final.forEach((chunk) => subscriber.next(chunk));
        subscriber.complete();
      })().catch((error: unknown) => subscriber.error(error));
    });
  }

  private async prepare(context: ChatCallContext, body: unknown): Promise<PreparedCall> {
    const startedAt = Date.now();
    let request: ChatRequest | undefined;
    let model: ModelDefinition | undefined;
    try {
      request = await parseChatRequest(body);
      model = this.resolveModel(request);
      const promptTokens = countPromptTokens(request.messages, request.tools);
      const requestedCap = request.maxTokens ?? model.maxOutputTokens;
      if (request.maxTokens !== undefined && request.maxTokens > model.maxOutputTokens) {
        throw ApiError.badRequest(
          `${request.maxTokensField} is too large: ${model.id} can produce at most ${model.maxOutputTokens} output tokens.`,
          request.maxTokensField,
        );
      }
      if (promptTokens + Math.min(requestedCap, MIN_USEFUL_OUTPUT_TOKENS) > model.contextLength) {
        throw ApiError.badRequest(
          `The messages (about ${promptTokens} tokens) exceed the context window of ${model.id} (${model.contextLength} tokens).`,
          'messages',
          'context_length_exceeded',
        );
      }
      const { hold, maxTokens } = await this.reserve(context, model, request, promptTokens, requestedCap);
      return {
        request,
        model,
        hold,
        promptTokens,
        startedAt,
        providerRequest: {
          model,
          messages: request.messages,
          tools: request.tools.length > 0 ? request.tools : undefined,
          temperature: request.dto.temperature,
          maxTokens,
          maxTokensField: request.maxTokensField,
          extra: request.extra,
          signal: context.signal,
        },
      };
    } catch (error) {
      await this.recordRefused(context, request, model, startedAt, error);
      throw error;
    }
  }

  private resolveModel(request: ChatRequest): ModelDefinition {
    // No workspace has assistants or conversations yet: any id names one that does not exist.
    if (request.dto.assistant_id !== undefined) {
      throw ApiError.notFound(`No assistant '${request.dto.assistant_id}' in this workspace.`, 'assistant_not_found', 'assistant_id');
    }
    if (request.dto.conversation_id !== undefined) {
      throw ApiError.notFound(
        `No conversation '${request.dto.conversation_id}' in this workspace.`,
        'conversation_not_found',
        'conversation_id',
      );
    }
    if (!request.dto.model) {
      throw ApiError.badRequest('You must provide a model parameter (or an assistant_id).', 'model');
    }
    return this.models.get(request.dto.model);
  }

  /**
   * Holds prompt + output cap at the model's prices. When the wallet cannot cover the cap,
   * the cap is lowered to what it can cover; below a useful minimum the request is refused.
   */
  private async reserve(
    context: ChatCallContext,
    model: ModelDefinition,
    request: ChatRequest,
    promptTokens: number,
    requestedCap: number,
  ): Promise<{ hold: Hold; maxTokens: number }> {
    const { workspaceId } = context.principal;
    const promptCost = llmCost(model, { inputTokens: promptTokens, outputTokens: 0, cachedTokens: 0 });
    const outputCost = (tokens: number) => BigInt(tokens) * BigInt(request.choices) * BigInt(model.outputPrice);
    const ttl = this.config.holdTtlMs;

    const full = await this.wallet.hold(workspaceId, context.requestId, holdAmount(promptCost + outputCost(requestedCap)), ttl);
    if (full) return { hold: full, maxTokens: requestedCap };

    const { availableMillicents } = await this.wallet.balance(workspaceId);
    const perToken = BigInt(request.choices) * BigInt(Math.max(model.outputPrice, 1));
    const spare = BigInt(availableMillicents) * MICROS_PER_MILLICENT - promptCost;
    const affordable = spare > 0n ? Number(spare / perToken) : 0;
    const cap = Math.min(requestedCap, affordable);
    if (cap >= Math.min(requestedCap, MIN_USEFUL_OUTPUT_TOKENS)) {
      const lowered = await this.wallet.hold(workspaceId, context.requestId, holdAmount(promptCost + outputCost(cap)), ttl);
      if (lowered) return { hold: lowered, maxTokens: cap };
    }
    throw new ApiError(
      'insufficient_balance',
      `Your wallet's available balance (${availableMillicents} millicents) does not cover this request on ${model.id} ` +
        `(at least ${ceilMillicents(promptCost + outputCost(Math.min(requestedCap, MIN_USEFUL_OUTPUT_TOKENS)))} millicents). Top up the wallet to continue.`,
      { code: 'insufficient_balance' },
    );
  }

  /** Charges the exact cost, releases the hold and writes the usage record, in one transaction. */
  private async settle(context: ChatCallContext, call: PreparedCall, outcome: Outcome): Promise<MicroMillicents> {
    const cost = llmCost(call.model, outcome.usage);
    const { inputTokens, outputTokens, cachedTokens } = outcome.usage;
    await this.wallet.settle(
      call.hold,
      {
        workspaceId: context.principal.workspaceId,
        costMicros: cost,
        description: `${call.model.id}: ${inputTokens} input + ${outputTokens} output tokens`,
      },
      (manager, settlement) =>
        this.usage.record(manager, {
          ...this.usageBase(context, call.request, call.model.id, call.startedAt),
          inputTokens,
          outputTokens,
          totalTokens: inputTokens + outputTokens,
          cachedTokens,
          llmCostMillicents: toMillicentsNumber(cost),
          toolCostMillicents: 0,
          totalCostMillicents: toMillicentsNumber(cost),
          chargedMillicents: settlement.chargedMillicents,
          status: outcome.status,
          errorCode: outcome.errorCode,
        }),
    );
    return cost;
  }

  /**
   * A call that failed after its hold: nothing is charged (the failure is ours or the
   * provider's, not the caller's), the hold is released and the failure recorded.
   */
  private async fail(
    context: ChatCallContext,
    call: PreparedCall,
    error: unknown,
    counted?: Outcome['usage'],
  ): Promise<ApiError> {
    const apiError =
      error instanceof ApiError
        ? error
        : isAbort(error) && context.signal.aborted
          ? new ApiError('bad_request', 'The client closed the request.', { code: 'client_disconnected' })
          : toUpstreamApiError(error, call.model.provider);
    const code = apiError.code;
    try {
      await this.wallet.settle(
        call.hold,
        { workspaceId: context.principal.workspaceId, costMicros: 0n, description: `${call.model.id}: failed request` },
        (manager) =>
          this.usage.record(manager, {
            ...this.usageBase(context, call.request, call.model.id, call.startedAt),
            ...uncharged(counted),
            status: 'error',
            errorCode: code,
          }),
      );
    } catch (settleError) {
      // The hold expires and the sweeper frees it; the caller still gets the real error.
      this.logger.error(`Could not release hold ${call.hold.id} [request ${context.requestId}]: ${String(settleError)}`);
    }
    return apiError;
  }

  /** A request refused before any money was held: recorded, never charged. */
  private async recordRefused(
    context: ChatCallContext,
    request: ChatRequest | undefined,
    model: ModelDefinition | undefined,
    startedAt: number,
    error: unknown,
  ): Promise<void> {
    const code = error instanceof ApiError ? error.code : 'internal_error';
    const rawModel = (request?.dto.model ?? '').slice(0, 200);
    await this.usage
      .insert({
        ...this.usageBase(context, request, model?.id ?? (rawModel || 'unknown'), startedAt),
        ...uncharged(),
        status: 'error',
        errorCode: code,
      })
      .catch((recordError) => this.logger.error(`Could not record a refused request: ${String(recordError)}`));
  }

  private usageBase(context: ChatCallContext, request: ChatRequest | undefined, model: string, startedAt: number) {
    return {
      workspaceId: context.principal.workspaceId,
      requestId: context.requestId,
      apiKeyId: context.principal.apiKeyId,
      assistantId: null,
      model,
      latencyMs: Date.now() - startedAt,
      userId: request?.dto.user_id ?? null,
      subscriptionId: request?.dto.subscription_id ?? null,
      toolsUsed: [],
      stream: request?.dto.stream === true,
      iterations: 1,
    };
  }

  /** When the provider reports no usage, the tokenizer counts it. */
  private countUsage(call: PreparedCall, generatedText: string): CompletionUsage {
    const completion = countTextTokens(generatedText);
    return { prompt_tokens: call.promptTokens, completion_tokens: completion, total_tokens: call.promptTokens + completion };
  }
}

/** The token and cost fields of a usage record for a request that was not charged. */
function uncharged(counted: Outcome['usage'] = { inputTokens: 0, outputTokens: 0, cachedTokens: 0 }) {
  return {
    ...counted,
    totalTokens: counted.inputTokens + counted.outputTokens,
    llmCostMillicents: 0,
    toolCostMillicents: 0,
    totalCostMillicents: 0,
    chargedMillicents: 0,
  };
}

function holdAmount(micros: MicroMillicents): number {
  return Math.max(1, ceilMillicents(micros));
}

function toTokenCounts(usage: CompletionUsage): Outcome['usage'] {
  return {
    inputTokens: usage.prompt_tokens ?? 0,
    outputTokens: usage.completion_tokens ?? 0,
    cachedTokens: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

function withTotals(usage: CompletionUsage): CompletionUsage {
  return { ...usage, total_tokens: (usage.prompt_tokens ?? 0) + (usage.completion_tokens ?? 0) };
}

function xService(cost: MicroMillicents): XService {
  return { cost_millicents: toMillicentsNumber(cost), iterations: 1, tools_used: [], generated_files: null };
}

function textOfCompletion(completion: ChatCompletion): string {
  return completion.choices
    .map((choice) => (choice.message?.content ?? '') + JSON.stringify(choice.message?.tool_calls ?? ''))
    .join('');
}
