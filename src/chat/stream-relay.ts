import type { Subscriber } from 'rxjs';
import type { ChatCompletionChunk, CompletionUsage } from '../providers/provider-adapter';
import type { ChatAnnotation } from '../tools/citations';
import type { ServerToolCall } from '../tools/tools.service';
import { ChatCompletionChunkResponse, KEEP_ALIVE, KeepAlive, withOurFields, XService } from './completion-types';

type Choice = ChatCompletionChunk['choices'][number];
type FinishReason = Choice['finish_reason'];

/** What one streamed model call produced, as far as it got. */
export interface StreamedIteration {
  usage?: CompletionUsage;
  /** Text and tool-call arguments generated, for counting tokens when no usage came. */
  generated: string;
  content: string;
  serverCalls: ServerToolCall[];
  /** The caller's own function calls, forwarded as they came. */
  clientCalls: Array<{ id: string; name: string; arguments: string }>;
}

/**
 * Forwards upstream chunks to the client across the iterations of a tool loop, so that the
 * client sees one ordinary completion: the role once, text as it comes, its own function
 * calls, and one finish. Server tool calls stay on the server. The last finishing chunk is
 * held back until the request is settled, to carry `x_service`.
 */
export class StreamRelay {
  /** Whether text or the client's own tool calls were passed on to it: what a failure still charges. */
  delivered = false;
  /** The first choice's text as the client got it, across iterations (what annotations index). */
  text = '';
  private readonly rolesSent = new Set<number>();
  private heldFinish?: ChatCompletionChunkResponse;
  private template?: ChatCompletionChunk;

  constructor(
    private readonly subscriber: Subscriber<ChatCompletionChunkResponse | KeepAlive>,
    /** The model the client sees in every chunk: the one that answered (a fallback may have). */
    private readonly modelId: () => string,
    private readonly isServerTool: (name: string | undefined) => boolean,
  ) {}

  /**
   * Relays one model call's chunks into `sink` (which keeps what was produced even if the
   * stream breaks). Server tools only exist on the first choice: with several choices
   * (`n` > 1) there is no tool loop and every choice passes through.
   */
  async relay(chunks: AsyncIterable<ChatCompletionChunk>, sink: StreamedIteration): Promise<void> {
    // Tool calls by upstream index, for the first choice: the call being assembled, and whether the server runs it.
    const calls = new Map<number, { server: boolean; call: ServerToolCall }>();
    for await (const chunk of chunks) {
      this.template ??= chunk;
      if (chunk.usage) sink.usage = chunk.usage;
      const out: Choice[] = [];
      const finishing: Choice[] = [];
      for (const choice of chunk.choices) {
        const delta = { ...choice.delta };
        if (delta.role) {
          if (this.rolesSent.has(choice.index)) delete delta.role;
          this.rolesSent.add(choice.index);
        }
        if (delta.content) {
          if (choice.index === 0) sink.content += delta.content;
          sink.generated += delta.content;
        }
        if (delta.tool_calls) {
          const forwarded = [];
          for (const part of delta.tool_calls) {
            sink.generated += part.function?.arguments ?? '';
            if (choice.index !== 0) {
              forwarded.push(part);
              continue;
            }
            let entry = calls.get(part.index);
            if (!entry) {
              const server = this.isServerTool(part.function?.name);
              entry = { server, call: { id: part.id ?? '', name: part.function?.name as ServerToolCall['name'], arguments: '' } };
              calls.set(part.index, entry);
              if (server) sink.serverCalls.push(entry.call);
              else sink.clientCalls.push(entry.call);
            }
            entry.call.arguments += part.function?.arguments ?? '';
            if (!entry.server) forwarded.push(part);
          }
          if (forwarded.length > 0) delta.tool_calls = forwarded;
          else delete delta.tool_calls;
        }
        if (delta.role !== undefined || delta.content || delta.tool_calls || delta.refusal) {
          if (choice.index === 0 && delta.content) this.text += delta.content;
          out.push({ ...choice, delta, finish_reason: null });
          if (delta.content || delta.tool_calls || delta.refusal) this.delivered = true;
        }
        if (choice.finish_reason) finishing.push({ ...choice, delta: {}, finish_reason: choice.finish_reason });
      }
      if (out.length > 0) this.subscriber.next(this.chunkOf(chunk, out));
      if (finishing.length > 0) {
        if (this.heldFinish) this.subscriber.next(this.heldFinish);
        this.heldFinish = this.chunkOf(chunk, finishing);
      }
    }
  }

  /** The model called server tools and the loop goes on: its finish is not the answer's. */
  continueLoop(): void {
    this.heldFinish = undefined;
    this.subscriber.next(KEEP_ALIVE);
  }

  /** Adds text of the service's own to the answer (e.g. why it ends early), as a content delta. */
  say(text: string): void {
    if (!this.template) return;
    this.text += text;
    this.subscriber.next(this.chunkOf(this.template, [{ index: 0, delta: { content: text }, finish_reason: null, logprobs: null }]));
  }

  /** Sends the answer's citations in a delta of their own, before the finish (`delta.annotations`, as OpenAI streams them). */
  annotate(annotations: ChatAnnotation[]): void {
    if (!this.template || annotations.length === 0) return;
    const delta = { annotations } as Choice['delta'];
    this.subscriber.next(this.chunkOf(this.template, [{ index: 0, delta, finish_reason: null, logprobs: null }]));
  }

  keepAlive(): void {
    this.subscriber.next(KEEP_ALIVE);
  }

  /** Sends the final finish (and usage, if asked for) with `x_service` on the last chunk. */
  finish(xService: XService, usage: CompletionUsage | undefined, finishReason?: FinishReason): void {
    const base = this.template;
    if (!base) return;
    const final: ChatCompletionChunkResponse[] = [];
    const finish = this.heldFinish ?? this.chunkOf(base, [{ index: 0, delta: {}, finish_reason: 'stop', logprobs: null }]);
    if (finishReason) finish.choices = finish.choices.map((choice) => ({ ...choice, finish_reason: finishReason }));
    final.push(finish);
    if (usage) final.push(withOurFields(this.chunkOf(base, []), { usage }));
    final[final.length - 1] = withOurFields(final[final.length - 1], { x_service: xService });
    for (const chunk of final) this.subscriber.next(chunk);
  }

  private chunkOf(chunk: ChatCompletionChunk, choices: Choice[]): ChatCompletionChunkResponse {
    const { usage: _usage, ...rest } = chunk;
    return { ...rest, model: this.modelId(), choices };
  }
}
