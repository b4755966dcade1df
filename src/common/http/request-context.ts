import type { Request } from 'express';
import type { TierName } from '../tier-name';

/** Who is calling: resolved from the API key by the ApiKeyGuard. */
export interface Principal {
  workspaceId: string;
  apiKeyId: string;
  tier: TierName;
  /** Requests per minute in force for the workspace; -1 means no limit. */
  rateLimitRpm: number;
  /** An operator suspended the workspace: the ApiKeyGuard refuses its keys (403 `workspace_suspended`). */
  suspended?: boolean;
}

export interface ApiRequest extends Request {
  id: string;
  principal?: Principal;
}
