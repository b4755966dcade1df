import { Injectable } from '@nestjs/common';
import { Observable } from 'rxjs';
import { AssistantsService } from '../assistants/assistants.service';
import { ASSISTANT_MODEL_PREFIX, assistantOfModel } from '../models/assistant-models';
import type { Assistant, AssistantTool } from '../assistants/entities/assistant.entity';
import type { Cancellation } from '../common/cancellation';
import { ApiError } from '../common/errors/api-error';
import type { ApiRequest, Principal } from '../common/http/request-context';
import { ServerDrain, serverShuttingDown } from '../common/http/server-drain';
import { ConversationTurns } from '../conversations/conversation-turns';
import { NerfingService } from '../limits/nerfing/nerfing.service';
import type { ModelDefinition } from '../models/model-catalog';
import { ModelsService } from '../models/models.service';
import { assertKeyMayRun } from '../workspaces/key-limits';
import type { KeyBudget } from '../billing/key-budgets';
import type { ChatMessage, FunctionTool, ModelCall, NativeRequest } from '../providers/provider-adapter';
import { ProvidersService } from '../providers/providers.service';
import { countPromptTokensAsync } from '../providers/tokens';
import { isAbort } from '../providers/upstream-errors';
import { SourceList } from '../tools/citations';
import type { ToolHost, ToolSettings } from '../tools/server-tool';
import { ServerToolCall, ToolOutcome, ToolsService } from '../tools/tools.service';
import { Billing } from '../billing/billing';
import { BillingSession, holdEstimateMillicents, MIN_USEFUL_OUTPUT_TOKENS, type SpendingReservation } from '../billing/billing-session';
import type { UsageSubject } from '../billing/usage-record';
import type { NerfingApplication, UsageSource } from '../usage/entities/usage-record.entity';
import { ChatRequest, parseChatRequest } from './chat-request';
import { type ChatCompletionResponse, type ChatStreamEvent, withOurFields } from './completion-types';
import { streamedCompletion } from './streamed-completion';
import { answerOf, completionTurn, runToolLoop } from './tool-loop';
import { withAnnotations } from './annotated-answer';

/** Who calls, and the request's id (its usage record and hold are keyed by it). */
export interface ChatCaller {
  /** The workspace that pays; its API key, or null for the dashboard's playground (a signed-in person, no key). */
  principal: Omit<Principal, 'apiKeyId'> & { apiKeyId: string | null };
  requestId: string;
  /** Where the request came from, kept on its usage record; `api` unless said. */
  source?: UsageSource;
  /** Sent with an Idempotency-Key: answered only once its settlement has committed (see Estimate.idempotent). */
  idempotent?: boolean;
  /** Bounds beyond the API's own, for callers that speak for someone else (the widget's visitors). */
  bounds?: CallerBounds;
  /** A max_tokens above the model's output limit is lowered to it instead of refused (the Messages API: Claude Code asks for 32000). */
  lowersMaxTokens?: boolean;
  /** Told once the request is admitted (its money held): what its prompt counts, and the cap it was lowered to, if it was. */
  onAdmitted?(admitted: AdmittedRequest): void;
  /** The request in a provider's own format (the Messages API's body), sent as it came to a deployment of that provider. */
  native?: NativeRequest;
  /** Options of the assistant's server tools for this request only (a Responses request's `file_search` options), by tool type. */
  toolOptions?: readonly ToolSettings[];
  /** Told of each server tool call once it ran, with the results it numbered (the Responses API's output items). */
  onToolCall?(report: ToolCallReport): void;
}

/** A server tool call of the loop, once it ran (or could not). */
export interface ToolCallReport {
  call: ServerToolCall;
  outcome: ToolOutcome;
}

/** What ChatCaller.onAdmitted tells: for APIs that announce it before the answer (the Messages API's message_start). */
export interface AdmittedRequest {
  promptTokens: number;
  /** Set when the request's max_tokens was above the model's output limit and lowered to it (ChatCaller.lowersMaxTokens). */
  maxTokensLoweredTo?: number;
}

/** The caller's key's spending limit, when it has one. */
export function keyBudgetOf(principal: ChatCaller['principal']): KeyBudget | undefined {
  const limits = principal.keyLimits;
  if (!principal.apiKeyId || limits?.spendLimitMillicents === null || limits?.spendLimitMillicents === undefined) return undefined;
  return { apiKeyId: principal.apiKeyId, limitMillicents: limits.spendLimitMillicents, period: limits.spendLimitPeriod };
}

/** What a caller may bound of its requests: the widget's settings. */
export interface CallerBounds {
  /** The stored history sent upstream: at most this many of the newest messages, and this many tokens. */
  historyMessages: number;
  historyTokens: number;
  /** Lowers the answer's output cap (never refuses a request for it). */
  maxOutputTokens: number;
  /** Admits the request's first model call before anything is held or sent upstream; a tool loop's further iterations raise it. */
  spending?: SpendingGate;
}

/** A budget outside the wallet (a widget's daily cap) that each request must fit in. */
export interface SpendingGate {
  /**
   * Reserves the first call's most expensive outcome or throws the refusal; the billing session
   * raises the reservation before each further iteration and settles it once, at the exact charge.
   */
  admit(firstCallMillicents: number): Promise<SpendingReservation>;
}

/** The caller of a request to the API (chat completions, responses): its key, its request id, and whether it carries an Idempotency-Key. */
export function apiCaller(principal: Principal, req: ApiRequest): ChatCaller {
  return { principal, requestId: req.id, idempotent: req.headers['idempotency-key'] !== undefined };
}

/** A request that passed validation and has money held for it. */
interface PreparedCall {
  request: ChatRequest;
  model: ModelDefinition;
  /** The answer's `model` when `model` answers: the alias the request named it by, or its id. */
  modelName: string;
  /** Tried in order when no deployment of `model` can answer: the request's `models`, or the catalog's fallbacks. */
  fallbacks: ModelDefinition[];
  /** Prompt and output cap: what a call may take from a deployment's token budget. */
  budgetTokens: number;
  /** Null in direct mode. */
  assistant: Assistant | null;
  /** The assistant as its tools see it: its tool settings with the request's options applied. */
  toolHost: ToolHost | null;
  /** The sources the request's tools returned, numbered for the answer's citations. */
  sources: SourceList;
  onToolCall?: ChatCaller['onToolCall'];
  billing: BillingSession;
  /** The conversation sent upstream: the assistant's system prompt, the stored history, then the request's messages. */
  messages: ChatMessage[];
  serverTools: AssistantTool[];
  /** Every tool the model is offered: the client's functions and the assistant's server tools. */
  tools: FunctionTool[];
  temperature?: number;
  /** 1 without server tools; the assistant's limit with them. */
  maxIterations: number;
  /** Aborted when the client goes away, or at the stop's drain deadline: the upstream call and the tools stop with it. */
  run: Cancellation;
  /** The caller's native request, in direct mode only: an assistant's prompt and tools exist only in the chat translation. */
  native?: NativeRequest;
}

/**
 * `POST /v1/chat/completions`: prepares each request (validation, assistant or model, the
 * conversation's history) and opens its billing session, then runs the tool loop, plain or
 * streamed. How a request flows: `prepare` -> `BillingSession` (the hold) -> `runToolLoop`
 * -> settlement (plain) or `streamedCompletion` -> SSE (streamed). Every path out (success,
 * upstream failure, client disconnect) ends in exactly one settlement.
 */
@Injectable()
export class ChatService {
  constructor(
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
    private readonly billing: Billing,
    private readonly assistants: AssistantsService,
    private readonly tools: ToolsService,
    private readonly conversations: ConversationTurns,
    private readonly nerfing: NerfingService,
    private readonly drain: ServerDrain,
  ) {}

  /** A plain completion; `clientGone` aborts when the client goes away. */
  async complete(caller: ChatCaller, body: unknown, clientGone: Cancellation): Promise<ChatCompletionResponse> {
    const link = this.drain.untilDeadline(clientGone);
    try {
      return await this.completePrepared(await this.prepare(caller, body, clientGone, link.run));
    } finally {
      link.release();
    }
  }

  private async completePrepared(call: PreparedCall): Promise<ChatCompletionResponse> {
    const isServerTool = (name: string) => this.tools.isServerTool(name, call.serverTools);
    try {
      // Its own property before the spread: see usageRecord (billing/usage-record.ts).
      const end = await runToolLoop({
        callModel: async (messages, last, outputCap) =>
          completionTurn(await this.providers.complete(this.providerRequest(call, messages, last, outputCap), call.run), isServerTool),
        ...this.loopOf(call),
      });
      const completion = withAnnotations(answerOf(end, isServerTool), call.sources);
      await call.billing.settle(completion.choices[0]?.message as ChatMessage | undefined);
      const { spend } = call.billing;
      return withOurFields(completion, { model: answeredModelName(call), usage: spend.usage(), x_service: spend.xService() });
    } catch (error) {
      // Stopped by the drain deadline rather than by the client: answered 503, not charged.
      const cutByStop = isAbort(error) && call.run.aborted && this.drain.streamsCut.aborted;
      throw await call.billing.fail(cutByStop ? serverShuttingDown() : error);
    }
  }

  /**
   * A streamed completion: a cold observable that prepares and runs the request when
   * subscribed, and stops it (upstream call, tools) when unsubscribed. A failure before its
   * first chunk (validation, 402, the upstream refusing) is its error before any event, and
   * so still an ordinary HTTP error.
   */
  stream(caller: ChatCaller, body: unknown): Observable<ChatStreamEvent> {
    return streamedCompletion(async (ended) => {
      // The stream's cancellation aborts when it ends, however it ends (the client leaving
      // included): the link to the deadline goes with it.
      const link = this.drain.untilDeadline(ended);
      ended.onAbort(link.release);
      const call = await this.prepare(caller, body, ended, link.run);
      return {
        modelId: () => answeredModelName(call),
        includeUsage: call.request.dto.stream_options?.include_usage === true,
        isServerTool: (name) => this.tools.isServerTool(name, call.serverTools),
        sources: call.sources,
        openStream: (messages, last, outputCap) => this.providers.openStream(this.providerRequest(call, messages, last, outputCap), call.run),
        ...this.loopOf(call),
      };
      // Past the stop's drain deadline the stream ends with server_shutting_down.
    }, this.drain.streamsCut);
  }

  /**
   * Validates the request, resolves its assistant (assistant mode) or model (direct mode),
   * reads the conversation's history that fits, and opens its billing session, which holds
   * the estimate. A request refused on the way gets its usage record, and is never charged.
   * `clientGone` aborts when the client leaves (what it used is then charged); `run`, which
   * the upstream calls and tools get, also at the stop's drain deadline.
   */
  private async prepare(caller: ChatCaller, body: unknown, clientGone: Cancellation, run: Cancellation): Promise<PreparedCall> {
    const startedAt = Date.now();
    let request: ChatRequest | undefined;
    let model: ModelDefinition | undefined;
    let assistant: Assistant | null = null;
    let nerfed: NerfingApplication[] = [];
    try {
      const fields = body as { assistant_id?: unknown; model?: unknown } | null;
      const assistantMode = (fields?.assistant_id !== undefined && fields?.assistant_id !== null) || assistantOfModel(typeof fields?.model === 'string' ? fields.model : undefined) !== undefined;
      request = await parseChatRequest(body, { assistantMode });
      const { workspaceId } = caller.principal;
      const conversation =
        request.dto.conversation_id === undefined ? null : await this.conversations.findForChat(workspaceId, request.dto.conversation_id);
      // Refused before anything is held or sent: a conversation that would grow past its limits.
      if (conversation) this.conversations.assertRoomFor(conversation, request.messages);
      const assistantAsModel = assistantOfModel(request.dto.model);
      if (request.dto.models !== undefined && (assistantAsModel !== undefined || request.dto.assistant_id !== undefined)) {
        throw ApiError.badRequest('models is for direct mode: an assistant runs on its own model.', 'models');
      }
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
      const modelId = assistantAsModel !== undefined ? assistant!.model : (request.dto.model ?? request.dto.models?.[0] ?? assistant?.model);
      if (!modelId) throw ApiError.badRequest('You must provide a model parameter (or an assistant_id).', 'model');
      model = this.models.chatModel(modelId);
      const { keyLimits } = caller.principal;
      // Every model the request names may run: `model` first, then each of `models`.
      // By their ids: an alias is checked as the model it names (a key lists ids).
      const named = (request.dto.models ?? []).map((id) => this.models.resolve(id)?.id ?? id);
      if (keyLimits) assertKeyMayRun(keyLimits, { models: [model.id, ...named], assistant });
      let fallbacks = this.fallbacksOf(model, request.dto.models);
      // The catalog's fallbacks that the key may not run are left out, never refused.
      if (keyLimits?.allowedModels) fallbacks = fallbacks.filter((fallback) => keyLimits.allowedModels!.includes(fallback.id));

      const serverTools = assistant?.tools ?? [];
      if (serverTools.length > 0 && request.choices > 1) {
        throw ApiError.badRequest('n must be 1 with an assistant that has server tools.', 'n');
      }
      const systemPrompt: ChatMessage[] = assistant?.systemPrompt ? [{ role: 'system', content: assistant.systemPrompt }] : [];
      let requestedCap = Math.min(request.maxTokens ?? assistant?.maxTokens ?? model.maxOutputTokens, caller.bounds?.maxOutputTokens ?? Infinity);
      let maxTokensLoweredTo: number | undefined;
      if (requestedCap > model.maxOutputTokens && caller.lowersMaxTokens) {
        maxTokensLoweredTo = requestedCap = model.maxOutputTokens;
      } else if (requestedCap > model.maxOutputTokens) {
        const param = request.maxTokensField ?? 'max_tokens';
        throw ApiError.badRequest(
          `${param} is too large: ${model.id} can produce at most ${model.maxOutputTokens} output tokens.`,
          request.maxTokensField,
        );
      }
      // The workspace's nerfing rules, counted per user_id: a block refuses the request here; a cap or a downgrade changes what runs.
      const nerfing = await this.nerfing.apply({ workspaceId, userId: request.dto.user_id ?? null, source: caller.source ?? 'api' }, model, requestedCap);
      nerfed = nerfing.applications;
      if (nerfing.refusal) throw nerfing.refusal;
      // A downgrade to a model the key may not run is refused, never skipped: neither control is overridden by the other.
      if (keyLimits && nerfing.model !== model) assertKeyMayRun(keyLimits, { models: [nerfing.model.id], assistant: null, downgradedFrom: model.id });
      model = nerfing.model;
      let outputCap = Math.min(nerfing.maxTokens, model.maxOutputTokens);
      // What the provider cannot honour, or would bill beyond the catalog's prices, is refused before any money is held.
      this.providers.adapterFor(model).checkRequest?.(request.extra, request.messages);
      const tools = [...request.tools, ...this.tools.definitions(serverTools)];
      const minimumOutput = Math.min(outputCap, MIN_USEFUL_OUTPUT_TOKENS);
      // Counted beside other requests, and only up to the context window: megabytes of text are refused, not counted to the end.
      const ownTokens = await countPromptTokensAsync([...systemPrompt, ...request.messages], tools, { limit: model.contextLength });
      const primary = model;
      if (ownTokens + minimumOutput > model.contextLength) throw contextExceeded(model, ownTokens);
      // Only the newest stored messages that fit beside the request are read.
      const history = conversation ? await this.historyOf(caller, workspaceId, conversation.id, model.contextLength - outputCap - ownTokens) : [];
      const messages = [...systemPrompt, ...history, ...request.messages];
      const promptTokens = history.length > 0 ? await countPromptTokensAsync(messages, tools, { limit: model.contextLength }) : ownTokens;
      if (promptTokens + minimumOutput > model.contextLength) throw contextExceeded(model, promptTokens);
      // What the service added (an assistant's system prompt, stored history) must not make the call
      // fail upstream: the cap is lowered to what the context leaves, as for a tool loop's later
      // calls. A client's own messages in direct mode keep the provider's refusal, as with OpenAI.
      if (assistant || history.length > 0) outputCap = Math.min(outputCap, model.contextLength - promptTokens);
      const maxIterations = serverTools.length > 0 ? assistant!.maxToolIterations : 1;
      // A fallback whose context cannot hold the prompt would be refused upstream (400, which never fails over): it is left out.
      fallbacks = fallbacks.filter((f) => f !== primary && promptTokens + minimumOutput <= f.contextLength);
      // The hold covers the most expensive deployment or fallback that may answer; the one that answers is charged.
      const priced = this.providers.priceCeiling(model, fallbacks);
      // The first call's most expensive outcome; each further iteration of a tool loop raises it, as it raises the holds.
      const admission = await caller.bounds?.spending?.admit(holdEstimateMillicents(priced, promptTokens, outputCap, request.choices));
      const billing = await this.openBilling(admission, {
        subject: this.subjectOf(caller, request, model.id, assistant, nerfed),
        startedAt,
        clientGone,
        model: priced,
        promptTokens,
        outputCap,
        choices: request.choices,
        tools,
        toolPriceMicros: this.tools.maxPriceMicros(serverTools),
        conversation: conversation ? { id: conversation.id, messages: request.messages } : null,
        idempotent: caller.idempotent === true,
        keyBudget: keyBudgetOf(caller.principal),
        onCharged: nerfing.settled,
        spending: admission,
      });
      caller.onAdmitted?.({ promptTokens, maxTokensLoweredTo });
      return {
        request,
        model,
        modelName: this.models.resolve(modelId) === model ? modelId : model.id,
        fallbacks,
        budgetTokens: promptTokens + outputCap * request.choices,
        assistant,
        toolHost: assistant ? { id: assistant.id, tools: withOptions(assistant.tools, caller.toolOptions) } : null,
        sources: new SourceList(),
        onToolCall: caller.onToolCall,
        billing,
        messages,
        serverTools,
        tools,
        temperature: request.dto.temperature ?? assistant?.temperature ?? undefined,
        maxIterations,
        run,
        native: assistant ? undefined : caller.native,
      };
    } catch (error) {
      // The model the request would have used, as far as it got; an unknown model id is kept (cut) to show what was asked.
      const modelId = model?.id || request?.dto.model?.slice(0, 200) || assistant?.model || 'unknown';
      await this.billing.recordRefused(this.subjectOf(caller, request, modelId, assistant, nerfed), Date.now() - startedAt, error);
      throw error;
    }
  }

  /** The wallet's hold; a refusal (402) gives the caller's admission back. */
  private async openBilling(admission: SpendingReservation | undefined, estimate: Parameters<Billing['open']>[0]): Promise<BillingSession> {
    try {
      return await this.billing.open(estimate);
    } catch (error) {
      admission?.settled(0n);
      throw error;
    }
  }

  /** The newest stored messages that fit in `budgetTokens`, and in the caller's bounds; never starting with a tool result. */
  private async historyOf(caller: ChatCaller, workspaceId: string, conversationId: string, budgetTokens: number): Promise<ChatMessage[]> {
    const { bounds } = caller;
    if (!bounds) return this.conversations.historyWithin(workspaceId, conversationId, budgetTokens);
    if (bounds.historyMessages <= 0) return [];
    const history = (await this.conversations.historyWithin(workspaceId, conversationId, Math.min(budgetTokens, bounds.historyTokens))).slice(-bounds.historyMessages);
    while (history.length > 0 && history[0].role === 'tool') history.shift();
    return history;
  }

  /**
   * The usage record of a request refused before this service could validate it: by a guard
   * (the rate limit), or by an API translated onto this one (the Responses API's own checks).
   * Only what the unvalidated body says of the request is kept, cut to size. Never throws.
   */
  recordRefusedBeforeValidation(caller: ChatCaller, body: unknown, latencyMs: number, error: unknown): Promise<void> {
    const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const text = (value: unknown, max: number) => (typeof value === 'string' ? value.slice(0, max) : null);
    const subject: UsageSubject = {
      workspaceId: caller.principal.workspaceId,
      requestId: caller.requestId,
      apiKeyId: caller.principal.apiKeyId,
      apiKeyName: caller.principal.apiKeyName ?? null,
      assistantId: null,
      model: text(fields.model, 200) || 'unknown',
      userId: text(fields.user_id, 256),
      subscriptionId: text(fields.subscription_id, 256),
      stream: fields.stream === true,
      source: caller.source ?? 'api',
    };
    return this.billing.recordRefused(subject, latencyMs, error);
  }

  /** Whether the request that failed with `error` has its usage record already (this service refused it). */
  isRecorded(error: unknown): boolean {
    return this.billing.isRecorded(error);
  }

  private subjectOf(
    caller: ChatCaller,
    request: ChatRequest | undefined,
    model: string,
    assistant: Assistant | null,
    nerfing: NerfingApplication[] = [],
  ): UsageSubject {
    return {
      workspaceId: caller.principal.workspaceId,
      requestId: caller.requestId,
      apiKeyId: caller.principal.apiKeyId,
      apiKeyName: caller.principal.apiKeyName ?? null,
      assistantId: assistant?.id ?? null,
      model,
      userId: request?.dto.user_id ?? null,
      subscriptionId: request?.dto.subscription_id ?? null,
      stream: request?.dto.stream === true,
      source: caller.source ?? 'api',
      nerfing,
    };
  }

  /** What the plain and the streamed loop share: the prompt, the limit, the billing and the server tools. */
  private loopOf(call: PreparedCall) {
    return {
      messages: call.messages,
      maxIterations: call.maxIterations,
      billing: call.billing,
      runTool: async (toolCall: ServerToolCall) => {
        const outcome = await this.tools.run(toolCall, call.toolHost!, call.run.signal, call.sources);
        call.onToolCall?.({ call: toolCall, outcome });
        return outcome;
      },
    };
  }

  /**
   * The provider request of one iteration. Server tools are offered as functions; on the
   * last allowed iteration the model is told not to call tools, so that it answers. A later
   * iteration may have a lower output cap (what its prompt leaves of the context).
   */
  private providerRequest(call: PreparedCall, messages: ChatMessage[], last: boolean, outputCap?: number): ModelCall {
    const { request } = call;
    return {
      model: call.model,
      messages,
      tools: call.tools.length > 0 ? call.tools : undefined,
      temperature: call.temperature,
      maxTokens: outputCap ?? call.billing.maxTokens,
      maxTokensField: request.maxTokensField,
      extra: call.serverTools.length > 0 && last ? { ...request.extra, tool_choice: 'none' } : request.extra,
      fallbacks: call.fallbacks,
      budgetTokens: call.budgetTokens,
      route: call.billing.route,
      native: call.native,
    };
  }

  /**
   * The models tried after `model`: the request's `models` (OpenRouter's fallback list; ids
   * the catalog lacks are refused like `model`), or else the catalog's fallbacks of the model.
   */
  private fallbacksOf(model: ModelDefinition, requested: string[] | undefined): ModelDefinition[] {
    if (requested === undefined) return (model.fallbacks ?? []).map((id) => this.models.get(id));
    const named = [...new Set(requested)].map((id) => this.models.chatModel(id, 'models'));
    return [...new Set(named)].filter((fallback) => fallback !== model);
  }
}

/** An assistant's tool settings with a request's options for some of them laid over. */
function withOptions(tools: readonly ToolSettings[], options: readonly ToolSettings[] | undefined): ToolSettings[] {
  if (!options?.length) return [...tools];
  return tools.map((tool) => {
    const own = options.find((option) => option.type === tool.type);
    return own ? { ...tool, ...own } : tool;
  });
}

/** The answer's `model`: the name the request gave its model, unless another (a fallback) answered. */
function answeredModelName(call: PreparedCall): string {
  const answered = call.billing.spend.answeredBy?.model ?? call.model.id;
  return answered === call.model.id ? call.modelName : answered;
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
