import type { ContentPart } from '../providers/provider-adapter';
import {
  ConversationMessage,
  STORED_MESSAGE_ROLES,
  StoredContentType,
  StoredMessageRole,
  StoredToolCall,
} from './entities/conversation-message.entity';

// A conversation's messages as the chat path gives and takes them (OpenAI's chat format)
// and as they are stored: content as text or JSON, sizes as `content_bytes` counts them.

/** A message in OpenAI's chat format, ready to be sent to a model. */
export interface ChatHistoryMessage {
  role: StoredMessageRole;
  /** Null only for an assistant message that just called tools. */
  content: string | ContentPart[] | null;
  tool_calls?: StoredToolCall[];
  tool_call_id?: string;
}

/** A message a chat request is about to add to a conversation, in OpenAI's format: only its content and tool calls take room. */
export interface IncomingMessage {
  role?: unknown;
  content?: unknown;
  tool_calls?: unknown;
}

/** A message to store, in OpenAI's chat format plus its token count. */
export interface TurnMessage {
  /** `developer` is stored as `system`, its equivalent for every provider. */
  role: StoredMessageRole | 'developer';
  /** A string is stored as is; any other value but null (an array of parts) as its JSON. */
  content?: string | ContentPart[] | null;
  tool_calls?: StoredToolCall[] | null;
  tool_call_id?: string | null;
  tokens: number;
  /** A reply's citations (OpenAI's `message.annotations`), kept as given. */
  annotations?: unknown[] | null;
}

const DECIMAL = /^\d{1,14}(\.\d+)?$/;

export interface StoredMessageValues {
  role: StoredMessageRole;
  contentType: StoredContentType;
  content: string;
  toolCallsJson: string | null;
  toolCallId: string | null;
  tokens: number;
  /** The annotations' JSON; null without any. */
  annotationsJson: string | null;
  /** What it adds to the conversation's `content_bytes`. */
  bytes: number;
}

/** The row `appendTurn` inserts for a turn's message; malformed values are programming errors and throw. */
export function storedMessage(message: TurnMessage, index: number): StoredMessageValues {
  const role = message.role === 'developer' ? 'system' : message.role;
  if (!(STORED_MESSAGE_ROLES as readonly string[]).includes(role)) {
    throw new Error(`appendTurn: messages[${index}].role must be one of ${STORED_MESSAGE_ROLES.join(', ')}, developer (got ${role})`);
  }
  if (!Number.isSafeInteger(message.tokens) || message.tokens < 0) {
    throw new Error(`appendTurn: messages[${index}].tokens must be a whole number >= 0 (got ${message.tokens})`);
  }
  if (message.tool_calls != null && !Array.isArray(message.tool_calls)) {
    throw new Error(`appendTurn: messages[${index}].tool_calls must be an array`);
  }
  const { content, toolCallsJson } = storedContent(message);
  return {
    role,
    contentType: typeof message.content === 'string' || message.content == null ? 'text' : 'json',
    content,
    toolCallsJson,
    toolCallId: message.tool_call_id ?? null,
    tokens: message.tokens,
    annotationsJson: Array.isArray(message.annotations) && message.annotations.length > 0 ? JSON.stringify(message.annotations) : null,
    bytes: contentBytes(content, toolCallsJson),
  };
}

/** A message's content and tool calls as they are stored: a string as is, anything else as its JSON. */
function storedContent(message: IncomingMessage): { content: string; toolCallsJson: string | null } {
  const { content, tool_calls: toolCalls } = message;
  return {
    content: content === undefined || content === null ? '' : typeof content === 'string' ? content : JSON.stringify(content),
    toolCallsJson: Array.isArray(toolCalls) && toolCalls.length > 0 ? JSON.stringify(toolCalls) : null,
  };
}

/** What a message a request brings would add to the conversation's `content_bytes`. */
export function incomingBytes(message: IncomingMessage): number {
  const { content, toolCallsJson } = storedContent(message);
  return contentBytes(content, toolCallsJson);
}

/**
 * UTF-8 bytes of the content plus the tool calls' JSON. The migration's backfill and the
 * message pages count the same in SQL, tool calls as jsonb prints them (a few spaces more).
 */
function contentBytes(content: string, toolCallsJson: string | null): number {
  return Buffer.byteLength(content, 'utf8') + (toolCallsJson === null ? 0 : Buffer.byteLength(toolCallsJson, 'utf8'));
}

/** A stored message back in OpenAI's chat format, as it was given. */
export function toChatMessage(row: ConversationMessage): ChatHistoryMessage {
  const message: ChatHistoryMessage = {
    role: row.role,
    content:
      row.contentType === 'json'
        ? (JSON.parse(row.content) as ContentPart[])
        : row.content === '' && row.toolCalls
          ? null
          : row.content,
  };
  if (row.toolCalls) message.tool_calls = row.toolCalls;
  if (row.toolCallId !== null) message.tool_call_id = row.toolCallId;
  return message;
}

/** The cost as an exact decimal string for a `numeric` column. */
export function costDecimal(cost: number | string): string {
  if (typeof cost === 'number') {
    if (!Number.isFinite(cost) || cost < 0) throw new Error(`appendTurn: costMillicents must be a finite number >= 0 (got ${cost})`);
    // Fixed notation: String(1e-7) would be "1e-7".
    return cost.toFixed(6);
  }
  if (!DECIMAL.test(cost)) throw new Error(`appendTurn: costMillicents must be a decimal string >= 0 (got "${cost}")`);
  return cost;
}
