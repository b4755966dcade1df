import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';
import type { ToolSettings } from '../../tools/server-tool';
import type { ServerToolName } from '../server-tools';

/** A built-in server tool's name; the one list is SERVER_TOOL_CLASSES (`assistants/server-tools.ts`). */
export type ServerToolType = ServerToolName;

/**
 * A server tool an assistant offers the model, with its own settings (`max_results`: how
 * many web pages or document chunks a call returns). Checked against the registered tools.
 */
export interface AssistantTool extends ToolSettings {
  type: ServerToolType;
}

/** A stored agent: system prompt, model settings and server tools. Addressed by id or slug. */
@Entity({ name: 'assistants' })
export class Assistant {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ type: 'text' })
  name: string;

  /** Unique in the workspace: lowercase letters, digits and single hyphens. */
  @Column({ type: 'text' })
  slug: string;

  @Column({ type: 'text', default: '' })
  description: string;

  @Column({ name: 'system_prompt', type: 'text', default: '' })
  systemPrompt: string;

  /** A model id of the catalog. */
  @Column({ type: 'text' })
  model: string;

  /**
   * The embedding model of its documents' chunks (the dense leg of `file_search`); null: its
   * workspace's, and lexical-only search when that has none either.
   */
  @Column({ name: 'embedding_model', type: 'text', nullable: true })
  embeddingModel: string | null;

  @Column({ type: 'real', nullable: true })
  temperature: number | null;

  @Column({ name: 'max_tokens', type: 'integer', nullable: true })
  maxTokens: number | null;

  @Column({ type: 'jsonb', default: () => "'[]'" })
  tools: AssistantTool[];

  @Column({ name: 'max_tool_iterations', type: 'integer', default: 5 })
  maxToolIterations: number;

  /** Tokens per chunk of its documents, 100 to 4,096 (OpenAI's default 800): applies to uploads and re-indexing. */
  @Column({ name: 'chunk_max_tokens', type: 'integer', default: 800 })
  chunkMaxTokens: number;

  /** Tokens a chunk shares with the one before, at most half the chunk size (OpenAI's default 400). */
  @Column({ name: 'chunk_overlap_tokens', type: 'integer', default: 400 })
  chunkOverlapTokens: number;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
