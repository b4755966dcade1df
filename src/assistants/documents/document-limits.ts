import { TIER_NAMES, TierName } from '../../common/tier-name';
import { DocumentLimits, TIERS } from '../../limits/tier-policy';

export type { DocumentLimits };

const MB = 1024 * 1024;
const GB = 1024 * MB;

/** What each tier may store: read from the tier policy (`limits/tier-policy.ts`), where the numbers live. */
export const DOCUMENT_LIMITS: Readonly<Record<TierName, Readonly<DocumentLimits>>> = Object.fromEntries(
  TIER_NAMES.map((tier) => [tier, TIERS[tier].documents]),
) as Record<TierName, DocumentLimits>;

/** The largest single file accepted, on every tier (413 above). */
export const MAX_FILE_BYTES = 20 * MB;

/** "5 MB", "2 GB", "1.5 MB", "812 KB": sizes in messages. */
export function formatBytes(bytes: number): string {
  const units: Array<[number, string]> = [
    [GB, 'GB'],
    [MB, 'MB'],
    [1024, 'KB'],
  ];
  for (const [size, unit] of units) {
    if (bytes >= size) return `${Number((bytes / size).toFixed(1))} ${unit}`;
  }
  return `${bytes} bytes`;
}
