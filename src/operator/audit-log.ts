import type { EntityManager } from 'typeorm';

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

/** One row of operator_audit_log, in the caller's transaction: it commits with the change it records, or neither does. */
export async function writeAuditEntry(manager: EntityManager, entry: AuditEntry): Promise<void> {
  await manager.query(
    `INSERT INTO operator_audit_log (operator_id, operator_email, action, workspace_id, before, after, reason)
     VALUES ($1, $2, $3, $4, $5, $6, $7)`,
    [
      entry.operator.id,
      entry.operator.email,
      entry.action,
      entry.workspaceId,
      entry.before === null ? null : JSON.stringify(entry.before),
      entry.after === null ? null : JSON.stringify(entry.after),
      entry.reason,
    ],
  );
}
