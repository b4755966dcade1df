import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { isUUID } from 'class-validator';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { ApiError } from '../common/errors/api-error';
import type { TierName } from '../common/tier-name';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { normalizeEmail } from './accounts.service';
import { isLinkSecret, newLinkSecret, sha256 } from './link-secrets';
import { isRole, Membership, Role } from './entities/membership.entity';
import type { WorkspaceStatus } from '../workspaces/entities/workspace.entity';

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

const MAX_WORKSPACE_NAME_LENGTH = 100;

/**
 * Who belongs to which workspace, with which role: the memberships and invitations tables
 * (and the users', this module's too). Workspaces are WorkspacesService's to create and
 * rename. The lists a member sees (their workspaces, an invitation's workspace) still read
 * the workspace's name and tier by a join in the same statement: a join for display is
 * not ownership, and it keeps each page one indexed query instead of a query per module.
 */
@Injectable()
export class MembersService {
  constructor(
    /** Its manager runs the raw SQL and the transactions (the same pool as every repository). */
    @InjectRepository(Membership) private readonly memberships: Repository<Membership>,
    private readonly workspaces: WorkspacesService,
  ) {}

  /** The person's workspace with their role, or null when they are not a member (or the id is not a uuid). */
  async membership(userId: string, workspaceId: string): Promise<MemberWorkspace | null> {
    if (!isUUID(workspaceId)) return null;
    const rows: MemberWorkspace[] = await this.memberships.query(
      `SELECT w.id, w.name, w.tier, w.status, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 AND m.workspace_id = $2`,
      [userId, workspaceId],
    );
    return rows[0] ?? null;
  }

  /** Every workspace of the person, by name. */
  async workspacesOf(userId: string): Promise<MemberWorkspace[]> {
    return this.memberships.query(
      `SELECT w.id, w.name, w.tier, w.status, m.role FROM memberships m JOIN workspaces w ON w.id = m.workspace_id
        WHERE m.user_id = $1 ORDER BY lower(w.name), w.created_at`,
      [userId],
    );
  }

  /** A new invitation; returns the secret of its link (only its SHA-256 is stored). */
  async invite(workspaceId: string, email: string, role: string, invitedBy: string): Promise<{ id: string; token: string; email: string }> {
    if (!isRole(role)) throw ApiError.badRequest('Choose a role: member, admin or owner.', 'role', 'invalid_role');
    const address = normalizeEmail(email);
    const { secret: token, hash } = newLinkSecret();
    const rows: { id: string }[] = await this.memberships.query(
      `INSERT INTO invitations (workspace_id, email, role, token_hash, invited_by, expires_at)
       VALUES ($1, $2, $3, $4, $5, now() + $6 * interval '1 millisecond') RETURNING id`,
      [workspaceId, address, role, hash, invitedBy, INVITATION_LIFETIME_MS],
    );
    return { id: rows[0].id, token, email: address };
  }

  /** The pending, unexpired invitation of a link, or null. */
  async usableInvitation(token: string): Promise<UsableInvitation | null> {
    if (!isLinkSecret(token)) return null;
    const rows: (Omit<UsableInvitation, 'workspaceName' | 'invitedByName'> & { workspace_name: string; invited_by_name: string | null })[] =
      await this.memberships.query(
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
   * Spends an invitation for a person whose account has the invited address, verified: a link
   * that leaked (a log, a forwarded mail) is no seat for anyone else. The statement that marks
   * it accepted decides, so a link used twice at once works once. Someone already a member
   * keeps the higher of the two roles. Returns the workspace joined.
   */
  async acceptInvitation(token: string, userId: string, manager?: EntityManager): Promise<{ workspaceId: string; role: Role }> {
    const work = async (db: EntityManager) => {
      // queryRows: TypeORM answers an UPDATE with [rows, rowCount], not with the rows.
      const rows = await queryRows<{ workspace_id: string; role: Role; email: string }>(
        db,
        `UPDATE invitations i SET accepted_at = now(), accepted_by = u.id
           FROM users u
          WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
            AND u.id = $2 AND lower(u.email) = lower(i.email) AND u.email_verified_at IS NOT NULL
          RETURNING i.workspace_id, i.role, i.email`,
        [sha256(token), userId],
      );
      const invitation = rows[0];
      if (!invitation) throw await this.whyNotAccepted(db, token, userId);
      await db.query(
        `INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, $3)
         ON CONFLICT (workspace_id, user_id) DO UPDATE SET role = CASE
           WHEN array_position(ARRAY['member','admin','owner'], EXCLUDED.role) > array_position(ARRAY['member','admin','owner'], memberships.role)
           THEN EXCLUDED.role ELSE memberships.role END`,
        [invitation.workspace_id, userId, invitation.role],
      );
      return { workspaceId: invitation.workspace_id, role: invitation.role };
    };
    return manager ? work(manager) : this.memberships.manager.transaction(work);
  }

  /** Why an account could not accept an invitation: the link is spent, it is for another address, or the address is not verified. */
  private async whyNotAccepted(db: EntityManager, token: string, userId: string): Promise<ApiError> {
    const rows: { invited: string; email: string; verified: boolean }[] = await db.query(
      `SELECT i.email AS invited, u.email, u.email_verified_at IS NOT NULL AS verified
         FROM invitations i, users u
        WHERE i.token_hash = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now() AND u.id = $2`,
      [sha256(token), userId],
    );
    const row = rows[0];
    if (!row) {
      return ApiError.badRequest('This invitation is invalid, used, revoked or expired. Ask for a new one.', 'token', 'invalid_invitation');
    }
    if (row.invited.toLowerCase() !== row.email.toLowerCase()) {
      return ApiError.permissionDenied(
        `This invitation is for ${row.invited}. Sign in with that address (or create an account with it) to accept it.`,
        'invitation_for_another_address',
      );
    }
    return ApiError.permissionDenied(
      `Verify your email address ${row.email} first: the invitation is accepted by an account whose address is verified.`,
      'email_not_verified',
    );
  }

  /** The workspace's people, owners first, then by name. */
  async members(workspaceId: string): Promise<WorkspaceMember[]> {
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

  /** Invitations that can still be accepted, newest first. */
  async pendingInvitations(workspaceId: string): Promise<PendingInvitation[]> {
    return this.memberships.query(
      `SELECT i.id, i.email, i.role, u.name AS "invitedByName", i.created_at AS "createdAt", i.expires_at AS "expiresAt"
         FROM invitations i LEFT JOIN users u ON u.id = i.invited_by
        WHERE i.workspace_id = $1 AND i.accepted_at IS NULL AND i.revoked_at IS NULL AND i.expires_at > now()
        ORDER BY i.created_at DESC`,
      [workspaceId],
    );
  }

  /**
   * Invites someone who is not a member yet (a member is a `conflict` saying so). A pending
   * invitation of the same address to the same workspace is revoked: only the newest link works.
   */
  async inviteNewMember(
    workspaceId: string,
    email: string,
    role: string,
    invitedBy: string,
  ): Promise<{ id: string; token: string; email: string; replaced: boolean }> {
    const address = normalizeEmail(email);
    if (!isRole(role)) throw ApiError.badRequest('Choose a role: member, admin or owner.', 'role', 'invalid_role');
    const existing: { role: Role }[] = await this.memberships.query(
      `SELECT m.role FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND u.email = $2`,
      [workspaceId, address],
    );
    if (existing[0]) {
      throw new ApiError('conflict', `${address} is already a member of this workspace (${existing[0].role}). Change their role in the table instead.`, {
        code: 'already_member',
        param: 'email',
      });
    }
    const replaced = await queryRows(
      this.memberships.manager,
      `UPDATE invitations SET revoked_at = now()
        WHERE workspace_id = $1 AND email = $2 AND accepted_at IS NULL AND revoked_at IS NULL AND expires_at > now()
        RETURNING id`,
      [workspaceId, address],
    );
    const invitation = await this.invite(workspaceId, address, role, invitedBy);
    return { ...invitation, replaced: replaced.length > 0 };
  }

  /** Revokes a pending invitation of this workspace; another workspace's (or no) invitation is a 404. */
  async revokeInvitation(workspaceId: string, invitationId: string): Promise<{ email: string }> {
    if (!isUUID(invitationId)) throw invitationNotFound();
    const rows = await queryRows<{ email: string }>(
      this.memberships.manager,
      `UPDATE invitations SET revoked_at = COALESCE(revoked_at, now())
        WHERE id = $1 AND workspace_id = $2 AND accepted_at IS NULL
        RETURNING email`,
      [invitationId, workspaceId],
    );
    if (rows[0]) return { email: rows[0].email };
    const accepted: unknown[] = await this.memberships.query(`SELECT 1 FROM invitations WHERE id = $1 AND workspace_id = $2`, [
      invitationId,
      workspaceId,
    ]);
    if (accepted.length > 0) throw ApiError.badRequest('This invitation was already accepted.', 'invitation', 'invitation_accepted');
    throw invitationNotFound();
  }

  /**
   * Gives a member another role. `actorId` must (still) be an owner. The last owner cannot
   * be demoted: the workspace's owner rows are locked first, so two owners demoting each
   * other at once cannot leave it without one.
   */
  async changeRole(workspaceId: string, userId: string, role: string, actorId: string): Promise<{ name: string; role: Role }> {
    if (!isRole(role)) throw ApiError.badRequest('Choose a role: member, admin or owner.', 'role', 'invalid_role');
    return this.withOwnersLocked(workspaceId, userId, actorId, async (db, target, owners) => {
      if (target.role === 'owner' && role !== 'owner' && owners.length === 1) {
        throw lastOwner(target.userId === actorId ? 'You are the only owner: make someone else an owner before you change your own role.' : undefined);
      }
      await db.query(`UPDATE memberships SET role = $3 WHERE workspace_id = $1 AND user_id = $2`, [workspaceId, userId, role]);
      return { name: target.name, role };
    });
  }

  /** Removes a member (an owner's act); the last owner cannot be removed. */
  async removeMember(workspaceId: string, userId: string, actorId: string): Promise<{ name: string }> {
    return this.withOwnersLocked(workspaceId, userId, actorId, async (db, target, owners) => {
      if (target.role === 'owner' && owners.length === 1) throw lastOwner();
      await db.query(`DELETE FROM memberships WHERE workspace_id = $1 AND user_id = $2`, [workspaceId, userId]);
      return { name: target.name };
    });
  }

  /** The person leaves the workspace; its last owner cannot. */
  async leave(workspaceId: string, userId: string): Promise<void> {
    await this.withOwnersLocked(workspaceId, userId, null, async (db, target, owners) => {
      if (target.role === 'owner' && owners.length === 1) {
        throw lastOwner('You are the only owner: make someone else an owner first, then leave.');
      }
      await db.query(`DELETE FROM memberships WHERE workspace_id = $1 AND user_id = $2`, [workspaceId, userId]);
    });
  }

  /** Renames a workspace (an owner's act). */
  async renameWorkspace(workspaceId: string, name: string): Promise<string> {
    const normalized = normalizeWorkspaceName(name);
    if (!(await this.workspaces.rename(workspaceId, normalized))) throw ApiError.notFound('No such workspace.', 'workspace_not_found');
    return normalized;
  }

  /**
   * A new workspace (no credit, no API key) with the person as its owner, in one transaction.
   */
  async createWorkspaceFor(userId: string, name: string, tier: TierName): Promise<{ id: string; name: string }> {
    const normalized = normalizeWorkspaceName(name);
    return this.memberships.manager.transaction(async (manager) => {
      const { workspace } = await this.workspaces.create({ name: normalized, tier, withApiKey: false }, manager);
      await manager.query(`INSERT INTO memberships (workspace_id, user_id, role) VALUES ($1, $2, 'owner')`, [workspace.id, userId]);
      return { id: workspace.id, name: workspace.name };
    });
  }

  /**
   * Runs `work` in a transaction holding the row locks of the workspace's owners (taken in
   * one order, so concurrent callers queue instead of deadlocking), with the target's
   * membership as it is now. A target outside the workspace is a 404; an actor who is no
   * longer an owner is refused.
   */
  private async withOwnersLocked<T>(
    workspaceId: string,
    userId: string,
    actorId: string | null,
    work: (db: EntityManager, target: { userId: string; name: string; role: Role }, owners: string[]) => Promise<T>,
  ): Promise<T> {
    if (!isUUID(userId)) throw memberNotFound();
    return this.memberships.manager.transaction(async (db) => {
      const ownerRows: { user_id: string }[] = await db.query(
        `SELECT user_id FROM memberships WHERE workspace_id = $1 AND role = 'owner' ORDER BY user_id FOR UPDATE`,
        [workspaceId],
      );
      const owners = ownerRows.map((row) => row.user_id);
      if (actorId !== null && !owners.includes(actorId)) {
        throw ApiError.permissionDenied('You are no longer an owner of this workspace.', 'not_owner');
      }
      const targets: { userId: string; name: string; role: Role }[] = await db.query(
        `SELECT m.user_id AS "userId", u.name, m.role FROM memberships m JOIN users u ON u.id = m.user_id
          WHERE m.workspace_id = $1 AND m.user_id = $2 FOR UPDATE OF m`,
        [workspaceId, userId],
      );
      if (!targets[0]) throw memberNotFound();
      return work(db, targets[0], owners);
    });
  }
}

/** Trimmed, spaces collapsed, 1 to 100 characters. */
export function normalizeWorkspaceName(name: string): string {
  const normalized = String(name ?? '').trim().replace(/\s+/g, ' ');
  if (!normalized) throw ApiError.badRequest('Enter a name for the workspace.', 'name', 'invalid_name');
  if (normalized.length > MAX_WORKSPACE_NAME_LENGTH) {
    throw ApiError.badRequest(`Use at most ${MAX_WORKSPACE_NAME_LENGTH} characters for the name.`, 'name', 'invalid_name');
  }
  return normalized;
}

function lastOwner(message = 'A workspace needs an owner: make someone else an owner first.'): ApiError {
  return ApiError.badRequest(message, undefined, 'last_owner');
}

function memberNotFound(): ApiError {
  return ApiError.notFound('No such member in this workspace.', 'member_not_found');
}

function invitationNotFound(): ApiError {
  return ApiError.notFound('No such invitation in this workspace.', 'invitation_not_found');
}
