import { Injectable } from '@nestjs/common';
import { defer, Observable, switchMap } from 'rxjs';
import { AdmittedRequest, ChatCaller, ChatService } from '../chat/chat.service';
import type { Cancellation } from '../common/cancellation';
import type { ApiError } from '../common/errors/api-error';
import { assistantOfModel } from '../models/assistant-models';
import { ModelsService } from '../models/models.service';
import { ProvidersService } from '../providers/providers.service';
import { countPromptTokensAsync } from '../providers/tokens';
import { ChatTranslation, toChatRequest } from './chat-translation';
import { validateMessagesRequest } from './dto/create-message.dto';
import { MessageEvent, messageEvents } from './message-events';
import { MessageObject, messageOf, NativeMessageObject, nativeMessageOf, newMessageId } from './message-object';
import { AnthropicAnswer, nativeRequestOf } from './native-answer';

/** A request of the Messages API as the chat core runs it: its caller (source `messages`, max_tokens lowered) and its chat body. */
interface PreparedMessage {
  caller: ChatCaller;
  chat: ChatTranslation;
  admitted: Partial<AdmittedRequest>;
  /** What an Anthropic deployment answers to the request sent as it came (the caller carries the request). */
  native: AnthropicAnswer;
}

/**
 * `POST /v1/messages` and `count_tokens`: the Anthropic Messages API, translated onto the chat
 * core. A request is validated (dto/create-message.dto.ts), mapped to a chat completion
 * (chat-translation.ts) and run by `ChatService`, the one money path: the same hold, exact
 * charge, usage record (source `messages`), key limits, nerfing, routing and drain as
 * `/v1/chat/completions`; the answer is mapped back (message-object.ts, message-events.ts).
 *
 * The request also goes down as it came (`ChatCaller.native`): an Anthropic deployment sends
 * it to Anthropic unchanged, and its answer, as Anthropic gave it, is what the client gets
 * (native-answer.ts); any other deployment gets the translation. Either way the chat core
 * holds, bills and records the call once.
 */
@Injectable()
export class MessagesService {
  constructor(
    private readonly chat: ChatService,
    private readonly models: ModelsService,
    private readonly providers: ProvidersService,
  ) {}

  /** `beta`: the client's anthropic-beta values (an Anthropic deployment gets the flags it knows). */
  async create(caller: ChatCaller, body: unknown, clientGone: Cancellation, beta: readonly string[] = []): Promise<MessageObject | NativeMessageObject> {
    const prepared = await this.prepare(caller, body, beta);
    const completion = await this.chat.complete(prepared.caller, prepared.chat.body, clientGone);
    const native = prepared.native.messageOf(completion);
    const lowered = prepared.admitted.maxTokensLoweredTo;
    return native ? nativeMessageOf(newMessageId(), native, completion, lowered) : messageOf(newMessageId(), completion, lowered);
  }

  /** The event stream of a request; a failure before its first event is the observable's error (an ordinary HTTP error). */
  stream(caller: ChatCaller, body: unknown, toApiError: (error: unknown) => ApiError, beta: readonly string[] = []): Observable<MessageEvent> {
    return defer(() => this.prepare(caller, body, beta)).pipe(
      switchMap(({ caller: chatCaller, chat, admitted, native }) =>
        messageEvents(this.chat.stream(chatCaller, chat.body), {
          id: newMessageId(),
          model: chat.body.model as string,
          promptTokens: () => admitted.promptTokens ?? 0,
          maxTokensLoweredTo: () => admitted.maxTokensLoweredTo,
          toApiError,
          native,
        }),
      ),
    );
  }

  /**
   * `{input_tokens}` of a request: on a model whose first deployment is Anthropic's, Anthropic's
   * own count_tokens (with that deployment's key); elsewhere, or when that call fails, our
   * tokenizer on its translation (as the chat core counts a prompt for its hold). Free: nothing
   * is held or charged, no usage record.
   */
  async countTokens(body: unknown, beta: readonly string[] = []): Promise<{ input_tokens: number }> {
    const chat = toChatRequest(validateMessagesRequest(body, { countingTokens: true }));
    // An unknown model is refused as a request would be (404); an assistant is known by its slug only when it runs.
    if (assistantOfModel(chat.body.model as string) === undefined) {
      const counted = await this.providers.countNativeTokens(this.models.chatModel(chat.body.model as string), nativeRequestOf(body, beta));
      if (counted !== undefined) return { input_tokens: counted };
    }
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

  private async prepare(caller: ChatCaller, body: unknown, beta: readonly string[]): Promise<PreparedMessage> {
    const startedAt = Date.now();
    const admitted: Partial<AdmittedRequest> = {};
    try {
      const chat = toChatRequest(validateMessagesRequest(body));
      const native = new AnthropicAnswer();
      return { caller: { ...messagesCaller(caller, admitted), native: nativeRequestOf(body, beta, native) }, chat, admitted, native };
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
