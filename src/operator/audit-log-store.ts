import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { DataSource, EntityManager } from 'typeorm';
import type { AuditEntry, OperatorAction } from './audit-log';

/** An entry of the audit log as the console lists it, with its workspace's name. */
export interface AuditLogRow {
  id: string;
  operator_email: string;
  action: OperatorAction;
  workspace_id: string | null;
  workspace_name: string | null;
  before: Record<string, unknown> | null;
  after: Record<string, unknown> | null;
  reason: string | null;
  at: Date;
}

/** The statements on operator_audit_log: entries are appended in the transaction of the change they record, and listed newest first. */
@Injectable()
export class AuditLogStore {
  constructor(@InjectDataSource() private readonly db: DataSource) {}

  /** One row, in the caller's transaction: it commits with the change it records, or neither does. */
  async append(manager: EntityManager, entry: AuditEntry): Promise<void> {
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

  /** Up to `limit` entries, newest first, one workspace's (or everyone's when null), older than the entry `after` (when not null). */
  page(workspaceId: string | null, after: string | null, limit: number): Promise<AuditLogRow[]> {
    return this.db.query(
      `SELECT a.id, a.operator_email, a.action, a.workspace_id, w.name AS workspace_name, a.before, a.after, a.reason, a.at
         FROM operator_audit_log a
         LEFT JOIN workspaces w ON w.id = a.workspace_id
        WHERE ($1::uuid IS NULL OR a.workspace_id = $1)
          AND ($2::uuid IS NULL OR (a.at, a.id) < (SELECT at, id FROM operator_audit_log WHERE id = $2))
        ORDER BY a.at DESC, a.id DESC
        LIMIT $3`,
      [workspaceId, after, limit],
    );
  }
}
