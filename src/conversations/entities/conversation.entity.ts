import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';
import { bigintToNumber, numericToNumber } from '../../common/database/transformers';

export const CONVERSATION_SOURCES = ['api', 'dashboard', 'widget'] as const;
export type ConversationSource = (typeof CONVERSATION_SOURCES)[number];

export const CONVERSATION_STATUSES = ['active', 'archived'] as const;
export type ConversationStatus = (typeof CONVERSATION_STATUSES)[number];

/** Up to 16 string pairs, as OpenAI's `metadata`. */
export type ConversationMetadata = Record<string, string>;

/**
 * A stored conversation of a workspace. Its counters are kept by
 * `ConversationTurns.appendTurn` with relative updates only. The search vector of the
 * title and `last_activity_at` are generated columns of the table, not mapped here.
 */
@Entity({ name: 'conversations' })
export class Conversation {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  /** Null when none was given or the assistant was deleted since. */
  @Column({ name: 'assistant_id', type: 'uuid', nullable: true })
  assistantId: string | null;

  @Column({ type: 'text', nullable: true })
  title: string | null;

  @Column({ type: 'text', default: 'api' })
  source: ConversationSource;

  @Column({ type: 'text', default: 'active' })
  status: ConversationStatus;

  /** The caller's end-user identifier, free text. */
  @Column({ name: 'user_id', type: 'text', nullable: true })
  userId: string | null;

  @Column({ type: 'jsonb', default: () => "'{}'" })
  metadata: ConversationMetadata;

  @Column({ name: 'message_count', type: 'integer', default: 0 })
  messageCount: number;

  @Column({ name: 'total_input_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  totalInputTokens: number;

  @Column({ name: 'total_output_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  totalOutputTokens: number;

  @Column({
    name: 'total_cost_millicents',
    type: 'numeric',
    precision: 20,
    scale: 6,
    default: 0,
    transformer: numericToNumber,
  })
  totalCostMillicents: number;

  /** UTF-8 bytes of its messages' content plus the JSON of their tool calls: what its size limit counts. */
  @Column({ name: 'content_bytes', type: 'bigint', default: 0, transformer: bigintToNumber })
  contentBytes: number;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;

  @Column({ name: 'last_message_at', type: 'timestamptz', nullable: true })
  lastMessageAt: Date | null;
}
