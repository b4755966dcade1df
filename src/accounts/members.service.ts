import { Injectable } from '@nestjs/common';
import { isUUID } from 'class-validator';
import { EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import type { TierName } from '../common/tier-name';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { normalizeEmail } from './accounts.service';
import { isLinkSecret, newLinkSecret, sha256 } from './link-secrets';
import { isRole, Role } from './entities/membership.entity';
import { LockedMember, MembersStore, MemberWorkspace, PendingInvitation, UsableInvitation, WorkspaceMember } from './members-store';

export type { MemberWorkspace, PendingInvitation, UsableInvitation, WorkspaceMember } from './members-store';

/** How long an invitation link can be used. */
export const INVITATION_LIFETIME_MS = 7 * 24 * 3_600_000;

const MAX_WORKSPACE_NAME_LENGTH = 100;

/**
 * Who belongs to which workspace, with which role: the rules of memberships and invitations
 * (their statements are MembersStore's). Workspaces are WorkspacesService's to create and
 * rename. The lists a member sees (their workspaces, an invitation's workspace) still read
 * the workspace's name and tier by a join in the same statement: a join for display is
 * not ownership, and it keeps each page one indexed query instead of a query per module.
 */
@Injectable()
export class MembersService {
  constructor(
    private readonly store: MembersStore,
    private readonly workspaces: WorkspacesService,
  ) {}

  /** The person's workspace with their role, or null when they are not a member (or the id is not a uuid). */
  async membership(userId: string, workspaceId: string): Promise<MemberWorkspace | null> {
    if (!isUUID(workspaceId)) return null;
    return this.store.membership(userId, workspaceId);
  }

  /** Every workspace of the person, by name. */
  async workspacesOf(userId: string): Promise<MemberWorkspace[]> {
    return this.store.workspacesOf(userId);
  }

  /** A new invitation; returns the secret of its link (only its SHA-256 is stored). */
  async invite(workspaceId: string, email: string, role: string, invitedBy: string): Promise<{ id: string; token: string; email: string }> {
    if (!isRole(role)) throw ApiError.badRequest('Choose a role: member, admin or owner.', 'role', 'invalid_role');
    const address = normalizeEmail(email);
    const { secret: token, hash } = newLinkSecret();
    const id = await this.store.insertInvitation({
      workspaceId,
      email: address,
      role,
      tokenHash: hash,
      invitedBy,
      lifetimeMs: INVITATION_LIFETIME_MS,
    });
    return { id, token, email: address };
  }

  /** The pending, unexpired invitation of a link, or null. */
  async usableInvitation(token: string): Promise<UsableInvitation | null> {
    if (!isLinkSecret(token)) return null;
    return this.store.usableInvitation(sha256(token));
  }

  /**
   * Spends an invitation for a person whose account has the invited address, verified: a link
   * that leaked (a log, a forwarded mail) is no seat for anyone else. The statement that marks
   * it accepted decides, so a link used twice at once works once. Someone already a member
   * keeps the higher of the two roles. Returns the workspace joined.
   */
  async acceptInvitation(token: string, userId: string, manager?: EntityManager): Promise<{ workspaceId: string; role: Role }> {
    const work = async (db: EntityManager) => {
      const invitation = await this.store.markAccepted(db, sha256(token), userId);
      if (!invitation) throw await this.whyNotAccepted(db, token, userId);
      await this.store.addOrPromote(db, invitation.workspaceId, userId, invitation.role);
      return invitation;
    };
    return manager ? work(manager) : this.store.transaction(work);
  }

  /** Why an account could not accept an invitation: the link is spent, it is for another address, or the address is not verified. */
  private async whyNotAccepted(db: EntityManager, token: string, userId: string): Promise<ApiError> {
    const row = await this.store.invitationMismatch(db, sha256(token), userId);
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
    return this.store.members(workspaceId);
  }

  async ownerCount(workspaceId: string): Promise<number> {
    return this.store.ownerCount(workspaceId);
  }

  /** Invitations that can still be accepted, newest first. */
  async pendingInvitations(workspaceId: string): Promise<PendingInvitation[]> {
    return this.store.pendingInvitations(workspaceId);
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
    const existing = await this.store.roleOfAddress(workspaceId, address);
    if (existing) {
      throw new ApiError('conflict', `${address} is already a member of this workspace (${existing}). Change their role in the table instead.`, {
        code: 'already_member',
        param: 'email',
      });
    }
    const replaced = await this.store.revokePendingOf(workspaceId, address);
    const invitation = await this.invite(workspaceId, address, role, invitedBy);
    return { ...invitation, replaced: replaced > 0 };
  }

  /** Revokes a pending invitation of this workspace; another workspace's (or no) invitation is a 404. */
  async revokeInvitation(workspaceId: string, invitationId: string): Promise<{ email: string }> {
    if (!isUUID(invitationId)) throw invitationNotFound();
    const revoked = await this.store.revokeInvitation(workspaceId, invitationId);
    if (revoked) return revoked;
    if (await this.store.hasInvitation(workspaceId, invitationId)) {
      throw ApiError.badRequest('This invitation was already accepted.', 'invitation', 'invitation_accepted');
    }
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
      await this.store.setRole(db, workspaceId, userId, role);
      return { name: target.name, role };
    });
  }

  /** Removes a member (an owner's act); the last owner cannot be removed. */
  async removeMember(workspaceId: string, userId: string, actorId: string): Promise<{ name: string }> {
    return this.withOwnersLocked(workspaceId, userId, actorId, async (db, target, owners) => {
      if (target.role === 'owner' && owners.length === 1) throw lastOwner();
      await this.store.remove(db, workspaceId, userId);
      return { name: target.name };
    });
  }

  /** The person leaves the workspace; its last owner cannot. */
  async leave(workspaceId: string, userId: string): Promise<void> {
    await this.withOwnersLocked(workspaceId, userId, null, async (db, target, owners) => {
      if (target.role === 'owner' && owners.length === 1) {
        throw lastOwner('You are the only owner: make someone else an owner first, then leave.');
      }
      await this.store.remove(db, workspaceId, userId);
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
    return this.store.transaction(async (manager) => {
      const { workspace } = await this.workspaces.create({ name: normalized, tier, withApiKey: false }, manager);
      await this.store.addOwner(manager, workspace.id, userId);
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
    work: (db: EntityManager, target: LockedMember, owners: string[]) => Promise<T>,
  ): Promise<T> {
    if (!isUUID(userId)) throw memberNotFound();
    return this.store.transaction(async (db) => {
      const owners = await this.store.lockOwners(db, workspaceId);
      if (actorId !== null && !owners.includes(actorId)) {
        throw ApiError.permissionDenied('You are no longer an owner of this workspace.', 'not_owner');
      }
      const target = await this.store.lockMember(db, workspaceId, userId);
      if (!target) throw memberNotFound();
      return work(db, target, owners);
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
