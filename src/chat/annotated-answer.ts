import type { ChatCompletion, ChatMessage } from '../providers/provider-adapter';
import { ChatAnnotation, citationsIn, SourceList } from '../tools/citations';

/**
 * The citations of an answer, as OpenAI's `message.annotations`: when the request's server
 * tools returned sources, the answer's markers (`[1]`) that name one of them. An upstream's
 * own annotations are replaced then: they would point at nothing this request returned.
 */
export function withAnnotations(completion: ChatCompletion, sources: SourceList): ChatCompletion {
  if (sources.size === 0) return completion;
  return {
    ...completion,
    choices: completion.choices.map((choice) =>
      choice.index === 0 && choice.message ? { ...choice, message: annotatedMessage(choice.message, sources) } : choice,
    ),
  };
}

/** The message with the annotations of its text (none: `annotations: []`, as OpenAI sends). */
export function annotatedMessage<M extends { content?: unknown }>(message: M, sources: SourceList): M & { annotations: ChatAnnotation[] } {
  const annotations = typeof message.content === 'string' ? citationsIn(message.content, sources) : [];
  return { ...message, annotations };
}

/** A reply to store, with its annotations when the request had sources. */
export function annotatedReply(reply: ChatMessage | undefined, sources: SourceList): ChatMessage | undefined {
  return reply && sources.size > 0 && reply.role === 'assistant' ? (annotatedMessage(reply, sources) as ChatMessage) : reply;
}
