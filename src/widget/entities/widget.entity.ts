import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';

export const WIDGET_THEMES = ['light', 'dark'] as const;
export type WidgetTheme = (typeof WIDGET_THEMES)[number];

export const WIDGET_POSITIONS = ['bottom-right', 'bottom-left'] as const;
export type WidgetPosition = (typeof WIDGET_POSITIONS)[number];

/**
 * An assistant published as a chat widget on other websites (at most one per assistant).
 * Everything here is public except the ids of the workspace and the assistant: the widget's
 * configuration response says only what the page needs to draw it.
 */
@Entity({ name: 'widgets' })
export class Widget {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  /** What the embed tag carries (`data-widget`): random, so that it says nothing of the assistant. */
  @Column({ name: 'public_id', type: 'text' })
  publicId: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ name: 'assistant_id', type: 'uuid' })
  assistantId: string;

  @Column({ type: 'boolean', default: false })
  enabled: boolean;

  /** Exact origins (`https://example.com`, `http://127.0.0.1:8080`); requests from any other are refused. */
  @Column({ name: 'allowed_origins', type: 'text', array: true, default: () => "'{}'" })
  allowedOrigins: string[];

  @Column({ type: 'text' })
  title: string;

  /** The assistant's first words in the panel (shown, never sent to the model); may be empty. */
  @Column({ type: 'text', default: '' })
  greeting: string;

  @Column({ type: 'text' })
  placeholder: string;

  /** `#rrggbb`, lowercase. */
  @Column({ name: 'accent_color', type: 'text' })
  accentColor: string;

  @Column({ type: 'text', default: 'light' })
  theme: WidgetTheme;

  @Column({ type: 'text', default: 'bottom-right' })
  position: WidgetPosition;

  /** What its visitors' messages may cost per UTC day; past it they are told the chat rests until tomorrow. */
  @Column({ name: 'daily_cap_millicents', type: 'bigint', default: 500_000, transformer: bigintToNumber })
  dailyCapMillicents: number;

  /** Stored messages each visitor message replays upstream, newest first (also bounded in tokens). */
  @Column({ name: 'history_messages', type: 'integer', default: 6 })
  historyMessages: number;

  /** The `max_tokens` of each answer. */
  @Column({ name: 'max_answer_tokens', type: 'integer', default: 512 })
  maxAnswerTokens: number;

  /** Whether visitors see the sources an answer cites (titles of web pages, names of documents). */
  @Column({ name: 'show_sources', type: 'boolean', default: false })
  showSources: boolean;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
