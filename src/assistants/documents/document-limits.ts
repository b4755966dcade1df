import { TierName, UNLIMITED } from '../../workspaces/tiers';

/** What a workspace may store for `file_search`, per tier. -1 means no limit. */
export interface DocumentLimits {
  /** Documents in the workspace, over all its assistants. */
  maxDocuments: number;
  /** Sum of the uploaded files' sizes in the workspace, in bytes. */
  maxTotalBytes: number;
}

const MB = 1024 * 1024;
const GB = 1024 * MB;

export const DOCUMENT_LIMITS: Readonly<Record<TierName, Readonly<DocumentLimits>>> = {
  free: { maxDocuments: 5, maxTotalBytes: 5 * MB },
  hobby: { maxDocuments: 20, maxTotalBytes: 25 * MB },
  pro: { maxDocuments: 200, maxTotalBytes: 250 * MB },
  team: { maxDocuments: 1000, maxTotalBytes: 2 * GB },
  enterprise: { maxDocuments: UNLIMITED, maxTotalBytes: UNLIMITED },
};

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
