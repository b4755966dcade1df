import { Observable } from 'rxjs';
import { ChatStreamEvent, isKeepAlive, KeepAlive, XService } from '../chat/completion-types';
import type { ApiError } from '../common/errors/api-error';
import type { ChatCompletionChunk, CompletionUsage } from '../providers/provider-adapter';
import { chatAnnotationsOf, ResponseAnnotation, responseAnnotationOf } from '../tools/citations';
import { FunctionCallItem, finishResponse, MessageItem, OutputItem, outputText, ResponseObject } from './response-object';
import { newId } from './chat-translation';
import type { ToolCallItem } from './tool-call-items';

/** One event of the Responses stream: `type`, `sequence_number` and the event's own fields. */
export type ResponseEvent = { type: string; sequence_number: number } & Record<string, unknown>;

export interface ResponseEventsOptions {
  /** The response `response.created` announces, once the first chat chunk names the model. */
  start(model: string): ResponseObject;
  /** Called with the finished response before `response.completed` goes out (stores it). */
  finished(response: ResponseObject): Promise<void>;
  /** An error after the stream started, as the API error its events carry. */
  toApiError(error: unknown): ApiError;
  /** Hands over the function that adds a server tool call's output item, as the tool ran. */
  onToolItem?(emit: (item: ToolCallItem) => void): void;
}

/**
 * Turns the chat core's stream (OpenAI chunks, keep-alives) into the Responses API's event
 * stream: `response.created` and `response.in_progress` with the first chunk, then the
 * output items as they come (`output_item.added`, `content_part.added`, `output_text.delta`
 * or `function_call_arguments.delta`, and their `.done` events), and `response.completed`
 * (`response.incomplete` when cut at max_output_tokens) with the usage and `x_service`.
 * A failure before the first chunk (validation, 402) stays the observable's error, answered
 * as an ordinary HTTP error; after it, it is `response.failed` then an `error` event.
 */
export function responseEvents(chat: Observable<ChatStreamEvent>, options: ResponseEventsOptions): Observable<ResponseEvent | KeepAlive> {
  return new Observable((subscriber) => {
    const events = new ResponseEventBuilder((event) => subscriber.next(event));
    options.onToolItem?.((item) => events.toolItem(item));
    const subscription = chat.subscribe({
      next: (event) => {
        if (isKeepAlive(event)) subscriber.next(event);
        else events.chunk(event, options);
      },
      error: (error: unknown) => {
        if (!events.started) return subscriber.error(error);
        events.failed(options.toApiError(error));
        subscriber.complete();
      },
      complete: () => {
        const response = events.finish();
        if (!response) return subscriber.complete();
        options.finished(response).then(
          () => {
            events.completed(response);
            subscriber.complete();
          },
          (error: unknown) => {
            events.failed(options.toApiError(error));
            subscriber.complete();
          },
        );
      },
    });
    return () => subscription.unsubscribe();
  });
}

/** A message of the response: its item, and where its text starts in the text of the whole chat stream. */
interface OpenMessage {
  item: MessageItem;
  index: number;
  text: string;
  offset: number;
  annotations: ResponseAnnotation[];
}

/** The state of one response's events: the snapshot so far, the open message, the calls by their chat index. */
class ResponseEventBuilder {
  private sequence = 0;
  private response?: ResponseObject;
  private message?: OpenMessage;
  /** Every message so far (the open one last), to place the answer's citations: the chat stream indexes its whole text. */
  private readonly messages: OpenMessage[] = [];
  private streamedText = 0;
  private readonly calls = new Map<number, { item: FunctionCallItem; index: number }>();
  private finishReason: string | null = null;
  private usage?: CompletionUsage;
  private xService?: XService;

  constructor(private readonly emit: (event: ResponseEvent) => void) {}

  get started(): boolean {
    return this.response !== undefined;
  }

  chunk(chunk: ChatCompletionChunk & { x_service?: XService }, options: ResponseEventsOptions): void {
    if (!this.response) {
      this.response = options.start(chunk.model);
      this.send('response.created', { response: { ...this.response } });
      this.send('response.in_progress', { response: { ...this.response } });
    }
    if (chunk.usage) this.usage = chunk.usage;
    if (chunk.x_service) this.xService = chunk.x_service;
    // The Responses API has one answer: only the first choice (n is not a Responses field).
    const choice = chunk.choices.find((candidate) => candidate.index === 0);
    if (!choice) return;
    const { content, refusal, tool_calls: toolCalls } = choice.delta;
    const text = content ?? refusal;
    if (text) this.text(text);
    for (const part of toolCalls ?? []) this.toolCall(part);
    const annotations = chatAnnotationsOf((choice.delta as { annotations?: unknown }).annotations);
    if (annotations.length > 0) this.annotate(annotations.map(responseAnnotationOf));
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
  }

  /** Closes the open items; the finished response, or undefined if the stream never started. */
  finish(): ResponseObject | undefined {
    if (!this.response) return undefined;
    this.closeMessage();
    for (const call of this.calls.values()) this.closeCall(call);
    this.calls.clear();
    this.response = finishResponse(this.response, this.finishReason, this.usage, this.xService);
    return this.response;
  }

  completed(response: ResponseObject): void {
    this.send(response.status === 'incomplete' ? 'response.incomplete' : 'response.completed', { response });
  }

  failed(error: ApiError): void {
    const response = this.response!;
    this.send('response.failed', {
      response: { ...response, status: 'failed', error: { code: error.code, message: error.message }, ...(this.xService ? { x_service: this.xService } : {}) },
    });
    this.send('error', { code: error.code, message: error.message, param: error.param });
  }

  /** A server tool's call, once it ran: its item, added and done at once (text before it is a message of its own). */
  toolItem(item: ToolCallItem): void {
    if (!this.response) return;
    this.closeMessage();
    const index = this.addItem(item);
    // OpenAI's phases of a hosted tool call (`response.file_search_call.searching`, ...), here after the fact.
    for (const phase of ['in_progress', 'searching', 'completed']) this.send(`response.${item.type}.${phase}`, { item_id: item.id, output_index: index });
    this.setItem(index, item);
  }

  /**
   * The answer's citations (indexed in the chat stream's whole text): each goes to the message
   * its marker is in, with its indices made that message's, and is announced.
   */
  private annotate(annotations: ResponseAnnotation[]): void {
    for (const annotation of annotations) {
      const at = annotation.type === 'file_citation' ? annotation.index : annotation.start_index;
      const message = this.messages.findLast((candidate) => candidate.offset <= at);
      if (!message) continue;
      const local: ResponseAnnotation =
        annotation.type === 'file_citation'
          ? { ...annotation, index: annotation.index - message.offset }
          : { ...annotation, start_index: annotation.start_index - message.offset, end_index: annotation.end_index - message.offset };
      message.annotations.push(local);
      this.send('response.output_text.annotation.added', {
        item_id: message.item.id,
        output_index: message.index,
        content_index: 0,
        annotation_index: message.annotations.length - 1,
        annotation: local,
      });
      if (message !== this.message) this.setContent(message);
    }
  }

  private text(delta: string): void {
    if (!this.message) {
      const item: MessageItem = { type: 'message', id: newId('msg'), status: 'in_progress', role: 'assistant', content: [] };
      this.message = { item, index: this.addItem(item), text: '', offset: this.streamedText, annotations: [] };
      this.messages.push(this.message);
      this.send('response.content_part.added', { item_id: item.id, output_index: this.message.index, content_index: 0, part: outputText('') });
    }
    this.streamedText += delta.length;
    this.message.text += delta;
    this.send('response.output_text.delta', { item_id: this.message.item.id, output_index: this.message.index, content_index: 0, delta, logprobs: [] });
  }

  private toolCall(part: NonNullable<ChatCompletionChunk['choices'][number]['delta']['tool_calls']>[number]): void {
    let call = this.calls.get(part.index);
    if (!call) {
      // Text before a call is a message of its own, finished before the call starts.
      this.closeMessage();
      const item: FunctionCallItem = {
        type: 'function_call',
        id: newId('fc'),
        call_id: part.id ?? newId('fc'),
        name: part.function?.name ?? '',
        arguments: '',
        status: 'in_progress',
      };
      call = { item, index: this.addItem(item) };
      this.calls.set(part.index, call);
    }
    const delta = part.function?.arguments;
    if (delta) {
      call.item.arguments += delta;
      this.send('response.function_call_arguments.delta', { item_id: call.item.id, output_index: call.index, delta });
    }
  }

  private addItem(item: OutputItem): number {
    const response = this.response!;
    const index = response.output.length;
    const added: OutputItem =
      item.type === 'message'
        ? { ...item, content: [] }
        : item.type === 'function_call'
          ? { ...item, arguments: '' }
          : item.type === 'file_search_call'
            ? { ...item, status: 'in_progress', results: null }
            : { ...item, status: 'in_progress' };
    response.output = [...response.output, added];
    this.send('response.output_item.added', { output_index: index, item: response.output[index] });
    return index;
  }

  private closeMessage(): void {
    const open = this.message;
    if (!open) return;
    this.message = undefined;
    const part = outputText(open.text, open.annotations);
    this.send('response.output_text.done', { item_id: open.item.id, output_index: open.index, content_index: 0, text: open.text, logprobs: [] });
    this.send('response.content_part.done', { item_id: open.item.id, output_index: open.index, content_index: 0, part });
    this.setItem(open.index, { ...open.item, status: 'completed', content: [part] });
  }

  private closeCall(call: { item: FunctionCallItem; index: number }): void {
    const { item, index } = call;
    this.send('response.function_call_arguments.done', { item_id: item.id, output_index: index, name: item.name, arguments: item.arguments });
    this.setItem(index, { ...item, status: 'completed' });
  }

  /** A closed message whose annotations changed: its snapshot in the response (its done event went out already). */
  private setContent(message: OpenMessage): void {
    const response = this.response!;
    const item: MessageItem = { ...message.item, status: 'completed', content: [outputText(message.text, message.annotations)] };
    response.output = response.output.map((existing, at) => (at === message.index ? item : existing));
  }

  private setItem(index: number, item: OutputItem): void {
    const response = this.response!;
    response.output = response.output.map((existing, at) => (at === index ? item : existing));
    this.send('response.output_item.done', { output_index: index, item });
  }

  private send(type: string, fields: Record<string, unknown>): void {
    this.emit({ type, sequence_number: this.sequence++, ...fields });
  }
}
