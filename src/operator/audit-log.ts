/** What an operator did, as the audit log keeps it. */
export type OperatorAction =
  | 'set_tier'
  | 'adjust_balance'
  | 'suspend'
  | 'resume'
  | 'operator_grant'
  | 'operator_revoke';

/** The operator who acts: a dashboard account, or the CLI (`id` null, `email` 'cli'). */
export interface Actor {
  id: string | null;
  email: string;
}

export interface AuditEntry {
  operator: Actor;
  action: OperatorAction;
  workspaceId: string | null;
  before: object | null;
  after: object | null;
  reason: string | null;
}
