import type { UsageStatus } from '../usage/entities/usage-record.entity';
import { NewUsageRecord, NOTHING_USED } from '../usage/usage.service';

/**
 * Who made a request and what it asked for: the part of its usage record known before it
 * runs. `nerfing`: the nerfing rules applied to it (none when absent).
 */
export type UsageSubject = Pick<
  NewUsageRecord,
  'workspaceId' | 'requestId' | 'apiKeyId' | 'apiKeyName' | 'assistantId' | 'model' | 'userId' | 'subscriptionId' | 'stream' | 'source'
> &
  Partial<Pick<NewUsageRecord, 'nerfing'>>;

/**
 * What a request used and cost: tokens, costs, tools and model calls (what was charged, its
 * settlement fills in), and who answered it after how many upstream attempts.
 */
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
  | 'provider'
  | 'deployment'
  | 'attempts'
>;

export interface UsageEnding {
  status: UsageStatus;
  errorCode: string | null;
}

/**
 * The one way a usage record is put together: every authenticated chat request gets one,
 * whether it was settled (the billing session), refused before any money was held (the
 * chat service) or refused by a guard before it reached the service (the refusal filter).
 *
 * Every field is written out, not spread: on Node 20 (V8 11.3) an object that starts with a
 * spread and gets a property added makes a new hidden class each time, which costs about
 * 8 KB here and survives young collections (bench/README.md, "Results: hidden classes").
 */
export function usageRecord(subject: UsageSubject, latencyMs: number, ending: UsageEnding, used: UsageAmounts): Omit<NewUsageRecord, 'chargedMillicents'> {
  return {
    workspaceId: subject.workspaceId,
    requestId: subject.requestId,
    apiKeyId: subject.apiKeyId,
    apiKeyName: subject.apiKeyName,
    assistantId: subject.assistantId,
    model: subject.model,
    userId: subject.userId,
    subscriptionId: subject.subscriptionId,
    stream: subject.stream,
    source: subject.source,
    nerfing: subject.nerfing ?? [],
    inputTokens: used.inputTokens,
    outputTokens: used.outputTokens,
    totalTokens: used.totalTokens,
    cachedTokens: used.cachedTokens,
    llmCostMillicents: used.llmCostMillicents,
    toolCostMillicents: used.toolCostMillicents,
    totalCostMillicents: used.totalCostMillicents,
    toolsUsed: used.toolsUsed,
    iterations: used.iterations,
    provider: used.provider,
    deployment: used.deployment,
    attempts: used.attempts,
    latencyMs,
    status: ending.status,
    errorCode: ending.errorCode,
  };
}

/** The record of a request refused before it cost anything. */
export function refusedUsageRecord(subject: UsageSubject, latencyMs: number, errorCode: string): NewUsageRecord {
  return { chargedMillicents: 0, ...usageRecord(subject, latencyMs, { status: 'error', errorCode }, { ...NOTHING_USED, toolsUsed: [] }) };
}
