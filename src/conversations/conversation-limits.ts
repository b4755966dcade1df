const MB = 1024 * 1024;

/**
 * What one conversation may store: the UTF-8 bytes of its messages' content plus the JSON of
 * their tool calls (`conversations.content_bytes`). Each turn replays the stored history
 * upstream, so all of it plus one request of the default 10 MB body limit must stay under
 * the 50 MB request payload OpenAI documents: text alone never gets near this (32 MB is
 * millions of tokens, beyond any context window); image data URLs do, at a few per turn.
 */
export const MAX_CONVERSATION_CONTENT_BYTES = 32 * MB;

/**
 * Messages in one conversation. Every chat turn sums the stored token counts of the
 * messages, newest first, to pick the history that fits: this keeps that work small.
 */
export const MAX_CONVERSATION_MESSAGES = 10_000;

/**
 * Message content (as counted for `content_bytes`) in one response of
 * `GET /v1/conversations/{id}`; the rest comes with `messages_after`. A single message
 * larger than this is still returned, alone.
 */
export const MESSAGES_PAGE_BYTES = 8 * MB;

/**
 * Search snippets are highlighted in this many characters of a message, starting a little
 * before the first occurrence of a query word (`HEADLINE_LEAD_CHARS`): `ts_headline` over a
 * whole 100,000-character message costs about 25 ms, once per result.
 */
export const HEADLINE_WINDOW_CHARS = 4_000;
export const HEADLINE_LEAD_CHARS = 200;

/**
 * Search ranks at most this many matches, the newest (a matching message, or a conversation
 * whose title matches, dated by its last activity): ranking every match of a common word
 * took 563 ms at 200,000 messages. Older matches are one `before` continuation away.
 */
export const SEARCH_CANDIDATE_LIMIT = 1_000;

/** "32 MB", "31.9 MB": sizes in messages and documentation. */
export function formatMegabytes(bytes: number): string {
  return `${Number((bytes / MB).toFixed(1))} MB`;
}
