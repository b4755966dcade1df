import { DOCUMENT_LIMITS, formatBytes, MAX_FILE_BYTES } from '../../assistants/documents/document-limits';
import type { Workspace } from '../../workspaces/entities/workspace.entity';
import { effectiveRateLimitRpm, TIERS, UNLIMITED } from '../../limits/tier-policy';

/** One line of the read-only "Tier and limits" list. */
export interface LimitLine {
  label: string;
  value: string;
}

/** What a workspace's tier allows, in words: the effective rate (an enterprise rate of its own included). */
export function tierLimits(workspace: Pick<Workspace, 'tier' | 'customRateLimitRpm'>): LimitLine[] {
  const tier = TIERS[workspace.tier];
  const documents = DOCUMENT_LIMITS[workspace.tier];
  const rpm = effectiveRateLimitRpm(workspace.tier, workspace.customRateLimitRpm);
  const custom = tier.customRateAllowed && workspace.customRateLimitRpm !== null;
  const count = (n: number) => (n === UNLIMITED ? 'No limit' : n.toLocaleString('en-US'));
  return [
    { label: 'Requests per minute', value: `${count(rpm)}${custom ? ' (a rate of its own)' : ''}` },
    { label: 'Assistants', value: count(tier.maxAssistants) },
    { label: 'Documents', value: count(documents.maxDocuments) },
    { label: 'Document storage', value: documents.maxTotalBytes === UNLIMITED ? 'No limit' : formatBytes(documents.maxTotalBytes) },
    { label: 'Largest document', value: formatBytes(MAX_FILE_BYTES) },
    { label: 'Branding', value: tier.removeBranding ? 'Can be removed' : 'Shown' },
    { label: 'Nerfing rules (Settings, Limits)', value: count(tier.maxNerfingRules) },
  ];
}
