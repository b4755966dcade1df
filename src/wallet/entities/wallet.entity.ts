import { Column, Entity, PrimaryColumn, UpdateDateColumn } from 'typeorm';
import { bigintToNumber } from '../../common/database/transformers';

/** One wallet per workspace. `balance` always equals the sum of its ledger amounts. */
@Entity({ name: 'wallets' })
export class Wallet {
  @PrimaryColumn({ name: 'workspace_id', type: 'uuid' })
  workspaceId: string;

  @Column({ name: 'balance_millicents', type: 'bigint', default: 0, transformer: bigintToNumber })
  balanceMillicents: number;

  /** Sum of the live holds of in-flight requests. */
  @Column({ name: 'reserved_millicents', type: 'bigint', default: 0, transformer: bigintToNumber })
  reservedMillicents: number;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
