import type { Request } from 'express';
import type { BlockList } from 'node:net';
import type { TierName } from '../tier-name';

/** When a key's spend counted against its limit starts again (UTC; weeks start on Monday). */
export type SpendPeriod = 'none' | 'daily' | 'weekly' | 'monthly';

/** What an API key is limited to, beyond its workspace's wallet and rate (see src/workspaces/key-limits.ts). */
export interface KeyLimits {
  /** Whole millicents the key may be charged per period; null: no limit of its own. */
  spendLimitMillicents: number | null;
  spendLimitPeriod: SpendPeriod;
  /** The models it may run (directly or through an assistant); null: any. */
  allowedModels: string[] | null;
  /** The assistants (slugs) it may use; null: any. */
  allowedAssistants: string[] | null;
  /** Its own requests per minute, within the workspace's; null: the workspace's only. */
  rateLimitRpm: number | null;
  /** The client address ranges it may be used from; null: anywhere. */
  allowedIps: string[] | null;
}

/** Who is calling: resolved from the API key by the ApiKeyGuard. */
export interface Principal {
  workspaceId: string;
  apiKeyId: string;
  tier: TierName;
  /** Requests per minute in force for the workspace; -1 means no limit. */
  rateLimitRpm: number;
  /** An operator suspended the workspace: the ApiKeyGuard refuses its keys (403 `workspace_suspended`). */
  suspended?: boolean;
  /** The key's name when the request was made (kept on its usage record). */
  apiKeyName?: string | null;
  /** Set only when the key has a limit of its own: the common key costs nothing more per request. */
  keyLimits?: KeyLimits;
  /** `keyLimits.allowedIps` compiled, once per key lookup. */
  allowedFrom?: BlockList;
}

export interface ApiRequest extends Request {
  id: string;
  principal?: Principal;
}
