import { Injectable, Logger } from '@nestjs/common';
import { catchError, defer, finalize, Observable, switchMap } from 'rxjs';
import { AssistantsService } from '../assistants/assistants.service';
import { ChatCaller, ChatService, ToolCallReport } from '../chat/chat.service';
import type { KeepAlive } from '../chat/completion-types';
import type { Cancellation } from '../common/cancellation';
import { ApiError } from '../common/errors/api-error';
import { ConversationStore } from '../conversations/conversation-store';
import { ConversationTurns } from '../conversations/conversation-turns';
import { ToolsService } from '../tools/tools.service';
import { ResponseEvent, responseEvents } from './response-events';
import { ResponseObject, responseOf, startResponse } from './response-object';
import { InputItem, newId, ResponsesRequest, toChatMessages, toResponsesRequest } from './chat-translation';
import { validateResponsesRequest } from './dto/create-response.dto';
import { ResponsesStore } from './responses-store';
import { ToolCallItem, toolCallItem } from './tool-call-items';

/** A Responses request ready for the chat core: its chat body, and the conversation it goes into. */
interface PreparedTurn {
  id: string;
  request: ResponsesRequest;
  input: InputItem[];
  chatBody: Record<string, unknown>;
  /** Null when the response is not stored. */
  conversationId: string | null;
  /** Whether the conversation is the Responses API's own (created for this response or the one it continues): see ResponsesStore.delete. */
  ownsConversation: boolean;
  /** Undoes what preparing did when the request fails: a conversation created for it is deleted. */
  abandon(): Promise<void>;
}

/** Items the input list names by id, each from an earlier stored response. */
const MAX_ITEM_REFERENCES = 256;

/**
 * `POST /v1/responses` and its stored responses. A request is translated into a chat
 * completion (validated by create-response.dto.ts, mapped by chat-translation.ts) and run by `ChatService`, the one money path: the same
 * hold, exact charge, usage record, tool loop and rate limits as `/v1/chat/completions`.
 * `store: true` (the default) puts the turn in a conversation (the chat core's
 * `conversation_id`) and keeps the response object; `previous_response_id` continues that
 * conversation.
 */
@Injectable()
export class ResponsesService {
  private readonly logger = new Logger('Responses');
  /** Errors this service answered with: their requests have their usage record (from here or the chat core). */
  private readonly recorded = new WeakSet<object>();

  constructor(
    private readonly chat: ChatService,
    private readonly conversations: ConversationStore,
    private readonly conversationTurns: ConversationTurns,
    private readonly assistants: AssistantsService,
    private readonly store: ResponsesStore,
    private readonly tools: ToolsService,
  ) {}

  async create(caller: ChatCaller, body: unknown, clientGone: Cancellation): Promise<ResponseObject> {
    const turn = await this.prepare(caller, body);
    const toolItems: ToolCallItem[] = [];
    let completion: Awaited<ReturnType<ChatService['complete']>>;
    try {
      completion = await this.chat.complete(
        withToolItems(caller, turn, (item) => toolItems.push(item)),
        turn.chatBody,
        clientGone,
      );
    } catch (error) {
      await turn.abandon();
      throw this.answered(error, turn.request.toolIndexes);
    }
    const response = responseOf(startResponse(turn.id, completion.model, turn.request.echo, turn.conversationId), completion, toolItems);
    await this.keep(caller, turn, response);
    return response;
  }

  /**
   * The Responses event stream of a request. A failure before its first event (validation,
   * 402, the upstream refusing) is the observable's error, answered as an ordinary HTTP error.
   */
  stream(caller: ChatCaller, body: unknown, toApiError: (error: unknown) => ApiError): Observable<ResponseEvent | KeepAlive> {
    return defer(() => this.prepare(caller, body)).pipe(
      switchMap((turn) => {
        let answered = false;
        let toToolItem: ((item: ToolCallItem) => void) | undefined;
        const chatCaller = withToolItems(caller, turn, (item) => toToolItem?.(item));
        return responseEvents(this.chat.stream(chatCaller, turn.chatBody), {
          start: (model) => startResponse(turn.id, model, turn.request.echo, turn.conversationId),
          onToolItem: (emit) => {
            toToolItem = emit;
          },
          finished: (response) => {
            answered = true;
            return this.keep(caller, turn, response);
          },
          toApiError: (error) => toApiError(inResponsesTerms(error, turn.request.toolIndexes)),
        }).pipe(
          catchError((error: unknown) => {
            throw this.answered(error, turn.request.toolIndexes);
          }),
          // Failed, or the client went away before the end: the chat core stored no turn, so a
          // conversation created for this response is deleted rather than left empty.
          finalize(() => {
            if (!answered) void turn.abandon();
          }),
        );
      }),
    );
  }

  /**
   * Stores a finished response (when it is to be stored). The request is charged and its turn
   * is in the conversation by now: a failure here is logged, and the client still gets its
   * answer rather than an error for a request it paid for.
   */
  private async keep(caller: ChatCaller, turn: PreparedTurn, response: ResponseObject): Promise<void> {
    if (!turn.conversationId) return;
    const conversation = { id: turn.conversationId, owned: turn.ownsConversation };
    await this.store.save(caller.principal.workspaceId, conversation, response, turn.input).catch((error: unknown) => {
      this.logger.error(`Could not store response ${response.id} [request ${caller.requestId}]: ${String(error)}`);
    });
  }

  async get(workspaceId: string, responseId: string): Promise<ResponseObject> {
    return (await this.store.get(workspaceId, responseId)).body;
  }

  async inputItems(workspaceId: string, responseId: string): Promise<InputItem[]> {
    return (await this.store.get(workspaceId, responseId)).inputItems;
  }

  async delete(workspaceId: string, responseId: string): Promise<{ id: string; object: 'response'; deleted: true }> {
    await this.store.delete(workspaceId, responseId);
    return { id: responseId, object: 'response', deleted: true };
  }

  /**
   * Validates the request, resolves its item references, checks the hosted tools it asks
   * for against the assistant, and finds or creates the conversation a stored response goes
   * into. Nothing is held or charged here: the chat core does that.
   */
  private async prepare(caller: ChatCaller, body: unknown): Promise<PreparedTurn> {
    const startedAt = Date.now();
    try {
      return await this.prepareTurn(caller, body);
    } catch (error) {
      // Refused before the chat core saw it: recorded here, as the chat core records its own refusals.
      await this.recordRefused(caller, body, Date.now() - startedAt, error);
      throw this.answered(error);
    }
  }

  /** Whether a request that failed with `error` has its usage record (it reached this service). */
  isRecorded(error: unknown): boolean {
    return typeof error === 'object' && error !== null && this.recorded.has(error);
  }

  /** The error to answer a request that reached this service with, in the Responses API's terms. */
  private answered(error: unknown, toolIndexes?: number[]): unknown {
    const answer = inResponsesTerms(error, toolIndexes);
    if (typeof answer === 'object' && answer !== null) this.recorded.add(answer);
    return answer;
  }

  /**
   * Every authenticated request gets a usage record: this writes the record of one refused
   * before it reached the chat core (by this service's validation, or by the rate limit).
   * Only what the body says of the request is kept, cut to size. Never throws.
   */
  recordRefused(caller: ChatCaller, body: unknown, latencyMs: number, error: unknown): Promise<void> {
    // The Responses API's `user` is the chat core's `user_id` (chat-translation.ts), unless user_id is given.
    const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    return this.chat.recordRefusedBeforeValidation(caller, { ...fields, user_id: fields.user_id ?? fields.user }, latencyMs, error);
  }

  private async prepareTurn(caller: ChatCaller, body: unknown): Promise<PreparedTurn> {
    const { workspaceId } = caller.principal;
    const request = toResponsesRequest(validateResponsesRequest(body), this.tools.hostedToolTypes());
    const input = await this.resolveReferences(workspaceId, request.input);
    const messages = toChatMessages(request.echo.instructions, input);
    await this.checkServerTools(workspaceId, request);

    let conversationId: string | null = null;
    let ownsConversation = false;
    let created = false;
    if (request.previousResponseId !== undefined) {
      const previous = await this.store.get(workspaceId, request.previousResponseId, 'previous_response_id');
      if (!previous.latest) {
        throw ApiError.badRequest(
          `Response '${request.previousResponseId}' has been continued already: continue its conversation from its newest response ` +
            '(branching a stored conversation is not supported).',
          'previous_response_id',
          'previous_response_not_latest',
        );
      }
      conversationId = previous.conversationId;
      ownsConversation = previous.ownsConversation;
    } else if (request.conversationId !== undefined) {
      conversationId = (await this.conversationTurns.findForChat(workspaceId, request.conversationId)).id;
    } else if (request.store) {
      const conversation = await this.conversations.create(workspaceId, {
        assistantId: request.assistantRef ?? null,
        userId: (request.chat.user_id as string | undefined) ?? null,
        metadata: request.echo.metadata,
        title: titleOf(input),
      });
      conversationId = conversation.id;
      ownsConversation = true;
      created = true;
    }
    return {
      id: newId('resp'),
      request,
      input,
      chatBody: { ...request.chat, messages, ...(conversationId ? { conversation_id: conversationId } : {}) },
      conversationId,
      ownsConversation,
      abandon: async () => {
        if (!created || !conversationId) return;
        const id = conversationId;
        created = false;
        await this.conversations.delete(workspaceId, id).catch((error: unknown) => {
          this.logger.warn(`Could not delete the conversation ${id} of a failed response: ${String(error)}`);
        });
      },
    };
  }

  private async resolveReferences(workspaceId: string, items: InputItem[]): Promise<InputItem[]> {
    const references = items.filter((item) => item.type === 'item_reference').length;
    if (references > MAX_ITEM_REFERENCES) {
      throw ApiError.badRequest(`input can reference at most ${MAX_ITEM_REFERENCES} items (got ${references}).`, 'input');
    }
    const resolved: InputItem[] = [];
    for (const [index, item] of items.entries()) {
      if (item.type !== 'item_reference') {
        resolved.push(item);
        continue;
      }
      const stored = await this.store.outputItem(workspaceId, item.id);
      if (!stored) throw ApiError.notFound(`Item with id '${item.id.slice(0, 200)}' not found.`, 'item_not_found', `input.${index}.id`);
      resolved.push(stored as InputItem);
    }
    return resolved;
  }

  /** Hosted tools (`web_search`, `file_search`) are served by the assistant's server tools of the same name, when it has them. */
  private async checkServerTools(workspaceId: string, request: ResponsesRequest): Promise<void> {
    if (request.serverTools.length === 0 || request.assistantRef === undefined) return;
    const assistant = await this.assistants.resolve(workspaceId, request.assistantRef, request.chat.assistant_id ? 'assistant_id' : 'model');
    for (const tool of request.serverTools) {
      if (!assistant.tools.some((own) => own.type === tool.name)) {
        throw ApiError.badRequest(
          `The assistant '${assistant.slug}' has no ${tool.name} tool: add it in the assistant's settings, or leave this tool out.`,
          tool.param,
          'tool_not_enabled',
        );
      }
    }
  }
}

/** The caller for the chat core: with the request's tool options, and told of each server tool call as an output item. */
function withToolItems(caller: ChatCaller, turn: PreparedTurn, onItem: (item: ToolCallItem) => void): ChatCaller {
  const { toolOptions, include } = turn.request;
  return {
    ...caller,
    toolOptions,
    onToolCall: (report: ToolCallReport) => {
      const item = toolCallItem(report, include);
      if (item) onItem(item);
    },
  };
}

/** The first user text of the input, as the new conversation's title (cut to 100 characters). */
function titleOf(items: InputItem[]): string | null {
  for (const item of items) {
    if (item.type !== 'message' || item.role !== 'user') continue;
    const text =
      typeof item.content === 'string'
        ? item.content
        : Array.isArray(item.content)
          ? (item.content as Array<{ type?: unknown; text?: unknown }>).find((part) => part?.type === 'input_text' && typeof part.text === 'string')?.text
          : undefined;
    if (typeof text === 'string' && text.trim().length > 0) return text.trim().slice(0, 100);
  }
  return null;
}

/** Chat-completions field names in an error, as the Responses request calls them. */
const PARAM_NAMES: Array<[RegExp, string]> = [
  [/^messages(\..*)?$/, 'input'],
  [/^(max_tokens|max_completion_tokens)$/, 'max_output_tokens'],
  [/^response_format(\..*)?$/, 'text.format'],
  [/^conversation_id$/, 'conversation'],
];

/**
 * An error of the chat core, renamed into the Responses API's fields (`messages` -> `input`,
 * `tools.<chat index>.function.name` -> `tools.<request index>.name`, ...). `toolIndexes`: the
 * request index of each chat tool, when the chat body was built.
 */
export function inResponsesTerms(error: unknown, toolIndexes: number[] = []): unknown {
  if (!(error instanceof ApiError) || error.param === null) return error;
  const tool = /^tools\.(\d+)(?:\.function)?(\..*)?$/.exec(error.param);
  const param = tool
    ? `tools.${toolIndexes[Number(tool[1])] ?? tool[1]}${tool[2] ?? ''}`
    : PARAM_NAMES.find(([pattern]) => pattern.test(error.param!))?.[1];
  if (param === undefined || param === error.param) return error;
  return new ApiError(error.type, error.message.replace(/\bmax_(completion_)?tokens\b/g, 'max_output_tokens'), {
    code: error.code,
    param,
    status: error.status,
    headers: error.headers,
    retryAfterSeconds: error.retryAfterSeconds,
  });
}
