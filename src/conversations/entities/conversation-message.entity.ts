import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { numericToNumber } from '../../common/database/transformers';
import type { ChatAnnotation } from '../../tools/citations';

export const STORED_MESSAGE_ROLES = ['system', 'user', 'assistant', 'tool'] as const;
export type StoredMessageRole = (typeof STORED_MESSAGE_ROLES)[number];

/** `text`: `content` is the text. `json`: `content` is the JSON of non-string content (an array of parts). */
export type StoredContentType = 'text' | 'json';

/** A tool call as OpenAI's assistant messages carry it. */
export interface StoredToolCall {
  id: string;
  type: 'function';
  function: { name: string; arguments: string };
}

/**
 * One message of a conversation. `position` (1, 2, 3, ...) orders them: the messages of
 * one turn are written in one transaction and share `created_at`. The search vector is a
 * generated column of the table, not mapped here.
 */
@Entity({ name: 'conversation_messages' })
export class ConversationMessage {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'conversation_id', type: 'uuid' })
  conversationId: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ type: 'integer' })
  position: number;

  @Column({ type: 'text' })
  role: StoredMessageRole;

  @Column({ name: 'content_type', type: 'text', default: 'text' })
  contentType: StoredContentType;

  @Column({ type: 'text', default: '' })
  content: string;

  @Column({ name: 'tool_calls', type: 'jsonb', nullable: true })
  toolCalls: StoredToolCall[] | null;

  @Column({ name: 'tool_call_id', type: 'text', nullable: true })
  toolCallId: string | null;

  @Column({ type: 'integer', default: 0 })
  tokens: number;

  /** On a reply: its citations of the sources the turn's server tools returned (OpenAI's `message.annotations`). Null: none. */
  @Column({ type: 'jsonb', nullable: true })
  annotations: ChatAnnotation[] | null;

  /** On the last message of a turn (the reply): what the turn cost. Null on the others, and on turns stored before it was kept. */
  @Column({ name: 'cost_millicents', type: 'numeric', precision: 20, scale: 6, nullable: true, transformer: numericToNumber })
  costMillicents: number | null;

  /** On the last message of a turn: the server tools the turn ran (empty: none). Null where it was not recorded. */
  @Column({ name: 'tools_used', type: 'text', array: true, nullable: true })
  toolsUsed: string[] | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
