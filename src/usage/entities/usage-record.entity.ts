import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber, numericToNumber } from '../../common/database/transformers';

export type UsageStatus = 'success' | 'error';

export const USAGE_SOURCES = ['api', 'dashboard', 'widget', 'messages', 'embeddings', 'document_embeddings'] as const;
/**
 * Who made the request: an API key (`api`), the dashboard's playground (`dashboard`), a chat
 * widget (`widget`), an API key through the Anthropic Messages API (`messages`), an API
 * key's `POST /v1/embeddings` (`embeddings`), or the ingestion of an assistant's documents
 * embedding their chunks (`document_embeddings`, without a key).
 */
export type UsageSource = (typeof USAGE_SOURCES)[number];

/**
 * What one nerfing rule (src/limits/nerfing) did to a request, as kept on its usage record
 * and shown by /v1/usage/recent: refused it (`block`), lowered its output cap
 * (`cap_output`, with the cap in force), or served another model (`downgrade`, from and to).
 */
export interface NerfingApplication {
  rule_id: string;
  action: 'block' | 'cap_output' | 'downgrade';
  max_tokens?: number;
  from_model?: string;
  to_model?: string;
}

/** One row per authenticated chat request, successful or not. Kept for USAGE_RETENTION_DAYS. */
@Entity({ name: 'usage_records' })
export class UsageRecord {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  /** The X-Request-Id of the request. */
  @Column({ name: 'request_id', type: 'text' })
  requestId: string;

  @Column({ name: 'api_key_id', type: 'uuid', nullable: true })
  apiKeyId: string | null;

  /** The key's name when the request was made (a key renamed later keeps its old name here). */
  @Column({ name: 'api_key_name', type: 'text', nullable: true })
  apiKeyName: string | null;

  @Column({ name: 'assistant_id', type: 'uuid', nullable: true })
  assistantId: string | null;

  @Column({ type: 'text' })
  model: string;

  /** The provider and deployment (the catalog's label) that answered; null when none did (refused, or every attempt failed). */
  @Column({ type: 'text', nullable: true })
  provider: string | null;

  @Column({ type: 'text', nullable: true })
  deployment: string | null;

  /** Upstream attempts of the request, failed ones (moved to another deployment) included; 0 when none was made. */
  @Column({ type: 'integer', default: 0 })
  attempts: number;

  @Column({ name: 'input_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  inputTokens: number;

  @Column({ name: 'output_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  outputTokens: number;

  @Column({ name: 'total_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  totalTokens: number;

  @Column({ name: 'cached_tokens', type: 'bigint', default: 0, transformer: bigintToNumber })
  cachedTokens: number;

  @Column({ name: 'llm_cost_millicents', type: 'numeric', precision: 20, scale: 6, transformer: numericToNumber })
  llmCostMillicents: number;

  @Column({ name: 'tool_cost_millicents', type: 'numeric', precision: 20, scale: 6, transformer: numericToNumber })
  toolCostMillicents: number;

  @Column({ name: 'total_cost_millicents', type: 'numeric', precision: 20, scale: 6, transformer: numericToNumber })
  totalCostMillicents: number;

  /** Whole millicents taken from the wallet for this request (costs plus the carried fraction). */
  @Column({ name: 'charged_millicents', type: 'bigint', default: 0, transformer: bigintToNumber })
  chargedMillicents: number;

  @Column({ name: 'latency_ms', type: 'integer', default: 0 })
  latencyMs: number;

  @Column({ type: 'text' })
  status: UsageStatus;

  @Column({ name: 'error_code', type: 'text', nullable: true })
  errorCode: string | null;

  @Column({ name: 'user_id', type: 'text', nullable: true })
  userId: string | null;

  @Column({ name: 'subscription_id', type: 'text', nullable: true })
  subscriptionId: string | null;

  @Column({ name: 'tools_used', type: 'text', array: true, default: () => "'{}'" })
  toolsUsed: string[];

  @Column({ type: 'boolean', default: false })
  stream: boolean;

  @Column({ type: 'integer', default: 1 })
  iterations: number;

  @Column({ type: 'text', default: 'api' })
  source: UsageSource;

  /** The nerfing rules applied to the request, in the order they were applied; empty for most requests. */
  @Column({ type: 'jsonb', default: () => "'[]'" })
  nerfing: NerfingApplication[];

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
