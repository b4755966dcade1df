import type { EntityManager } from 'typeorm';
import type { WorkspacesService } from '../workspaces/workspaces.service';
import type { Role } from './entities/membership.entity';
import type { InvitationMismatch, LockedMember, MembersStore, NewInvitation } from './members-store';
import { MembersService } from './members.service';
import { refusal, unused } from '../../test/support/fake-store';

const WORKSPACE = '6f1d3c0e-0000-4000-8000-000000000001';
const ANA = '6f1d3c0e-0000-4000-8000-00000000000a';
const BEN = '6f1d3c0e-0000-4000-8000-00000000000b';

/** Transactions as far as the rules see them: an opaque manager the fake store receives back. */
const TX = {} as EntityManager;

/** One workspace's memberships and invitations in memory; what the statements would do, without SQL. */
class FakeMembersStore implements Pick<MembersStore, keyof MembersStore> {
  readonly roles = new Map<string, Role>();
  readonly names = new Map<string, string>();
  readonly invitations: NewInvitation[] = [];
  revoked = 0;
  /** What `invitationMismatch` answers for a link that `markAccepted` refused. */
  mismatch: InvitationMismatch | null = null;

  constructor(members: [userId: string, name: string, role: Role][]) {
    for (const [userId, name, role] of members) {
      this.roles.set(userId, role);
      this.names.set(userId, name);
    }
  }

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return work(TX);
  }
  async lockOwners(): Promise<string[]> {
    return [...this.roles].filter(([, role]) => role === 'owner').map(([userId]) => userId);
  }
  async lockMember(_db: EntityManager, _workspaceId: string, userId: string): Promise<LockedMember | null> {
    const role = this.roles.get(userId);
    return role ? { userId, name: this.names.get(userId)!, role } : null;
  }
  async setRole(_db: EntityManager, _workspaceId: string, userId: string, role: Role): Promise<void> {
    this.roles.set(userId, role);
  }
  async remove(_db: EntityManager, _workspaceId: string, userId: string): Promise<void> {
    this.roles.delete(userId);
  }
  async roleOfAddress(_workspaceId: string, email: string): Promise<Role | null> {
    const userId = [...this.names].find(([, name]) => `${name.toLowerCase()}@example.com` === email)?.[0];
    return userId ? (this.roles.get(userId) ?? null) : null;
  }
  async revokePendingOf(): Promise<number> {
    this.revoked += 1;
    return 0;
  }
  async insertInvitation(invitation: NewInvitation): Promise<string> {
    this.invitations.push(invitation);
    return `invitation-${this.invitations.length}`;
  }
  async markAccepted(): Promise<null> {
    return null;
  }
  async invitationMismatch(): Promise<InvitationMismatch | null> {
    return this.mismatch;
  }
  async ownerCount(): Promise<number> {
    return (await this.lockOwners()).length;
  }
  // Reads the rules below do not use.
  membership = unused;
  workspacesOf = unused;
  members = unused;
  addOwner = unused;
  addOrPromote = unused;
  usableInvitation = unused;
  pendingInvitations = unused;
  revokeInvitation = unused;
  hasInvitation = unused;
}

function service(store: FakeMembersStore): MembersService {
  return new MembersService(store as unknown as MembersStore, {} as WorkspacesService);
}

describe('MembersService rules (with a store in memory)', () => {
  it('the only owner cannot demote themselves, leave or be removed; with a second owner they can', async () => {
    const store = new FakeMembersStore([
      [ANA, 'Ana', 'owner'],
      [BEN, 'Ben', 'admin'],
    ]);
    const members = service(store);

    const demote = await refusal(members.changeRole(WORKSPACE, ANA, 'member', ANA));
    expect([demote.status, demote.code]).toEqual([400, 'last_owner']);
    expect(demote.message).toMatch(/only owner/);
    expect((await refusal(members.leave(WORKSPACE, ANA))).code).toBe('last_owner');
    expect((await refusal(members.removeMember(WORKSPACE, ANA, ANA))).code).toBe('last_owner');
    expect(store.roles.get(ANA)).toBe('owner');

    await expect(members.changeRole(WORKSPACE, BEN, 'owner', ANA)).resolves.toEqual({ name: 'Ben', role: 'owner' });
    await expect(members.changeRole(WORKSPACE, ANA, 'member', BEN)).resolves.toEqual({ name: 'Ana', role: 'member' });
    expect(Object.fromEntries(store.roles)).toEqual({ [ANA]: 'member', [BEN]: 'owner' });
  });

  it('an actor who is no longer an owner changes nothing; an unknown member is a 404', async () => {
    const store = new FakeMembersStore([
      [ANA, 'Ana', 'owner'],
      [BEN, 'Ben', 'admin'],
    ]);
    const members = service(store);

    const notOwner = await refusal(members.removeMember(WORKSPACE, ANA, BEN));
    expect([notOwner.status, notOwner.code]).toEqual([403, 'not_owner']);
    expect(store.roles.get(ANA)).toBe('owner');
    const unknown = await refusal(members.changeRole(WORKSPACE, '6f1d3c0e-0000-4000-8000-0000000000ff', 'admin', ANA));
    expect([unknown.status, unknown.code]).toEqual([404, 'member_not_found']);
    expect((await refusal(members.changeRole(WORKSPACE, 'not-a-uuid', 'admin', ANA))).code).toBe('member_not_found');
  });

  it('inviting a member is a conflict naming the email; it neither revokes nor writes an invitation', async () => {
    const store = new FakeMembersStore([[ANA, 'Ana', 'owner']]);
    const members = service(store);

    const conflict = await refusal(members.inviteNewMember(WORKSPACE, ' ANA@example.com ', 'admin', ANA));
    expect([conflict.status, conflict.code, conflict.param]).toEqual([409, 'already_member', 'email']);
    expect([store.revoked, store.invitations.length]).toEqual([0, 0]);

    const invited = await members.inviteNewMember(WORKSPACE, 'Cleo@Example.com', 'member', ANA);
    expect(invited).toMatchObject({ email: 'cleo@example.com', replaced: false });
    expect(store.invitations).toEqual([expect.objectContaining({ email: 'cleo@example.com', role: 'member', invitedBy: ANA })]);
    expect(store.invitations[0].tokenHash).not.toBe(invited.token);
  });

  it('a refused invitation says why: spent, for another address, or an unverified address', async () => {
    const store = new FakeMembersStore([[ANA, 'Ana', 'owner']]);
    const members = service(store);

    expect((await refusal(members.acceptInvitation('secret', BEN))).code).toBe('invalid_invitation');
    store.mismatch = { invited: 'cleo@example.com', email: 'ben@example.com', verified: true };
    expect((await refusal(members.acceptInvitation('secret', BEN))).code).toBe('invitation_for_another_address');
    store.mismatch = { invited: 'Ben@example.com', email: 'ben@example.com', verified: false };
    expect((await refusal(members.acceptInvitation('secret', BEN))).code).toBe('email_not_verified');
  });
});
