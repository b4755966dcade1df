import { Injectable, Logger } from '@nestjs/common';
import { setTimeout as sleep } from 'node:timers/promises';
import { Observable } from 'rxjs';
import { ASSISTANT_MODEL_PREFIX, assistantOfModel, AssistantsService } from '../assistants/assistants.service';
import type { Assistant, AssistantTool } from '../assistants/entities/assistant.entity';
import { inSavepoint } from '../common/database/savepoint';
import { storable } from '../common/database/storable';
import { ApiError } from '../common/errors/api-error';
import { ConversationsService } from '../conversations/conversations.service';
import type { Principal } from '../common/http/request-context';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import type { ModelDefinition } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatMessage,
  CompletionUsage,
  FunctionTool,
  ProviderRequest,
} from '../providers/provider-adapter';
import { ProvidersService } from '../providers/providers.service';
import { countPromptTokens, countPromptTokensAsync, countTextTokensAsync } from '../providers/tokens';
import { ServerToolCall, ToolsService } from '../tools/tools.service';
import { NOTHING_USED, UsageService } from '../usage/usage.service';
import { ceilMillicents, llmCost, MICROS_PER_MILLICENT, MicroMillicents, toDecimalString, toMillicentsNumber } from '../wallet/cost';
import { AutoTopupService } from '../wallet/auto-topup.service';
import { Hold, WalletService } from '../wallet/wallet.service';
import { ChatRequest, parseChatRequest } from './chat-request';
import { checkedUsage, isTokenCount, Spend } from './spend';
import type { ChatCompletionChunkResponse, ChatCompletionResponse, KeepAlive, XService } from './completion-types';
import { StreamedIteration, StreamRelay } from './stream-relay';

export interface ChatCallContext {
  principal: Principal;
  requestId: string;
  /** Aborted when the client goes away: the upstream call stops with it. */
  signal: AbortSignal;
}

/** Below this many affordable output tokens a request is refused rather than cut short. */
const MIN_USEFUL_OUTPUT_TOKENS = 16;
/** Room held for each tool result that the next iteration's prompt will carry. */
const TOKENS_PER_TOOL_RESULT = 1_500;
/** Tries at settling a request whose answer was delivered, before the hold is left to expire. */
const SETTLE_ATTEMPTS = 3;
const SETTLE_RETRY_MS = 200;

/** A request that passed validation and has money held for it. */
interface PreparedCall {
  request: ChatRequest;
  model: ModelDefinition;
  /** Null in direct mode. */
  assistant: Assistant | null;
  hold: Hold;
  startedAt: number;
  /** The conversation sent upstream: the assistant's system prompt first, then the request's messages. */
  messages: ChatMessage[];
  clientTools: FunctionTool[];
  serverTools: AssistantTool[];
  temperature?: number;
  /** The output cap of each model call (lowered when the wallet could not cover the asked one). */
  maxTokens: number;
  /** 1 without server tools; the assistant's limit with them. */
  maxIterations: number;
  /** With `conversation_id`: where the request's messages and the answer are stored. */
  conversationId: string | null;
  /** Keeps the hold from expiring while the request runs; stopped when it settles. */
  heartbeat: NodeJS.Timeout;
}

/** How a request ended, for its usage record. */
interface Ending {
  status: 'success' | 'error';
  errorCode: string | null;
}

/**
 * `POST /v1/chat/completions`. Resolves the assistant (assistant mode) or model (direct
 * mode), holds the estimate, then runs the tool loop: each model call is one iteration;
 * server tools (web_search, file_search) run here and their results go back to the model;
 * the loop ends when the model answers, calls a client tool, or reaches the iteration limit.
 * Every path out (success, upstream failure, client disconnect) ends in exactly one
 * settlement: the exact cost charged with the usage record in one transaction.
 */
@Injectable()
export class ChatService {
  private readonly logger = new Logger('Chat');
  /** Writes that failed beside a charge that stood, since start (for logs and, later, metrics). */
  readonly incidents = { conversation_turn_not_stored: 0, usage_record_not_stored: 0 };

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    private readonly wallet: WalletService,
    private readonly usage: UsageService,
    private readonly assistants: AssistantsService,
    private readonly tools: ToolsService,
    private readonly conversations: ConversationsService,
    private readonly autoTopup: AutoTopupService,
  ) {}

  async complete(context: ChatCallContext, body: unknown): Promise<ChatCompletionResponse> {
    const call = await this.prepare(context, body);
    const spend = new Spend();
    let messages = call.messages;
    try {
      for (;;) {
        spend.calling(messages);
        const completion = await this.providers.complete(this.providerRequest(context, call, messages, spend));
        spend.addModelCall(call.model, await this.usageOf(call, messages, completion.usage, textOf(completion)));
        const message = completion.choices[0]?.message;
        const serverCalls = this.serverCallsOf(call, message?.tool_calls);
        const clientCalls = (message?.tool_calls?.length ?? 0) - serverCalls.length;
        if (serverCalls.length === 0 || clientCalls > 0 || this.isLastIteration(call, spend)) {
          return await this.answer(context, call, spend, completion);
        }
        if (!(await this.holdNextIteration(call, messages, serverCalls, spend))) {
          return await this.answer(context, call, spend, outOfFunds(completion));
        }
        messages = [...messages, assistantTurn(message!.content, serverCalls), ...(await this.runTools(call, serverCalls, spend, context.signal))];
      }
    } catch (error) {
      throw await this.fail(context, call, spend, error);
    }
  }

  /**
   * Validates, holds and opens the upstream stream before returning, so that every failure
   * up to the first chunk is still an ordinary HTTP error. The observable then emits the
   * chunks of all iterations as one completion, keep-alives while tools run, and
   * `x_service` on the last chunk.
   */
  async stream(context: ChatCallContext, body: unknown): Promise<Observable<ChatCompletionChunkResponse | KeepAlive>> {
    const call = await this.prepare(context, body);
    const spend = new Spend();
    let opened: Awaited<ReturnType<ProvidersService['openStream']>>;
    try {
      spend.calling(call.messages);
      opened = await this.providers.openStream(this.providerRequest(context, call, call.messages, spend));
    } catch (error) {
      throw await this.fail(context, call, spend, error);
    }
    const includeUsage = call.request.dto.stream_options?.include_usage === true;

    return new Observable<ChatCompletionChunkResponse | KeepAlive>((subscriber) => {
      const relay = new StreamRelay(subscriber, call.model.id, (name) => this.tools.isServerTool(name, call.serverTools));
      (async () => {
        let messages = call.messages;
        let chunks: AsyncIterable<ChatCompletionChunk> = prepend(opened.first, opened.rest);
        let failure: unknown;
        let finishReason: 'length' | 'stop' | undefined;
        let iteration: StreamedIteration;
        for (;;) {
          iteration = { generated: '', content: '', serverCalls: [], clientCalls: [] };
          try {
            await relay.relay(chunks, iteration);
          } catch (error) {
            failure = error;
          }
          // Counted even when the stream broke: a client that went away pays for what was generated.
          spend.addModelCall(call.model, await this.usageOf(call, messages, iteration.usage, iteration.generated));
          if (failure || iteration.serverCalls.length === 0 || iteration.clientCalls.length > 0 || this.isLastIteration(call, spend)) break;
          try {
            if (!(await this.holdNextIteration(call, messages, iteration.serverCalls, spend))) {
              relay.say(`${iteration.content ? '\n\n' : ''}${OUT_OF_FUNDS_NOTE}`);
              finishReason = 'length';
              break;
            }
            relay.continueLoop();
            const keepAlive = setInterval(() => relay.keepAlive(), 5_000);
            try {
              messages = [
                ...messages,
                assistantTurn(iteration.content || null, iteration.serverCalls),
                ...(await this.runTools(call, iteration.serverCalls, spend, context.signal)),
              ];
            } finally {
              clearInterval(keepAlive);
            }
            spend.calling(messages);
            const next = await this.providers.openStream(this.providerRequest(context, call, messages, spend));
            chunks = prepend(next.first, next.rest);
          } catch (error) {
            failure = error;
            break;
          }
        }

        // Stopped at the iteration limit with server calls only: the client sees an answer, not tool calls.
        if (!finishReason && iteration.serverCalls.length > 0 && iteration.clientCalls.length === 0) finishReason = 'stop';
        const disconnected = context.signal.aborted;
        // A stalled upstream ends the stream, but what it generated was delivered: it is charged.
        const stalled = !disconnected && isStall(failure);
        if (failure && !disconnected && !stalled) {
          subscriber.error(await this.fail(context, call, spend, failure));
          return;
        }
        if (disconnected) await this.chargeUnansweredPrompt(call, spend);
        const ending: Ending = disconnected
          ? { status: 'error', errorCode: 'client_disconnected' }
          : stalled
            ? { status: 'error', errorCode: (failure as ApiError).code }
            : { status: 'success', errorCode: null };
        try {
          await this.settleDelivered(context, call, spend, ending, replyOf(iteration));
        } catch (error) {
          // The settlement is idempotent per hold and was retried; if the database is gone the
          // hold is released by the sweeper at its expiry.
          this.logger.error(`Settling stream ${context.requestId} failed (hold ${call.hold.id}): ${String(error)}`);
          if (!disconnected) subscriber.error(error);
          return;
        }
        if (disconnected) return;
        if (stalled) {
          subscriber.error(failure);
          return;
        }
        relay.finish(this.xService(spend), includeUsage ? spend.usage() : undefined, finishReason);
        subscriber.complete();
      })().catch((error: unknown) => subscriber.error(error));
    });
  }

  private async prepare(context: ChatCallContext, body: unknown): Promise<PreparedCall> {
    const startedAt = Date.now();
    let request: ChatRequest | undefined;
    let model: ModelDefinition | undefined;
    let assistant: Assistant | null = null;
    try {
      const fields = body as { assistant_id?: unknown; model?: unknown } | null;
      const assistantMode = (fields?.assistant_id !== undefined && fields?.assistant_id !== null) || assistantOfModel(typeof fields?.model === 'string' ? fields.model : undefined) !== undefined;
      request = await parseChatRequest(body, { assistantMode });
      const { workspaceId } = context.principal;
      const conversation =
        request.dto.conversation_id === undefined ? null : await this.conversations.findForChat(workspaceId, request.dto.conversation_id);
      // Refused before anything is held or sent: a conversation that would grow past its limits.
      if (conversation) this.conversations.assertRoomFor(conversation, request.messages);
      const assistantAsModel = assistantOfModel(request.dto.model);
      if (assistantAsModel !== undefined && request.dto.assistant_id !== undefined) {
        throw ApiError.badRequest(`Name the assistant once: with assistant_id, or with model "${ASSISTANT_MODEL_PREFIX}<slug>".`, 'model');
      }
      if (assistantAsModel !== undefined) {
        assistant = await this.assistants.resolve(workspaceId, assistantAsModel, 'model');
      } else if (request.dto.assistant_id !== undefined) {
        assistant = await this.assistants.resolve(workspaceId, request.dto.assistant_id);
      } else if (conversation?.assistantId && request.dto.model === undefined) {
        // A conversation started with an assistant goes on with it unless the request says otherwise.
        assistant = await this.assistants.resolve(workspaceId, conversation.assistantId);
      }
      // `model: "assistant/<slug>"` runs the assistant on its own model; with assistant_id, `model` overrides it.
      const modelId = assistantAsModel !== undefined ? assistant!.model : (request.dto.model ?? assistant?.model);
      if (!modelId) throw ApiError.badRequest('You must provide a model parameter (or an assistant_id).', 'model');
      model = this.models.get(modelId);
      // What the provider cannot honour, or would bill beyond the catalog's prices, is refused before any money is held.
      this.providers.adapterFor(model).checkRequest?.(request.extra, request.messages);

      const serverTools = assistant?.tools ?? [];
      if (serverTools.length > 0 && request.choices > 1) {
        throw ApiError.badRequest('n must be 1 with an assistant that has server tools.', 'n');
      }
      const systemPrompt: ChatMessage[] = assistant?.systemPrompt ? [{ role: 'system', content: assistant.systemPrompt }] : [];
      const requestedCap = request.maxTokens ?? assistant?.maxTokens ?? model.maxOutputTokens;
      if (requestedCap > model.maxOutputTokens) {
        const param = request.maxTokensField ?? 'max_tokens';
        throw ApiError.badRequest(
          `${param} is too large: ${model.id} can produce at most ${model.maxOutputTokens} output tokens.`,
          request.maxTokensField,
        );
      }
      const tools = [...request.tools, ...this.tools.definitions(serverTools)];
      const minimumOutput = Math.min(requestedCap, MIN_USEFUL_OUTPUT_TOKENS);
      // Counted beside other requests, and only up to the context window: megabytes of text are refused, not counted to the end.
      const ownTokens = await countPromptTokensAsync([...systemPrompt, ...request.messages], tools, { limit: model.contextLength });
      if (ownTokens + minimumOutput > model.contextLength) throw contextExceeded(model, ownTokens);
      // Only the newest stored messages that fit beside the request are read.
      const history = conversation ? await this.conversations.historyWithin(workspaceId, conversation.id, model.contextLength - requestedCap - ownTokens) : [];
      const messages = [...systemPrompt, ...history, ...request.messages];
      const promptTokens = history.length > 0 ? await countPromptTokensAsync(messages, tools, { limit: model.contextLength }) : ownTokens;
      if (promptTokens + minimumOutput > model.contextLength) throw contextExceeded(model, promptTokens);
      const { hold, maxTokens } = await this.reserve(context, model, request, promptTokens, requestedCap);
      return {
        request,
        model,
        assistant,
        hold,
        startedAt,
        messages,
        clientTools: request.tools,
        serverTools,
        temperature: request.dto.temperature ?? assistant?.temperature ?? undefined,
        maxTokens,
        maxIterations: serverTools.length > 0 ? assistant!.maxToolIterations : 1,
        conversationId: conversation?.id ?? null,
        heartbeat: this.keepAlive(hold),
      };
    } catch (error) {
      await this.recordRefused(context, request, model, assistant, startedAt, error);
      throw error;
    }
  }

  /**
   * The provider request of the next iteration. Server tools are offered as functions; on
   * the last allowed iteration the model is told not to call tools, so that it answers.
   */
  private providerRequest(context: ChatCallContext, call: PreparedCall, messages: ChatMessage[], spend: Spend): ProviderRequest {
    const tools = this.offeredTools(call);
    const lastWithTools = call.serverTools.length > 0 && spend.iterations + 1 >= call.maxIterations;
    return {
      model: call.model,
      messages,
      tools: tools.length > 0 ? tools : undefined,
      temperature: call.temperature,
      maxTokens: call.maxTokens,
      maxTokensField: call.request.maxTokensField,
      extra: lastWithTools ? { ...call.request.extra, tool_choice: 'none' } : call.request.extra,
      signal: context.signal,
    };
  }

  private isLastIteration(call: PreparedCall, spend: Spend): boolean {
    return spend.iterations >= call.maxIterations;
  }

  private serverCallsOf(call: PreparedCall, toolCalls: NonNullable<ChatCompletion['choices'][number]['message']>['tool_calls']): ServerToolCall[] {
    return (toolCalls ?? [])
      .filter((toolCall) => toolCall.type === 'function' && this.tools.isServerTool(toolCall.function.name, call.serverTools))
      .map((toolCall) => {
        const fn = (toolCall as { function: { name: string; arguments: string } }).function;
        return { id: toolCall.id, name: fn.name as ServerToolCall['name'], arguments: fn.arguments };
      });
  }

  /** Runs the server tool calls of one iteration side by side; returns their tool messages. */
  private async runTools(call: PreparedCall, calls: ServerToolCall[], spend: Spend, signal: AbortSignal): Promise<ChatMessage[]> {
    const outcomes = await Promise.all(calls.map((toolCall) => this.tools.run(toolCall, call.assistant!, signal)));
    return outcomes.map((outcome, index) => {
      if (outcome.ran) spend.addToolCall(calls[index].name, outcome.costMicros);
      return { role: 'tool', tool_call_id: calls[index].id, content: outcome.content };
    });
  }

  /**
   * Before running tools and calling the model again, makes sure the hold covers what is
   * spent, these tool calls, and the next call's estimate. False when the wallet cannot:
   * the request then ends cleanly with what it has.
   */
  private async holdNextIteration(call: PreparedCall, messages: ChatMessage[], calls: ServerToolCall[], spend: Spend): Promise<boolean> {
    const nextPromptTokens = (await countPromptTokensAsync(messages)) + calls.length * TOKENS_PER_TOOL_RESULT;
    const next = llmCost(call.model, { inputTokens: nextPromptTokens, outputTokens: call.maxTokens, cachedTokens: 0 });
    const needed = spend.totalMicros + BigInt(calls.length) * this.tools.maxPriceMicros(call.serverTools) + next;
    const extra = ceilMillicents(needed) - call.hold.amountMillicents;
    return this.wallet.extendHold(call.hold, extra, this.config.holdTtlMs);
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

  /** Settles, then shapes the last completion as the answer: usage and cost of the whole request. */
  private async answer(context: ChatCallContext, call: PreparedCall, spend: Spend, completion: ChatCompletion): Promise<ChatCompletionResponse> {
    const choices = completion.choices.map((choice) => withoutServerCalls(choice, (name) => this.tools.isServerTool(name, call.serverTools)));
    await this.settle(context, call, spend, { status: 'success', errorCode: null }, { reply: choices[0]?.message as ChatMessage | undefined });
    return {
      ...completion,
      model: call.model.id,
      choices,
      usage: spend.usage(),
      x_service: this.xService(spend),
    };
  }

  /**
   * Charges the exact cost, releases the hold and writes the usage record, in one
   * transaction; with a conversation, a successful turn (the request's messages and the
   * reply) is stored in the same transaction. What is written besides the charge runs in
   * savepoints: a turn or record that cannot be stored is logged and counted, and the charge
   * for what was delivered still commits.
   */
  private async settle(
    context: ChatCallContext,
    call: PreparedCall,
    spend: Spend,
    ending: Ending,
    options: { refund?: boolean; reply?: ChatMessage } = {},
  ): Promise<void> {
    const refund = options.refund === true;
    const { inputTokens, outputTokens, cachedTokens } = spend.tokens;
    clearInterval(call.heartbeat);
    const settlement = await this.wallet.settle(
      call.hold,
      {
        workspaceId: context.principal.workspaceId,
        costMicros: spend.totalMicros,
        description: `${call.model.id}: ${inputTokens} input + ${outputTokens} output tokens${
          spend.toolsUsed.length ? `, ${spend.toolsUsed.join(' and ')}` : ''
        }${spend.iterations > 1 ? ` over ${spend.iterations} calls` : ''}`,
      },
      async (manager, settlement) => {
        if (call.conversationId && ending.status === 'success' && options.reply) {
          const turn = storable([...call.request.messages, options.reply]);
          const failed = await inSavepoint(manager, () =>
            this.conversations.appendTurn(manager, {
              workspaceId: context.principal.workspaceId,
              conversationId: call.conversationId!,
              messages: turn.map((message) => ({
                ...(message as object),
                tokens: countPromptTokens([message]),
              })) as Parameters<ConversationsService['appendTurn']>[1]['messages'],
              inputTokens,
              outputTokens,
              costMillicents: toDecimalString(spend.totalMicros),
            }),
          );
          if (failed) this.incident('conversation_turn_not_stored', context, failed);
        }
        const record = storable({
          ...this.usageBase(context, call.request, call.model.id, call.assistant, call.startedAt),
          inputTokens,
          outputTokens,
          totalTokens: inputTokens + outputTokens,
          cachedTokens,
          llmCostMillicents: toMillicentsNumber(spend.llmMicros),
          toolCostMillicents: toMillicentsNumber(spend.toolMicros),
          totalCostMillicents: toMillicentsNumber(spend.totalMicros),
          chargedMillicents: refund ? 0 : settlement.chargedMillicents,
          toolsUsed: spend.toolsUsed,
          iterations: Math.max(spend.iterations, 1),
          status: ending.status,
          errorCode: ending.errorCode,
        });
        const failed = await inSavepoint(manager, () => this.usage.record(manager, record));
        if (failed) this.incident('usage_record_not_stored', context, failed);
      },
      { refund },
    );
    if (settlement.writtenOffMillicents > 0) {
      this.logger.warn(
        `Request ${context.requestId} cost ${settlement.writtenOffMillicents} millicents more than workspace ` +
          `${context.principal.workspaceId} could cover; charged what it had.`,
      );
    }
    // Committed: a balance left below the auto top-up threshold buys a top-up, in the background.
    this.autoTopup.afterCharge(context.principal.workspaceId);
  }

  /**
   * Settles a request whose answer (or part of it) reached the client. The settlement is
   * idempotent per hold, so a transient database failure is retried rather than letting the
   * hold expire uncharged.
   */
  private async settleDelivered(context: ChatCallContext, call: PreparedCall, spend: Spend, ending: Ending, reply: ChatMessage): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.settle(context, call, spend, ending, { reply });
      } catch (error) {
        if (attempt >= SETTLE_ATTEMPTS) throw error;
        await sleep(SETTLE_RETRY_MS * attempt);
      }
    }
  }

  /** Something written beside a charge could not be stored: logged and counted, never a lost charge. */
  private incident(kind: keyof ChatService['incidents'], context: ChatCallContext, error: unknown): void {
    this.incidents[kind] += 1;
    this.logger.error(`${kind} for request ${context.requestId} (${this.incidents[kind]} so far); the charge stands: ${String(error)}`);
  }

  /**
   * A request that failed after its hold. What it had already used (earlier iterations of a
   * tool loop) is charged and refunded in the same transaction, so the ledger shows both
   * and the caller pays nothing; the hold is released and the failure recorded. Returns the
   * error to answer with: an API error, or our own failure as it was (the global filter
   * makes it a 500, or a 503 when the database is down).
   */
  private async fail(context: ChatCallContext, call: PreparedCall, spend: Spend, error: unknown): Promise<unknown> {
    // Once the client has gone, whatever failed next (an aborted call, in whichever shape the
    // SDK reports it) failed because it left.
    const failure = context.signal.aborted
      ? new ApiError('bad_request', 'The client closed the request.', { code: 'client_disconnected' })
      : error;
    // A client that went away pays for what it used (at least the prompt it had sent upstream),
    // as a disconnected stream does; a failure of ours or the provider's is charged and
    // refunded, so the caller pays nothing.
    const clientLeft = failure instanceof ApiError && failure.code === 'client_disconnected';
    if (clientLeft) await this.chargeUnansweredPrompt(call, spend);
    const errorCode = failure instanceof ApiError ? failure.code : 'internal_error';
    try {
      await this.settle(context, call, spend, { status: 'error', errorCode }, { refund: !clientLeft });
    } catch (settleError) {
      // The hold expires and the sweeper frees it; the caller still gets the real error.
      this.logger.error(`Could not settle failed request ${context.requestId} (hold ${call.hold.id}): ${String(settleError)}`);
    }
    return failure;
  }

  /** The model call under way when the client left had its prompt sent upstream: that is charged. */
  private async chargeUnansweredPrompt(call: PreparedCall, spend: Spend): Promise<void> {
    if (!spend.unansweredPrompt) return;
    const prompt = await countPromptTokensAsync(spend.unansweredPrompt, this.offeredTools(call), { limit: call.model.contextLength });
    spend.addModelCall(call.model, { prompt_tokens: Math.min(prompt, call.model.contextLength), completion_tokens: 0, total_tokens: prompt });
  }

  /** A request refused before any money was held: recorded, never charged. */
  private async recordRefused(
    context: ChatCallContext,
    request: ChatRequest | undefined,
    model: ModelDefinition | undefined,
    assistant: Assistant | null,
    startedAt: number,
    error: unknown,
  ): Promise<void> {
    const code = error instanceof ApiError ? error.code : 'internal_error';
    // The model the request would have used, as far as it got; an unknown model id is kept (cut) to show what was asked.
    const modelId = model?.id || request?.dto.model?.slice(0, 200) || assistant?.model || 'unknown';
    await this.usage
      .insert({
        ...this.usageBase(context, request, modelId, assistant, startedAt),
        ...NOTHING_USED,
        toolsUsed: [],
        status: 'error',
        errorCode: code,
      })
      .catch((recordError) => this.logger.error(`Could not record a refused request: ${String(recordError)}`));
  }

  private usageBase(context: ChatCallContext, request: ChatRequest | undefined, model: string, assistant: Assistant | null, startedAt: number) {
    return {
      workspaceId: context.principal.workspaceId,
      requestId: context.requestId,
      apiKeyId: context.principal.apiKeyId,
      assistantId: assistant?.id ?? null,
      model,
      latencyMs: Date.now() - startedAt,
      userId: request?.dto.user_id ?? null,
      subscriptionId: request?.dto.subscription_id ?? null,
      stream: request?.dto.stream === true,
    };
  }

  /** A request may run longer than a hold lives (a long stream): its expiry is pushed out meanwhile. */
  private keepAlive(hold: Hold): NodeJS.Timeout {
    const ttl = this.config.holdTtlMs;
    return setInterval(() => {
      this.wallet.keepHoldAlive(hold, ttl).catch((error) => this.logger.warn(`Could not extend hold ${hold.id}: ${String(error)}`));
    }, ttl / 3).unref();
  }

  private xService(spend: Spend): XService {
    return {
      cost_millicents: toMillicentsNumber(spend.totalMicros),
      iterations: spend.iterations,
      tools_used: [...spend.toolsUsed],
      generated_files: null,
    };
  }

  /**
   * The usage to bill for one model call: the provider's report, checked against the
   * model's limits and what we saw generated; our tokenizer's counts where it reported none.
   */
  private async usageOf(call: PreparedCall, messages: ChatMessage[], reported: CompletionUsage | undefined, generatedText: string): Promise<CompletionUsage> {
    // Counted beside other requests; the prompt only when the provider gave no usable count.
    const countedPrompt = isTokenCount(reported?.prompt_tokens)
      ? 0
      : await countPromptTokensAsync(messages, this.offeredTools(call), { limit: call.model.contextLength });
    const { usage, problems } = checkedUsage(reported, {
      countPrompt: () => countedPrompt,
      generatedTokens: await countTextTokensAsync(generatedText),
      maxPromptTokens: call.model.contextLength,
      maxCompletionTokens: call.maxTokens * call.request.choices,
    });
    if (problems.length > 0) {
      this.logger.warn(`${call.model.provider} reported unusable usage for ${call.model.id}: ${problems.join('; ')}. Billed the checked counts.`);
    }
    return usage;
  }

  /** Every tool the model is offered: the client's functions and the assistant's server tools. */
  private offeredTools(call: PreparedCall): FunctionTool[] {
    return [...call.clientTools, ...this.tools.definitions(call.serverTools)];
  }
}

/** A prompt that leaves no room for an answer. Counting stops past the window, so a count above it is only a lower bound. */
function contextExceeded(model: ModelDefinition, tokens: number): ApiError {
  return ApiError.badRequest(
    tokens > model.contextLength
      ? `The messages are longer than the context window of ${model.id} (${model.contextLength} tokens).`
      : `The messages (${tokens} tokens) leave no room for an answer in the context window of ${model.id} (${model.contextLength} tokens).`,
    'messages',
    'context_length_exceeded',
  );
}

function holdAmount(micros: MicroMillicents): number {
  return Math.max(1, ceilMillicents(micros));
}

/** The answer a stream gave the client, to store in its conversation. */
function replyOf(iteration: StreamedIteration): ChatMessage {
  const toolCalls = iteration.clientCalls.map((call) => ({ id: call.id, type: 'function' as const, function: { name: call.name, arguments: call.arguments } }));
  return { role: 'assistant', content: iteration.content || null, ...(toolCalls.length ? { tool_calls: toolCalls } : {}) };
}

/** The assistant message of an iteration that called server tools, as the next call's history. */
function assistantTurn(content: string | null, calls: ServerToolCall[]): ChatMessage {
  return {
    role: 'assistant',
    content,
    tool_calls: calls.map((call) => ({ id: call.id, type: 'function', function: { name: call.name, arguments: call.arguments } })),
  };
}

/** The caller only sees its own tool calls; server tool calls never leave the service. */
function withoutServerCalls(choice: ChatCompletion['choices'][number], isServer: (name: string) => boolean): ChatCompletion['choices'][number] {
  const calls = choice.message?.tool_calls;
  if (!calls?.length) return choice;
  const kept = calls.filter((call) => call.type !== 'function' || !isServer(call.function.name));
  if (kept.length === calls.length) return choice;
  return {
    ...choice,
    message: { ...choice.message, content: choice.message.content ?? '', tool_calls: kept.length ? kept : undefined },
    finish_reason: kept.length ? 'tool_calls' : 'stop',
  };
}

/** The answer when the wallet cannot cover another iteration: what the model said so far, cut short. */
const OUT_OF_FUNDS_NOTE = 'I could not finish: the wallet balance does not cover another step.';

function outOfFunds(completion: ChatCompletion): ChatCompletion {
  const note = OUT_OF_FUNDS_NOTE;
  return {
    ...completion,
    choices: completion.choices.map((choice) => ({
      ...choice,
      message: { ...choice.message, content: choice.message?.content ? `${choice.message.content}\n\n${note}` : note, tool_calls: undefined },
      finish_reason: 'length',
    })),
  };
}

/** The stream's upstream stopped sending: the stream ends, and what it delivered is charged. */
function isStall(failure: unknown): failure is ApiError {
  return failure instanceof ApiError && failure.code === 'upstream_idle_timeout';
}

/** What a completion generated, as a stream's `generated` counts it: text and tool-call arguments. */
function textOf(completion: ChatCompletion): string {
  return completion.choices
    .map((choice) =>
      [choice.message?.content ?? '', ...(choice.message?.tool_calls ?? []).map((call) => (call.type === 'function' ? call.function.arguments : ''))].join(''),
    )
    .join('');
}

async function* prepend<T>(first: T, rest: AsyncIterator<T>): AsyncIterable<T> {
  yield first;
  for (let next = await rest.next(); !next.done; next = await rest.next()) yield next.value;
}
