import type { Message, RawMessageStreamEvent } from '@anthropic-ai/sdk/resources/messages';
import type { NativeAnswer, NativeRequest } from '../providers/provider-adapter';

/**
 * What an Anthropic deployment answered to a Messages request sent as it came (the chat core
 * carries the request down as `ChatCaller.native`; the Anthropic adapter tells this object the
 * answer). The chat core still gets the chat completion made of the same answer, and bills it;
 * the client gets Anthropic's own blocks and events from here (thinking and signatures,
 * citations, cache usage), which a chat completion cannot carry.
 *
 * An answer is the client's only if the chat core's completion (or first chunk) was made of it:
 * their ids match. An attempt that failed over to another provider leaves nothing that matches,
 * and the chat answer is translated as before.
 */
export class AnthropicAnswer implements NativeAnswer {
  private plain?: Message;
  private startedId?: string;
  private queued: RawMessageStreamEvent[] = [];
  private forward?: (event: RawMessageStreamEvent) => void;

  message(message: Message): void {
    this.plain = message;
  }

  event(event: RawMessageStreamEvent): void {
    if (event.type === 'message_start' && !this.forward) {
      // A new attempt: what an earlier one sent is not the answer.
      this.startedId = event.message.id;
      this.queued = [];
    }
    if (this.forward) this.forward(event);
    else this.queued.push(event);
  }

  /** Anthropic's message, when it is the one `completion` was made of. */
  messageOf(completion: { id: string }): Message | undefined {
    return this.plain !== undefined && this.plain.id === completion.id ? this.plain : undefined;
  }

  /**
   * At the chat stream's first chunk: when it was made of Anthropic's stream, replays the events
   * so far to `forward`, sends it every later one as it comes (thinking deltas make no chunk, so
   * they cannot wait for one), and returns true; false when another provider answered.
   */
  follow(firstChunkId: string, forward: (event: RawMessageStreamEvent) => void): boolean {
    if (this.startedId === undefined || this.startedId !== firstChunkId) return false;
    const queued = this.queued;
    this.queued = [];
    this.forward = forward;
    for (const event of queued) forward(event);
    return true;
  }
}

/** The native request of a validated Messages body: the body as sent, the client's anthropic-beta values, and where the answer goes. */
export function nativeRequestOf(body: unknown, beta: readonly string[], answer?: AnthropicAnswer): NativeRequest {
  return { anthropic: { body: body as Record<string, unknown>, beta: [...beta] }, ...(answer ? { answer } : {}) };
}
