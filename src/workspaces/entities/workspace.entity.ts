import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';
import { TierName } from '../../common/tier-name';

/** `suspended`: its API keys and widgets are refused (403 `workspace_suspended`); set by an operator. */
export type WorkspaceStatus = 'active' | 'suspended';

@Entity({ name: 'workspaces' })
export class Workspace {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ type: 'text' })
  name: string;

  @Column({ type: 'text' })
  tier: TierName;

  /** Enterprise only; null means the tier's rate. */
  @Column({ name: 'custom_rate_limit_rpm', type: 'integer', nullable: true })
  customRateLimitRpm: number | null;

  @Column({ type: 'text', default: 'active' })
  status: WorkspaceStatus;

  /** The embedding model of the documents of its assistants that name none; null: lexical-only search. */
  @Column({ name: 'embedding_model', type: 'text', nullable: true })
  embeddingModel: string | null;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
