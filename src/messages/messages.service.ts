import { Injectable } from '@nestjs/common';
import { defer, Observable, switchMap } from 'rxjs';
import { AdmittedRequest, ChatCaller, ChatService } from '../chat/chat.service';
import type { Cancellation } from '../common/cancellation';
import type { ApiError } from '../common/errors/api-error';
import { assistantOfModel } from '../models/assistant-models';
import { ModelsService } from '../models/models.service';
import { countPromptTokensAsync } from '../providers/tokens';
import { ChatTranslation, toChatRequest } from './chat-translation';
import { validateMessagesRequest } from './dto/create-message.dto';
import { MessageEvent, messageEvents } from './message-events';
import { MessageObject, messageOf, newMessageId } from './message-object';

/** A request of the Messages API as the chat core runs it: its caller (source `messages`, max_tokens lowered) and its chat body. */
interface PreparedMessage {
  caller: ChatCaller;
  chat: ChatTranslation;
  admitted: Partial<AdmittedRequest>;
}

/**
 * `POST /v1/messages` and `count_tokens`: the Anthropic Messages API, translated onto the chat
 * core. A request is validated (dto/create-message.dto.ts), mapped to a chat completion
 * (chat-translation.ts) and run by `ChatService`, the one money path: the same hold, exact
 * charge, usage record (source `messages`), key limits, nerfing, routing and drain as
 * `/v1/chat/completions`; the answer is mapped back (message-object.ts, message-events.ts).
 */
@Injectable()
export class MessagesService {
  constructor(
    private readonly chat: ChatService,
    private readonly models: ModelsService,
  ) {}

  async create(caller: ChatCaller, body: unknown, clientGone: Cancellation): Promise<MessageObject> {
    const prepared = await this.prepare(caller, body);
    const completion = await this.chat.complete(prepared.caller, prepared.chat.body, clientGone);
    return messageOf(newMessageId(), completion, prepared.admitted.maxTokensLoweredTo);
  }

  /** The event stream of a request; a failure before its first event is the observable's error (an ordinary HTTP error). */
  stream(caller: ChatCaller, body: unknown, toApiError: (error: unknown) => ApiError): Observable<MessageEvent> {
    return defer(() => this.prepare(caller, body)).pipe(
      switchMap(({ caller: chatCaller, chat, admitted }) =>
        messageEvents(this.chat.stream(chatCaller, chat.body), {
          id: newMessageId(),
          model: chat.body.model as string,
          promptTokens: () => admitted.promptTokens ?? 0,
          maxTokensLoweredTo: () => admitted.maxTokensLoweredTo,
          toApiError,
        }),
      ),
    );
  }

  /**
   * `{input_tokens}` of a request, counted with our tokenizer on its translation (as the chat
   * core counts a prompt for its hold). Free: nothing is held or charged, no usage record.
   */
  async countTokens(body: unknown): Promise<{ input_tokens: number }> {
    const chat = toChatRequest(validateMessagesRequest(body, { countingTokens: true }));
    // An unknown model is refused as a request would be (404); an assistant is known by its slug only when it runs.
    if (assistantOfModel(chat.body.model as string) === undefined) this.models.get(chat.body.model as string);
    return { input_tokens: await countPromptTokensAsync(chat.messages, chat.tools) };
  }

  /** The record of a request the rate limit refused before it got here (see MessagesErrorFilter). Never throws. */
  recordRefused(caller: ChatCaller, body: unknown, error: unknown): Promise<void> {
    return this.chat.recordRefusedBeforeValidation(messagesCaller(caller, {}), refusedFields(body), 0, error);
  }

  /** Whether the request that failed with `error` has its usage record (the chat core or this service refused it). */
  isRecorded(error: unknown): boolean {
    return this.chat.isRecorded(error);
  }

  private async prepare(caller: ChatCaller, body: unknown): Promise<PreparedMessage> {
    const startedAt = Date.now();
    const admitted: Partial<AdmittedRequest> = {};
    try {
      return { caller: messagesCaller(caller, admitted), chat: toChatRequest(validateMessagesRequest(body)), admitted };
    } catch (error) {
      // Refused before the chat core saw it: recorded here, as the chat core records its own refusals.
      await this.chat.recordRefusedBeforeValidation(messagesCaller(caller, admitted), refusedFields(body), Date.now() - startedAt, error);
      throw error;
    }
  }
}

/** The caller as the chat core sees a Messages request: its own usage source, and max_tokens lowered rather than refused. */
function messagesCaller(caller: ChatCaller, admitted: Partial<AdmittedRequest>): ChatCaller {
  return { ...caller, source: 'messages', lowersMaxTokens: true, onAdmitted: (facts) => Object.assign(admitted, facts) };
}

/** What the usage record of a refused request keeps of its unvalidated body: model, metadata.user_id, stream. */
function refusedFields(body: unknown): Record<string, unknown> {
  const fields = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
  const metadata = fields.metadata as { user_id?: unknown } | null | undefined;
  return { model: fields.model, user_id: metadata?.user_id, stream: fields.stream };
}
