import type { TierName } from '../common/tier-name';

/** In any count or rate of the policy: no limit. */
export const UNLIMITED = -1;

const MB = 1024 * 1024;
const GB = 1024 * MB;

/** What a workspace may store for `file_search`. -1 means no limit. */
export interface DocumentLimits {
  /** Documents in the workspace, over all its assistants. */
  maxDocuments: number;
  /** Sum of the uploaded files' sizes in the workspace, in bytes. */
  maxTotalBytes: number;
}

/** Everything a tier allows. Adding a per-tier rule is a field here and a value per tier below. */
export interface TierPolicy {
  /** Requests per minute; -1 means no limit. */
  rateLimitRpm: number;
  /** Whether a workspace of the tier may be given a rate of its own (spec: "Custom rate limits"). */
  customRateAllowed: boolean;
  /** Assistants per workspace; -1 means no limit. */
  maxAssistants: number;
  removeBranding: boolean;
  documents: Readonly<DocumentLimits>;
  /**
   * How many nerfing rules (restriction rules for end users, src/limits/nerfing) a workspace
   * may have; -1 means no limit. Our choice: the spec leaves it open.
   */
  maxNerfingRules: number;
}

/** The tier table of the spec, and every rule that depends on the tier: the one place to read or change them. */
export const TIERS: Readonly<Record<TierName, Readonly<TierPolicy>>> = {
  free: {
    rateLimitRpm: 5,
    customRateAllowed: false,
    maxAssistants: 1,
    removeBranding: false,
    documents: { maxDocuments: 5, maxTotalBytes: 5 * MB },
    maxNerfingRules: 2,
  },
  hobby: {
    rateLimitRpm: 10,
    customRateAllowed: false,
    maxAssistants: 2,
    removeBranding: false,
    documents: { maxDocuments: 20, maxTotalBytes: 25 * MB },
    maxNerfingRules: 5,
  },
  pro: {
    rateLimitRpm: 60,
    customRateAllowed: false,
    maxAssistants: 10,
    removeBranding: true,
    documents: { maxDocuments: 200, maxTotalBytes: 250 * MB },
    maxNerfingRules: 20,
  },
  team: {
    rateLimitRpm: 300,
    customRateAllowed: false,
    maxAssistants: UNLIMITED,
    removeBranding: true,
    documents: { maxDocuments: 1000, maxTotalBytes: 2 * GB },
    maxNerfingRules: UNLIMITED,
  },
  enterprise: {
    rateLimitRpm: UNLIMITED,
    customRateAllowed: true,
    maxAssistants: UNLIMITED,
    removeBranding: true,
    documents: { maxDocuments: UNLIMITED, maxTotalBytes: UNLIMITED },
    maxNerfingRules: UNLIMITED,
  },
};

/** The rate in force: the workspace's own rate where its tier allows one, else the tier's. */
export function effectiveRateLimitRpm(tier: TierName, customRateLimitRpm: number | null): number {
  const policy = TIERS[tier];
  return policy.customRateAllowed && customRateLimitRpm !== null ? customRateLimitRpm : policy.rateLimitRpm;
}
