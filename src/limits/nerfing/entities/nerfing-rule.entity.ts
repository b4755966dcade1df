import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber } from '../../../common/database/transformers';

export const NERFING_SCOPES = ['all', 'user', 'widget_visitors'] as const;
export type NerfingScopeType = (typeof NERFING_SCOPES)[number];
export const NERFING_WINDOWS = ['minute', 'hour', 'day', 'month'] as const;
export type NerfingWindow = (typeof NERFING_WINDOWS)[number];
export const NERFING_METRICS = ['requests', 'tokens', 'cost_millicents'] as const;
export type NerfingMetric = (typeof NERFING_METRICS)[number];
export const NERFING_ACTIONS = ['block', 'cap_output', 'downgrade'] as const;
export type NerfingActionType = (typeof NERFING_ACTIONS)[number];

/**
 * One restriction rule of a workspace, stored flat (the API shows it nested: see
 * nerfing-rule.ts). The migration's checks keep each part whole: a user id only with the
 * `user` scope, a cap only with `cap_output`, a model only with `downgrade`.
 */
@Entity({ name: 'nerfing_rules' })
export class NerfingRule {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  /** Rules apply in ascending position. */
  @Column({ type: 'integer' })
  position: number;

  @Column({ name: 'scope_type', type: 'text' })
  scopeType: NerfingScopeType;

  @Column({ name: 'scope_user_id', type: 'text', nullable: true })
  scopeUserId: string | null;

  @Column({ type: 'text' })
  window: NerfingWindow;

  @Column({ type: 'text' })
  metric: NerfingMetric;

  @Column({ type: 'bigint', transformer: bigintToNumber })
  threshold: number;

  @Column({ name: 'action_type', type: 'text' })
  actionType: NerfingActionType;

  @Column({ name: 'action_max_tokens', type: 'integer', nullable: true })
  actionMaxTokens: number | null;

  @Column({ name: 'action_model', type: 'text', nullable: true })
  actionModel: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;
}
