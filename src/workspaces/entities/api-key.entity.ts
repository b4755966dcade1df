import { Column, CreateDateColumn, Entity, Index, JoinColumn, ManyToOne, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';
import type { SpendPeriod } from '../key-limits';
import { Workspace } from './workspace.entity';

/** An API key. The secret itself is never stored: only its SHA-256 and a display prefix. */
@Entity({ name: 'api_keys' })
export class ApiKey {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Index()
  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @ManyToOne(() => Workspace, { onDelete: 'CASCADE' })
  @JoinColumn({ name: 'workspace_id' })
  workspace?: Workspace;

  @Column({ type: 'text', nullable: true })
  name: string | null;

  /** Hex SHA-256 of the whole key; unique, the lookup path of every request. */
  @Column({ name: 'key_hash', type: 'char', length: 64, unique: true })
  keyHash: string;

  /** The first characters of the key (`sk-AbCd1234`), so people can tell keys apart. */
  @Column({ name: 'display_prefix', type: 'text' })
  displayPrefix: string;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @Column({ name: 'revoked_at', type: 'timestamptz', nullable: true })
  revokedAt: Date | null;

  /** The dashboard user who made it; null for keys made by the CLI or at first start. */
  @Column({ name: 'created_by', type: 'uuid', nullable: true })
  createdBy: string | null;

  /** After this moment the key is refused; null: it does not expire. */
  @Column({ name: 'expires_at', type: 'timestamptz', nullable: true })
  expiresAt: Date | null;

  /** Coarse (minutes): written in batches, not once per request. */
  @Column({ name: 'last_used_at', type: 'timestamptz', nullable: true })
  lastUsedAt: Date | null;

  /** Whole millicents the key may be charged per `spendLimitPeriod`; null: only the wallet limits it. */
  @Column({ name: 'spend_limit_millicents', type: 'bigint', nullable: true, transformer: bigintToNumber })
  spendLimitMillicents: number | null;

  /** When the spend counted against the limit starts again (UTC): never, each day, each week (Monday) or each month. */
  @Column({ name: 'spend_limit_period', type: 'text', default: 'none' })
  spendLimitPeriod: SpendPeriod;

  /** The models the key may run (directly or through an assistant); null: any. */
  @Column({ name: 'allowed_models', type: 'text', array: true, nullable: true })
  allowedModels: string[] | null;

  /** The assistants (slugs) the key may use; null: any. */
  @Column({ name: 'allowed_assistants', type: 'text', array: true, nullable: true })
  allowedAssistants: string[] | null;

  /** Requests per minute of this key, within its workspace's; null: the workspace's only. */
  @Column({ name: 'rate_limit_rpm', type: 'integer', nullable: true })
  rateLimitRpm: number | null;

  /** Client address ranges (CIDR) the key may be used from; null: anywhere. */
  @Column({ name: 'allowed_ips', type: 'text', array: true, nullable: true })
  allowedIps: string[] | null;
}
