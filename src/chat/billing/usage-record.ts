import type { UsageStatus } from '../../usage/entities/usage-record.entity';
import { NewUsageRecord, NOTHING_USED } from '../../usage/usage.service';

/**
 * Who made a request and what it asked for: the part of its usage record known before it
 * runs. `nerfing`: the nerfing rules applied to it (none when absent).
 */
export type UsageSubject = Pick<
  NewUsageRecord,
  'workspaceId' | 'requestId' | 'apiKeyId' | 'assistantId' | 'model' | 'userId' | 'subscriptionId' | 'stream' | 'source'
> &
  Partial<Pick<NewUsageRecord, 'nerfing'>>;

/** What a request used and cost: tokens, costs, tools and model calls (what was charged, its settlement fills in). */
export type UsageAmounts = Pick<
  NewUsageRecord,
  | 'inputTokens'
  | 'outputTokens'
  | 'totalTokens'
  | 'cachedTokens'
  | 'llmCostMillicents'
  | 'toolCostMillicents'
  | 'totalCostMillicents'
  | 'toolsUsed'
  | 'iterations'
>;

export interface UsageEnding {
  status: UsageStatus;
  errorCode: string | null;
}

/**
 * The one way a usage record is put together: every authenticated chat request gets one,
 * whether it was settled (the billing session), refused before any money was held (the
 * chat service) or refused by a guard before it reached the service (the refusal filter).
 */
export function usageRecord(subject: UsageSubject, latencyMs: number, ending: UsageEnding, used: UsageAmounts): Omit<NewUsageRecord, 'chargedMillicents'> {
  return {
    ...subject,
    nerfing: subject.nerfing ?? [],
    ...used,
    latencyMs,
    status: ending.status,
    errorCode: ending.errorCode,
  };
}

/** The record of a request refused before it cost anything. */
export function refusedUsageRecord(subject: UsageSubject, latencyMs: number, errorCode: string): NewUsageRecord {
  return { ...usageRecord(subject, latencyMs, { status: 'error', errorCode }, { ...NOTHING_USED, toolsUsed: [] }), chargedMillicents: 0 };
}
