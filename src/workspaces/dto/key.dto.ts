import { ApiProperty } from '@nestjs/swagger';
import { SPEND_PERIODS } from '../key-limits';

/**
 * The calling key, as `GET /v1/key` answers it. OpenRouter's field names where they fit
 * (`label`, `limit`, `limit_remaining`, `limit_reset`, `usage`, `usage_daily`, `usage_weekly`,
 * `usage_monthly`: dollars, as numbers), and each amount also exact, in whole millicents.
 */
export class ApiKeyInfoDto {
  @ApiProperty({ format: 'uuid' })
  id: string;

  @ApiProperty({ type: String, nullable: true, description: 'The name given to the key.', example: 'staging' })
  name: string | null;

  @ApiProperty({ description: 'The name, or the key\'s first characters when it has none.', example: 'staging' })
  label: string;

  @ApiProperty({ example: 'sk-AbCd1234' })
  display_prefix: string;

  @ApiProperty({ format: 'uuid' })
  workspace_id: string;

  @ApiProperty({ type: Number, nullable: true, description: 'Spending limit in dollars per period; null: no limit of its own (the wallet bounds it).', example: 5 })
  limit: number | null;

  @ApiProperty({ type: Number, nullable: true, example: 500000 })
  limit_millicents: number | null;

  @ApiProperty({ type: String, nullable: true, enum: SPEND_PERIODS.filter((period) => period !== 'none'), description: 'When the spend counted against the limit starts again (UTC; weeks on Monday); null: never.', example: 'daily' })
  limit_reset: string | null;

  @ApiProperty({ type: String, nullable: true, format: 'date-time', description: 'The start of the next period; null when the limit never resets (or there is none).' })
  limit_resets_at: string | null;

  @ApiProperty({ type: Number, nullable: true, description: 'Dollars left in this period: the limit less what was charged and what requests in flight hold.', example: 4.2 })
  limit_remaining: number | null;

  @ApiProperty({ type: Number, nullable: true, example: 420000 })
  limit_remaining_millicents: number | null;

  @ApiProperty({ description: 'Dollars charged to the key in all.', example: 12.5 })
  usage: number;

  @ApiProperty({ description: 'Whole millicents charged in the current period (all time when the limit never resets).', example: 80000 })
  period_usage_millicents: number;

  @ApiProperty({ description: 'Whole millicents held by its requests in flight.', example: 0 })
  reserved_millicents: number;

  @ApiProperty({ description: 'Dollars charged today (UTC).', example: 0.8 })
  usage_daily: number;

  @ApiProperty({ description: 'Dollars charged this week (from Monday, UTC).', example: 3.1 })
  usage_weekly: number;

  @ApiProperty({ description: 'Dollars charged this month (UTC).', example: 9.7 })
  usage_monthly: number;

  @ApiProperty({ type: [String], nullable: true, description: 'The models it may run (directly or through an assistant); null: any.' })
  allowed_models: string[] | null;

  @ApiProperty({ type: [String], nullable: true, description: 'The assistants (slugs) it may use; null: any.' })
  allowed_assistants: string[] | null;

  @ApiProperty({ type: Number, nullable: true, description: "Its own requests per minute, within the workspace's; null: the workspace's.", example: 60 })
  rate_limit_rpm: number | null;

  @ApiProperty({ type: [String], nullable: true, description: 'Client address ranges (CIDR) it may be used from; null: anywhere.' })
  allowed_ips: string[] | null;

  @ApiProperty({ type: String, nullable: true, format: 'date-time' })
  expires_at: string | null;

  @ApiProperty({ format: 'date-time' })
  created_at: string;
}

export class ApiKeyInfoResponseDto {
  @ApiProperty({ type: ApiKeyInfoDto })
  data: ApiKeyInfoDto;
}
