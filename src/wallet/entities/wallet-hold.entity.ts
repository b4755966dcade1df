import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';

/**
 * Money set aside: for one request in flight (`request`), or a budget lease from which a
 * process admits many (`lease`, see WalletLeases). `wallets.reserved_millicents` is the sum
 * of these.
 */
@Entity({ name: 'wallet_holds' })
export class WalletHold {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  @Column({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ name: 'request_id', type: 'text' })
  requestId: string;

  @Column({ type: 'text', default: 'request' })
  kind: 'request' | 'lease';

  @Column({ name: 'amount_millicents', type: 'bigint', transformer: bigintToNumber })
  amountMillicents: number;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @Column({ name: 'expires_at', type: 'timestamptz' })
  expiresAt: Date;
}
