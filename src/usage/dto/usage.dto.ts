import { applyDecorators } from '@nestjs/common';
import { ApiProperty, ApiPropertyOptional } from '@nestjs/swagger';
import { IsOptional, IsString, MaxLength, MinLength, ValidateBy } from 'class-validator';
import { PageMetaDto, PageQueryDto } from '../../common/pagination';
import { OptionalEnum, OptionalUuid } from '../../common/validation/decorators';
import { USAGE_SOURCES, type UsageStatus } from '../entities/usage-record.entity';
import { parseDay } from '../usage-period';

export const USAGE_STATUSES: readonly UsageStatus[] = ['success', 'error'];

/** A calendar date, `YYYY-MM-DD`, validated as a real date (no 2026-02-30) and documented as such. */
function OptionalDate(description: string, example: string) {
  return applyDecorators(
    ApiPropertyOptional({ type: String, format: 'date', pattern: '^\\d{4}-\\d{2}-\\d{2}$', description, example }),
    IsOptional(),
    IsString({ message: '$property must be a date in YYYY-MM-DD form' }),
    ValidateBy({
      name: 'isCalendarDate',
      validator: {
        validate: (value: unknown) => typeof value === 'string' && parseDay(value) !== null,
        defaultMessage: (args) => `${args?.property} must be a real date in YYYY-MM-DD form (got "${String(args?.value)}")`,
      },
    }),
  );
}

function OptionalText(description: string, example: string, maxLength: number) {
  return applyDecorators(
    ApiPropertyOptional({ type: String, minLength: 1, maxLength, description, example }),
    IsOptional(),
    IsString({ message: '$property must be a string' }),
    MinLength(1, { message: '$property must not be empty' }),
    MaxLength(maxLength, { message: `$property must be at most ${maxLength} characters` }),
  );
}

// ---------------------------------------------------------------------------------------
// Queries
// ---------------------------------------------------------------------------------------

export class UsageRangeQueryDto {
  @OptionalDate(
    'First day of the range (UTC, included). Default: 29 days before `end_date`, but not before the retention ' +
      'window. May not be earlier than today - (USAGE_RETENTION_DAYS - 1).',
    '2026-11-01',
  )
  start_date?: string;

  @OptionalDate(
    'Last day of the range (UTC, included). Default: today (UTC). Not before `start_date`; the range spans at ' +
      'most USAGE_RETENTION_DAYS days.',
    '2026-11-30',
  )
  end_date?: string;

  @OptionalUuid('Only the requests made with this API key of the workspace.')
  @ApiPropertyOptional({ example: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b' })
  api_key_id?: string;
}

export class RecentUsageQueryDto extends PageQueryDto {
  @OptionalText('Only records of this model id.', 'gpt-4o-mini', 200)
  model?: string;

  @OptionalUuid('Only records of requests made with this API key.')
  @ApiPropertyOptional({ example: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b' })
  api_key_id?: string;

  @OptionalUuid('Only records of requests handled by this assistant.')
  @ApiPropertyOptional({ example: '3f1e8a52-9c1d-4b7e-8f00-1d2c3b4a5f60' })
  assistant_id?: string;

  @OptionalText('Only records of this end user (the `user_id` sent with the chat request).', 'user-42', 256)
  user_id?: string;

  @OptionalEnum(USAGE_STATUSES, 'Only successful (`success`) or failed (`error`) requests.')
  @ApiPropertyOptional({ example: 'error' })
  status?: UsageStatus;
}
// Examples for the inherited `limit` and `starting_after` (validation and description stay PageQueryDto's).
ApiPropertyOptional({ example: 50 })(RecentUsageQueryDto.prototype, 'limit');
ApiPropertyOptional({ example: '7d0c3a8e-2f4b-4d8e-9a51-0c2b7e6f1a93' })(RecentUsageQueryDto.prototype, 'starting_after');

// ---------------------------------------------------------------------------------------
// GET /v1/usage
// ---------------------------------------------------------------------------------------

export class UsagePeriodDto {
  @ApiProperty({ format: 'date-time', description: 'Start of `start_date`, UTC.', example: '2026-11-01T00:00:00.000Z' })
  start: string;

  @ApiProperty({ format: 'date-time', description: 'End of `end_date`, UTC.', example: '2026-11-30T23:59:59.999Z' })
  end: string;
}

export class UsageTotalsDto {
  @ApiProperty({ type: 'integer', description: 'Requests in the range, successful and failed.', example: 1_284 })
  total_requests: number;

  @ApiProperty({ type: 'integer', description: 'Input plus output tokens.', example: 2_310_455 })
  total_tokens: number;

  @ApiProperty({ description: 'Exact sum of the requests\' costs, in millicents; may be fractional.', example: 412_339.125 })
  total_cost_millicents: number;

  @ApiProperty({ description: 'Mean latency of the requests, in milliseconds (2 decimals); 0 without requests.', example: 843.27 })
  average_latency_ms: number;
}

export class ModelUsageDto {
  @ApiProperty({ example: 'gpt-4o' })
  model: string;

  @ApiProperty({ type: 'integer', example: 311 })
  requests: number;

  @ApiProperty({ example: 301_220.5 })
  cost_millicents: number;
}

export class ProviderUsageDto {
  @ApiProperty({
    type: String,
    nullable: true,
    description: 'The provider that answered the requests; null for those no provider answered (refused, or every upstream attempt failed).',
    example: 'openai',
  })
  provider: string | null;

  @ApiProperty({ type: 'integer', example: 1_020 })
  requests: number;

  @ApiProperty({ example: 388_112.625 })
  cost_millicents: number;
}

export class KeyUsageDto {
  @ApiProperty({
    type: String,
    format: 'uuid',
    nullable: true,
    description: 'The API key the requests were made with; null for requests made without one (the widget, the dashboard playground).',
    example: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b',
  })
  api_key_id: string | null;

  @ApiProperty({ type: String, nullable: true, description: "The key's name now (its records keep the name it had then).", example: 'staging' })
  api_key_name: string | null;

  @ApiProperty({ type: 'integer', example: 1_020 })
  requests: number;

  @ApiProperty({ example: 388_112.625 })
  cost_millicents: number;
}

export class UsageSummaryDto {
  @ApiProperty({ type: UsagePeriodDto })
  period: UsagePeriodDto;

  @ApiProperty({ type: UsageTotalsDto })
  summary: UsageTotalsDto;

  @ApiProperty({ type: [ModelUsageDto], description: 'One entry per model used in the range, highest cost first.' })
  by_model: ModelUsageDto[];

  @ApiProperty({
    type: [ProviderUsageDto],
    description: 'One entry per provider that answered in the range (null: none did), highest cost first. Records from before upstream routing have provider null.',
  })
  by_provider: ProviderUsageDto[];

  @ApiProperty({ type: [KeyUsageDto], description: 'One entry per API key used in the range, highest cost first.' })
  by_api_key: KeyUsageDto[];
}

export class UsageSummaryResponseDto {
  @ApiProperty({ type: UsageSummaryDto })
  data: UsageSummaryDto;
}

// ---------------------------------------------------------------------------------------
// GET /v1/usage/recent
// ---------------------------------------------------------------------------------------

/** One nerfing rule's effect on a request (see the README's "Nerfing rules"). */
export class NerfingApplicationDto {
  @ApiProperty({ format: 'uuid', description: 'The rule that applied.', example: '3b1f6a0e-58c2-4d7e-9f0a-2c4e8b6d1a57' })
  rule_id: string;

  @ApiProperty({
    enum: ['block', 'cap_output', 'downgrade'],
    description: '`block`: the request was refused (429); `cap_output`: its max_tokens was lowered; `downgrade`: another model served it.',
    example: 'downgrade',
  })
  action: 'block' | 'cap_output' | 'downgrade';

  @ApiPropertyOptional({ type: 'integer', description: 'With `cap_output`: the output cap the request ran with.', example: 256 })
  max_tokens?: number;

  @ApiPropertyOptional({ description: 'With `downgrade`: the model the request asked for.', example: 'gpt-4o' })
  from_model?: string;

  @ApiPropertyOptional({ description: 'With `downgrade`: the model that served it (and whose prices it was billed at).', example: 'gpt-4o-mini' })
  to_model?: string;
}

export class UsageRecordDto {
  @ApiProperty({ format: 'uuid', example: '7d0c3a8e-2f4b-4d8e-9a51-0c2b7e6f1a93' })
  id: string;

  @ApiProperty({ description: 'The `X-Request-Id` of the chat request.', example: 'req_4f9a1c2e' })
  request_id: string;

  @ApiProperty({
    type: String,
    format: 'uuid',
    nullable: true,
    description: 'The API key it was made with; null without one (the widget, the playground).',
    example: '5b2f0c1e-7a3d-4e8f-9b10-2c3d4e5f6a7b',
  })
  api_key_id: string | null;

  @ApiProperty({ type: String, nullable: true, description: 'The name the key had when the request was made.', example: 'staging' })
  api_key_name: string | null;

  @ApiProperty({ type: String, format: 'uuid', nullable: true, description: 'Assistant that handled the request; null in direct mode.', example: null })
  assistant_id: string | null;

  @ApiProperty({ example: 'gpt-4o-mini' })
  model: string;

  @ApiProperty({
    type: String,
    nullable: true,
    description: 'The provider that answered; null when none did (refused, or every upstream attempt failed).',
    example: 'openai',
  })
  provider: string | null;

  @ApiProperty({
    type: String,
    nullable: true,
    description: "The label of the catalog deployment that answered (a model without deployments has one, labelled with its provider's name); null when none did.",
    example: 'openai-a',
  })
  deployment: string | null;

  @ApiProperty({
    type: 'integer',
    description: 'Upstream attempts the request made, failed ones (moved to another deployment or fallback model) included; 0 when it reached no upstream.',
    example: 1,
  })
  attempts: number;

  @ApiProperty({ type: 'integer', example: 812 })
  input_tokens: number;

  @ApiProperty({ type: 'integer', example: 164 })
  output_tokens: number;

  @ApiProperty({ type: 'integer', description: 'Input plus output tokens.', example: 976 })
  total_tokens: number;

  @ApiProperty({ description: 'Cost of the model call, in millicents; may be fractional.', example: 22.02 })
  llm_cost_millicents: number;

  @ApiProperty({ description: 'Cost of server-side tools (web search, retrieval), in millicents.', example: 0 })
  tool_cost_millicents: number;

  @ApiProperty({ description: 'LLM plus tool cost, in millicents.', example: 22.02 })
  total_cost_millicents: number;

  @ApiProperty({ type: 'integer', example: 1_204 })
  latency_ms: number;

  @ApiProperty({ enum: USAGE_STATUSES, example: 'success' })
  status: UsageStatus;

  @ApiProperty({ type: String, nullable: true, description: 'Set when the request failed.', example: null })
  error_code: string | null;

  @ApiProperty({ type: String, nullable: true, description: 'End-user id sent with the request.', example: 'user-42' })
  user_id: string | null;

  @ApiProperty({ type: String, nullable: true, description: 'Subscription id sent with the request.', example: null })
  subscription_id: string | null;

  @ApiProperty({ type: [String], description: 'Server-side tools the request used.', example: ['web_search'] })
  tools_used: string[];

  @ApiProperty({
    enum: USAGE_SOURCES,
    description: 'Where the request came from: `api` (an API key), `dashboard` (the playground), `widget` (a chat widget), `messages` (the Anthropic Messages API), `embeddings` (`POST /v1/embeddings`).',
    example: 'api',
  })
  source: string;

  @ApiProperty({
    type: [NerfingApplicationDto],
    description: "The workspace's nerfing rules applied to this request, in order; empty when none was.",
    example: [],
  })
  nerfing: NerfingApplicationDto[];

  @ApiProperty({ format: 'date-time', example: '2026-11-22T10:15:00.000Z' })
  created_at: string;
}

export class UsageRecordPageDto extends PageMetaDto {
  @ApiProperty({ type: [UsageRecordDto], description: 'Newest first.' })
  data: UsageRecordDto[];
}

// ---------------------------------------------------------------------------------------
// GET /v1/usage/daily
// ---------------------------------------------------------------------------------------

export class DailyUsageDto {
  @ApiProperty({ format: 'date', description: 'UTC day.', example: '2026-11-30' })
  date: string;

  @ApiProperty({ type: 'integer', example: 57 })
  requests: number;

  @ApiProperty({ type: 'integer', description: 'Input plus output tokens.', example: 98_114 })
  tokens: number;

  @ApiProperty({ example: 17_802.75 })
  cost_millicents: number;
}

export class DailyUsageResponseDto {
  @ApiProperty({
    type: [DailyUsageDto],
    description: 'One entry per day of the range, newest first; days without requests are zeros.',
  })
  data: DailyUsageDto[];
}
