import { ApiError } from '../common/errors/api-error';
import type { Workspace } from './entities/workspace.entity';

/** What every refused caller of a suspended workspace reads: API keys, the widget, the playground. */
export function workspaceSuspended(): ApiError {
  return ApiError.permissionDenied(
    'This workspace is suspended by the service operator: its API keys and chat widgets are refused until it is resumed. Contact the operator.',
    'workspace_suspended',
  );
}

/** Throws 403 `workspace_suspended` for a suspended workspace. */
export function assertNotSuspended(workspace: Pick<Workspace, 'status'>): void {
  if (workspace.status === 'suspended') throw workspaceSuspended();
}
