import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import type { TierName } from '../common/tier-name';
import type { WorkspaceStatus } from '../workspaces/entities/workspace.entity';
import { Membership, Role } from './entities/membership.entity';

/** A workspace as one of its members sees it. */
export interface MemberWorkspace {
  id: string;
  name: string;
  tier: TierName;
  /** `suspended`: every page of the workspace shows a banner saying so. */
  status: WorkspaceStatus;
  role: Role;
}

/** A person in a workspace's member list. */
export interface WorkspaceMember {
  userId: string;
  name: string;
  email: string;
  role: Role;
  joinedAt: Date;
}

/** An invitation not yet accepted, revoked or expired. */
export interface PendingInvitation {
  id: string;
  email: string;
  role: Role;
  invitedByName: string | null;
  createdAt: Date;
  expiresAt: Date;
}

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

export interface NewInvitation {
  workspaceId: string;
  /** Normalized. */
  email: string;
  role: Role;
  /** SHA-256 of the link's secret. */
  tokenHash: string;
  invitedBy: string;
  lifetimeMs: number;
}

/** A member whose row is locked, as a change of role or a removal reads it. */
export interface LockedMember {
  userId: string;
  name: string;
  role: Role;
}

/** Why a pending invitation was not accepted by an account: the invited address and the account's. */
export interface InvitationMismatch {
  invited: string;
  email: string;
  verified: boolean;
}

/**
 * The statements on the memberships and invitations tables (the users' name and address are
 * read by a join for display). MembersService holds the rules; the methods that take a
 * manager run in the caller's transaction (`transaction`), the others on the pool.
 * An invitation is found by the SHA-256 of its link's secret, never by the secret.
 */
@Injectable()
export class MembersStore {
  constructor(@InjectRepository(Membership) private readonly memberships: Repository<Membership>) {}

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return this.memberships.manager.transaction(work);
  }

  async membership(userId: string, workspaceId: string): Promise<MemberWorkspace | null> {
    const rows: MemberWorkspace[] = await this.memberships.query(
      `SELECT w.id, w.name, w.tier, w.status, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 AND m.workspace_id = $2`,
      [userId, workspaceId],
    );
    return rows[0] ?? null;
  }

  /** By name. */
  workspacesOf(userId: string): Promise<MemberWorkspace[]> {
    return this.memberships.query(
      `SELECT w.id, w.name, w.tier, w.status, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 ORDER BY lower(w.name), w.created_at`,
      [userId],
    );
  }

  /** Owners first, then by name. */
  members(workspaceId: string): Promise<WorkspaceMember[]> {
    return this.memberships.query(
      `SELECT u.id AS "userId", u.name, u.email, m.role, m.created_at AS "joinedAt"
         FROM memberships m JOIN users u ON u.id = m.user_id
        WHERE m.workspace_id = $1
        ORDER BY array_position(ARRAY['owner','admin','member'], m.role), lower(u.name), u.email`,
      [workspaceId],
    );
  }

  async ownerCount(workspaceId: string): Promise<number> {
    const rows: { count: number }[] = await this.memberships.query(
      `SELECT count(*)::int AS count FROM memberships WHERE workspace_id = $1 AND role = 'owner'`,
      [workspaceId],
    );
    return rows[0].count;
  }

  /** The role of the member with this (normalized) address, or null when none has it. */
  async roleOfAddress(workspaceId: string, email: string): Promise<Role | null> {
    const rows: { role: Role }[] = await this.memberships.query(
      `SELECT m.role FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND u.email = $2`,
      [workspaceId, email],
    );
    return rows[0]?.role ?? null;
  }

  /** A member, in the workspace of the owner who creates it. */
  async addOwner(db: EntityManager, workspaceId: string, userId: string): Promise<void> {
    await db.query(`INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, [workspaceId, userId]);
  }

  /** Adds the member; one already there keeps the higher of the two roles. */
  async addOrPromote(db: EntityManager, workspaceId: string, userId: string, role: Role): Promise<void> {
    await db.query(
      `INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, $3)
       ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = CASE
         WHEN array_position(ARRAY['member','admin','owner'], EXCLUDED.role) > array_position(ARRAY['member','admin','owner'], memberships.role)
         THEN EXCLUDED.role ELSE memberships.role END`,
      [workspaceId, userId, role],
    );
  }

  /** The ids of the workspace's owners, their rows locked in one order (concurrent callers queue instead of deadlocking). */
  async lockOwners(db: EntityManager, workspaceId: string): Promise<string[]> {
    const rows: { user_id: string }[] = await db.query(
      `SELECT user_id FROM memberships WHERE workspace_id = $1 AND role = 'owner' ORDER BY user_id FOR UPDATE`,
      [workspaceId],
    );
    return rows.map((row) => row.user_id);
  }

  /** The member's row, locked; null when the person is not a member. */
  async lockMember(db: EntityManager, workspaceId: string, userId: string): Promise<LockedMember | null> {
    const rows: LockedMember[] = await db.query(
      `SELECT m.user_id AS "userId", u.name, m.role FROM memberships m JOIN users u ON u.id = m.user_id
        WHERE m.workspace_id = $1 AND m.user_id = $2 FOR UPDATE OF m`,
      [workspaceId, userId],
    );
    return rows[0] ?? null;
  }

  async setRole(db: EntityManager, workspaceId: string, userId: string, role: Role): Promise<void> {
    await db.query(`UPDATE memberships SET role = $3 WHERE workspace_id = $1 AND user_id = $2`, [workspaceId, userId, role]);
  }

  async remove(db: EntityManager, workspaceId: string, userId: string): Promise<void> {
    await db.query(`DELETE FROM memberships WHERE workspace_id = $1 AND user_id = $2`, [workspaceId, userId]);
  }

  /** Stores a pending invitation that expires after `lifetimeMs`; returns its id. */
  async insertInvitation(invitation: NewInvitation): Promise<string> {
    const rows: { id: string }[] = await this.memberships.query(
      `INSERT INTO invitations (workspace_id, email, role, token_hash, invited_by, expires_at)
       VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond') RETURNING id`,
      [invitation.workspaceId, invitation.email, invitation.role, invitation.tokenHash, invitation.invitedBy, invitation.lifetimeMs],
    );
    return rows[0].id;
  }

  /** The pending, unexpired invitation of a link, or null. */
  async usableInvitation(tokenHash: string): Promise<UsableInvitation | null> {
    const rows: (Omit<UsableInvitation, 'workspaceName' | 'invitedByName'> & { workspace_name: string; invited_by_name: string | null })[] =
      await this.memberships.query(
        `SELECT i.id, i.workspace_id AS "workspaceId", w.name AS workspace_name, i.email, i.role,
                u.name AS invited_by_name, i.expires_at AS "expiresAt"
           FROM invitations i JOIN workspaces w ON w.id = i.workspace_id LEFT JOIN users u ON u.id = i.invited_by
          WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()`,
        [tokenHash],
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

  /** Invitations that can still be accepted, newest first. */
  pendingInvitations(workspaceId: string): Promise<PendingInvitation[]> {
    return this.memberships.query(
      `SELECT i.id, i.email, i.role, u.name AS "invitedByName", i.created_at AS "createdAt", i.expires_at AS "expiresAt"
         FROM invitations i LEFT JOIN users u ON u.id = i.invited_by
        WHERE i.workspace_id = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
        ORDER BY i.created_at DESC`,
      [workspaceId],
    );
  }

  /**
   * Marks the pending invitation accepted by the account, when the account has the invited
   * address, verified; null otherwise. This statement decides, so a link used twice at once works once.
   */
  async markAccepted(db: EntityManager, tokenHash: string, userId: string): Promise<{ workspaceId: string; role: Role } | null> {
    // queryRows: TypeORM answers an UPDATE with [rows, rowCount], not with the rows.
    const rows = await queryRows<{ workspace_id: string; role: Role; email: string }>(
      db,
      `UPDATE invitations i SET accepted_at = now(), accepted_by = u.id
         FROM users u
        WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
          AND u.id = $2 AND lower(u.email) = lower(i.email) AND u.email_verified_at IS NOT NULL
        RETURNING i.workspace_id, i.role, i.email`,
      [tokenHash, userId],
    );
    return rows[0] ? { workspaceId: rows[0].workspace_id, role: rows[0].role } : null;
  }

  /** The pending invitation's address beside the account's, or null when the link is not pending. */
  async invitationMismatch(db: EntityManager, tokenHash: string, userId: string): Promise<InvitationMismatch | null> {
    const rows: InvitationMismatch[] = await db.query(
      `SELECT i.email AS invited, u.email, u.email_verified_at IS NOT NULL AS verified
         FROM invitations i, users u
        WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now() AND u.id = $2`,
      [tokenHash, userId],
    );
    return rows[0] ?? null;
  }

  /** Revokes the pending invitations of this address to this workspace; returns how many. */
  async revokePendingOf(workspaceId: string, email: string): Promise<number> {
    const rows = await queryRows(
      this.memberships.manager,
      `UPDATE invitations SET revoked_at = now()
        WHERE workspace_id = $1 AND email = $2 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()
        RETURNING id`,
      [workspaceId, email],
    );
    return rows.length;
  }

  /** Revokes an invitation not accepted yet (again is no error); null when the workspace has no such invitation, or it was accepted. */
  async revokeInvitation(workspaceId: string, invitationId: string): Promise<{ email: string } | null> {
    const rows = await queryRows<{ email: string }>(
      this.memberships.manager,
      `UPDATE invitations SET revoked_at = COALESCE(revoked_at, now())
        WHERE id = $1 AND workspace_id = $2 AND accepted_at IS NULL
        RETURNING email`,
      [invitationId, workspaceId],
    );
    return rows[0] ? { email: rows[0].email } : null;
  }

  async hasInvitation(workspaceId: string, invitationId: string): Promise<boolean> {
    const rows: unknown[] = await this.memberships.query(`SELECT 1 FROM invitations WHERE id = $1 AND workspace_id = $2`, [invitationId, workspaceId]);
    return rows.length > 0;
  }
}
