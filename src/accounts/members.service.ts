import { Injectable } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { randomBytes } from 'node:crypto';
import { DataSource, EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import type { TierName } from '../workspaces/tiers';
import { normalizeEmail, sha256 } from './accounts.service';
import { isRole, Role } from './entities/membership.entity';

/** How long an invitation link can be used. */
export const INVITATION_LIFETIME_MS = 7 * 24 * 3_600_000;

/** A pending invitation as its link shows it. */
export interface UsableInvitation {
  id: string;
  workspaceId: string;
  workspaceName: string;
  email: string;
  role: Role;
  invitedByName: string | null;
  expiresAt: Date;
}

/** A workspace as one of its members sees it. */
export interface MemberWorkspace {
  id: string;
  name: string;
  tier: TierName;
  role: Role;
}

/** Who belongs to which workspace, with which role. */
@Injectable()
export class MembersService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The person's workspace with their role, or null when they are not a member (or the id is not a uuid). */
  async membership(userId: string, workspaceId: string): Promise<MemberWorkspace | null> {
    if (!isUUID(workspaceId)) return null;
    const rows: MemberWorkspace[] = await this.dataSource.query(
      `SELECT w.id, w.name, w.tier, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 AND m.workspace_id = $2`,
      [userId, workspaceId],
    );
    return rows[0] ?? null;
  }

  /** Every workspace of the person, by name. */
  async workspacesOf(userId: string): Promise<MemberWorkspace[]> {
    return this.dataSource.query(
      `SELECT w.id, w.name, w.tier, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 ORDER BY lower(w.name), w.created_at`,
      [userId],
    );
  }

  /** A new invitation; returns the secret of its link (only its SHA-256 is stored). */
  async invite(workspaceId: string, email: string, role: string, invitedBy: string): Promise<{ id: string; token: string; email: string }> {
    if (!isRole(role)) throw ApiError.badRequest('Choose a role: member, admin or owner.', 'role', 'invalid_role');
    const address = normalizeEmail(email);
    const token = randomBytes(32).toString('base64url');
    const rows: { id: string }[] = await this.dataSource.query(
      `INSERT INTO invitations (workspace_id, email, role, token_hash, invited_by, expires_at)
       VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond') RETURNING id`,
      [workspaceId, address, role, sha256(token), invitedBy, INVITATION_LIFETIME_MS],
    );
    return { id: rows[0].id, token, email: address };
  }

  /** The pending, unexpired invitation of a link, or null. */
  async usableInvitation(token: string): Promise<UsableInvitation | null> {
    if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return null;
    const rows: (Omit<UsableInvitation, 'workspaceName' | 'invitedByName'> & { workspace_name: string; invited_by_name: string | null })[] =
      await this.dataSource.query(
        `SELECT i.id, i.workspace_id AS "workspaceId", w.name AS workspace_name, i.email, i.role,
                u.name AS invited_by_name, i.expires_at AS "expiresAt"
           FROM invitations i JOIN workspaces w ON w.id = i.workspace_id LEFT JOIN users u ON u.id = i.invited_by
          WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()`,
        [sha256(token)],
      );
    const row = rows[0];
    if (!row) return null;
    return {
      id: row.id,
      workspaceId: row.workspaceId,
      workspaceName: row.workspace_name,
      email: row.email,
      role: row.role,
      invitedByName: row.invited_by_name,
      expiresAt: row.expiresAt,
    };
  }

  /**
   * Spends an invitation for a person: the statement that marks it accepted decides, so a
   * link used twice at once works once. Someone already a member keeps the higher of the two roles.
   * Returns the workspace joined.
   */
  async acceptInvitation(token: string, userId: string, manager?: EntityManager): Promise<{ workspaceId: string; role: Role }> {
    const work = async (db: EntityManager) => {
      const rows: { workspace_id: string; role: Role }[] = await db.query(
        `UPDATE invitations SET accepted_at = now(), accepted_by = $2
          WHERE token_hash = $1 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()
          RETURNING workspace_id, role`,
        [sha256(token), userId],
      );
      const invitation = rows[0];
      if (!invitation) {
        throw ApiError.badRequest('This invitation is invalid, used, revoked or expired. Ask for a new one.', 'token', 'invalid_invitation');
      }
      await db.query(
        `INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = CASE
           WHEN array_position(ARRAY['member','admin','owner'], EXCLUDED.role) > array_position(ARRAY['member','admin','owner'], memberships.role)
           THEN EXCLUDED.role ELSE memberships.role END`,
        [invitation.workspace_id, userId, invitation.role],
      );
      return { workspaceId: invitation.workspace_id, role: invitation.role };
    };
    return manager ? work(manager) : this.dataSource.transaction(work);
  }
}
