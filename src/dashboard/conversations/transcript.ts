import type { ConversationStore } from '../../conversations/conversation-store';
import type { ConversationMessage } from '../../conversations/entities/conversation-message.entity';
import { chatAnnotationsOf, SourceLine, sourceLines } from '../../tools/citations';
import { formatDateTime, formatMillicents } from '../format';

/** The most messages a transcript page shows; the rest is a link to the API's pages. */
export const TRANSCRIPT_MAX_MESSAGES = 500;

/** One message as the transcript shows it: text only (templates escape it; the page's script renders its Markdown). */
export interface TranscriptMessage {
  id: string;
  role: ConversationMessage['role'];
  roleLabel: string;
  text: string;
  /** Tools an assistant message asked the client to call. */
  toolCalls: string[];
  at: string;
  /** On a turn's reply: its cost (`$0.00021 (21 millicents)`) and the server tools it ran. */
  cost: string | null;
  toolsUsed: string[] | null;
  /** On a reply that cited what its tools found: the sources, a linked page title or a file name each. */
  sources: SourceLine[];
}

export interface Transcript {
  messages: TranscriptMessage[];
  /** More messages than shown. */
  truncated: boolean;
}

const ROLE_LABELS: Record<ConversationMessage['role'], string> = {
  system: 'System',
  user: 'You',
  assistant: 'Assistant',
  tool: 'Tool result',
};

/** A conversation's messages, oldest first, for the transcript and the playground. */
export async function transcriptOf(conversations: ConversationStore, workspaceId: string, conversationId: string): Promise<Transcript> {
  const page = await conversations.messages(workspaceId, conversationId, { limit: TRANSCRIPT_MAX_MESSAGES });
  return { messages: page.data.map(transcriptMessage), truncated: page.has_more };
}

function transcriptMessage(message: ConversationMessage): TranscriptMessage {
  return {
    id: message.id,
    role: message.role,
    roleLabel: ROLE_LABELS[message.role],
    text: textOf(message),
    toolCalls: (message.toolCalls ?? []).map((call) => call.function.name),
    at: formatDateTime(message.createdAt),
    cost: message.costMillicents === null ? null : costText(message.costMillicents),
    toolsUsed: message.toolsUsed,
    sources: sourceLines(chatAnnotationsOf(message.annotations)),
  };
}

/** `$0.00021 (21 millicents)`; a fraction of a millicent is shown to the millionth. */
export function costText(millicents: number): string {
  const exact = Number.isInteger(millicents) ? String(millicents) : millicents.toFixed(6).replace(/0+$/, '');
  return `${formatMillicents(millicents)} (${exact} millicents)`;
}

/** The text of a message: its string, or the text parts of array content (other parts named). */
function textOf(message: ConversationMessage): string {
  if (message.contentType !== 'json') return message.content;
  try {
    const parts = JSON.parse(message.content) as Array<{ type?: string; text?: string }>;
    return parts.map((part) => (part.type === 'text' && typeof part.text === 'string' ? part.text : `[${part.type ?? 'part'}]`)).join('\n');
  } catch {
    return message.content;
  }
}
