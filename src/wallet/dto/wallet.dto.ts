import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { PageMetaDto, PageQueryDto } from '../../common/pagination';
import { OptionalEnum } from '../../common/validation/decorators';
import { TRANSACTION_TYPES, TransactionType, WalletTransaction } from '../entities/wallet-transaction.entity';

export class AutoTopupDto {
  @ApiProperty({ example: true })
  enabled: boolean;

  @ApiProperty({ description: 'A charge leaving the balance below this buys a top-up.', example: 500_000 })
  thresholdMillicents: number;

  @ApiProperty({ description: 'Added by each top-up.', example: 2_000_000 })
  amountMillicents: number;

  @ApiProperty({
    description: "Most auto top-ups add per calendar month (UTC): the workspace's cap, or the operator's default when it set none.",
    example: 10_000_000,
  })
  monthlyCapMillicents: number;

  @ApiProperty({ description: "True when the cap is the operator's default (AUTO_TOPUP_DEFAULT_MONTHLY_CAP_MILLICENTS).", example: false })
  monthlyCapIsDefault: boolean;

  @ApiProperty({ description: 'Auto top-ups this calendar month, counted against the cap.', example: 2_000_000 })
  monthToDateMillicents: number;

  @ApiProperty({ description: 'Whether a card is on file (its ids are never shown).', example: true })
  paymentMethodSaved: boolean;
}

export class WalletDto {
  @ApiProperty({ description: 'Current balance in millicents (1/1000 of a cent).', example: 1_000_000 })
  balanceMillicents: number;

  @ApiProperty({ description: 'Held for requests in flight.', example: 1_250 })
  reservedMillicents: number;

  @ApiProperty({ description: 'Balance minus reserved: what new requests can spend.', example: 998_750 })
  availableMillicents: number;

  @ApiPropertyOptional({ type: AutoTopupDto, description: 'The auto top-up settings, once configured.' })
  autoTopup?: AutoTopupDto;
}

export class TransactionQueryDto extends PageQueryDto {
  @OptionalEnum(TRANSACTION_TYPES, 'Only transactions of this type.')
  type?: TransactionType;
}

export class WalletTransactionDto {
  @ApiProperty({ format: 'uuid', example: '0b8f6f0e-5c1e-4c47-9d8c-3f1f0b3c2a11' })
  id: string;

  @ApiProperty({ enum: TRANSACTION_TYPES, example: 'usage' })
  type: TransactionType;

  @ApiProperty({ description: 'Signed millicents; usage charges are negative.', example: -1_337 })
  amountMillicents: number;

  @ApiProperty({ description: 'Balance after this transaction, in millicents.', example: 998_663 })
  balanceAfterMillicents: number;

  @ApiProperty({ example: 'API usage' })
  description: string;

  @ApiProperty({ format: 'date-time', example: '2026-11-22T10:15:00.000Z' })
  created_at: string;

  static from(row: WalletTransaction): WalletTransactionDto {
    return {
      id: row.id,
      type: row.type,
      amountMillicents: row.amountMillicents,
      balanceAfterMillicents: row.balanceAfterMillicents,
      description: row.description,
      created_at: row.createdAt.toISOString(),
    };
  }
}

export class WalletTransactionPageDto extends PageMetaDto {
  @ApiProperty({ type: [WalletTransactionDto], description: 'Newest first.' })
  data: WalletTransactionDto[];
}
