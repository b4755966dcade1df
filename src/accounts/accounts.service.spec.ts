import type { EntityManager } from 'typeorm';
import type { WorkspacesService } from '../workspaces/workspaces.service';
import type { AccountsStore, NewToken, NewUser } from './accounts-store';
import { AccountsService } from './accounts.service';
import type { OneTimeTokenPurpose } from './entities/one-time-token.entity';
import type { User } from './entities/user.entity';
import { refusal, unused } from '../../test/support/fake-store';

/** Transactions as far as the rules see them: an opaque manager the fake store receives back. */
const TX = {} as EntityManager;
const GOOD_PASSWORD = 'a long enough passphrase';

interface StoredToken extends NewToken {
  usedAt: Date | null;
}

/** Accounts and their single-use links in memory; what the statements would do, without SQL. */
class FakeAccountsStore implements Pick<AccountsStore, keyof AccountsStore> {
  readonly users = new Map<string, User>();
  readonly tokens: StoredToken[] = [];

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return work(TX);
  }
  async insertUser(_db: EntityManager, fields: NewUser): Promise<User | null> {
    if ([...this.users.values()].some((user) => user.email === fields.email)) return null;
    const user = { id: `user-${this.users.size + 1}`, ...fields, sessionsValidFrom: new Date(0) } as User;
    this.users.set(user.id, user);
    return user;
  }
  async findById(userId: string): Promise<User | null> {
    return this.users.get(userId) ?? null;
  }
  async withPasswordHashById(userId: string): Promise<User | null> {
    return this.users.get(userId) ?? null;
  }
  async setPasswordHash(_db: EntityManager | undefined, userId: string, passwordHash: string): Promise<Date> {
    this.users.get(userId)!.passwordHash = passwordHash;
    return new Date();
  }
  async setEmailVerifiedAt(_db: EntityManager, userId: string, at: Date): Promise<void> {
    this.users.get(userId)!.emailVerifiedAt = at;
  }
  async insertToken(_db: EntityManager | undefined, token: NewToken): Promise<void> {
    this.tokens.push({ ...token, usedAt: null });
  }
  async spendToken(_db: EntityManager | undefined, tokenHash: string, purpose: OneTimeTokenPurpose): Promise<string | null> {
    const token = this.tokens.find((t) => t.tokenHash === tokenHash && t.purpose === purpose && !t.usedAt && t.expiresAt > new Date());
    if (!token) return null;
    token.usedAt = new Date();
    return token.userId;
  }
  async spendOutstandingTokens(_db: EntityManager, userId: string, purposes: OneTimeTokenPurpose[]): Promise<void> {
    for (const token of this.tokens) if (token.userId === userId && purposes.includes(token.purpose)) token.usedAt ??= new Date();
  }
  async tokenIsUsable(tokenHash: string, purpose: OneTimeTokenPurpose): Promise<boolean> {
    return this.tokens.some((t) => t.tokenHash === tokenHash && t.purpose === purpose && !t.usedAt && t.expiresAt > new Date());
  }
  // Statements the rules below do not use.
  addOwner = unused;
  withPasswordHashByEmail = unused;
  passwordEpoch = unused;
  hasPassword = unused;
  findByEmail = unused;
  namesOf = unused;
  setName = unused;
  markEmailVerified = unused;
}

function service(store: FakeAccountsStore): AccountsService {
  return new AccountsService(store as unknown as AccountsStore, {} as WorkspacesService);
}

describe('AccountsService rules (with a store in memory)', () => {
  it('a reset link works once and ends the other reset and sign-in links, not the verification link', async () => {
    const store = new FakeAccountsStore();
    const accounts = service(store);
    const { user, verificationToken } = await accounts.signUp(
      { email: ' Ana@Example.com ', name: 'Ana', password: GOOD_PASSWORD },
      { firstWorkspace: null },
    );
    expect(user.email).toBe('ana@example.com');
    const reset = await accounts.issueToken(user.id, 'reset_password');
    const otherReset = await accounts.issueToken(user.id, 'reset_password');
    const signIn = await accounts.issueToken(user.id, 'sign_in');

    await accounts.resetPassword(reset, 'another long passphrase');

    expect((await refusal(accounts.resetPassword(reset, 'a third long passphrase'))).code).toBe('invalid_link');
    expect(await accounts.tokenIsUsable(otherReset, 'reset_password')).toBe(false);
    expect(await accounts.tokenIsUsable(signIn, 'sign_in')).toBe(false);
    expect(await accounts.tokenIsUsable(verificationToken!, 'verify_email')).toBe(true);
    // Whoever held the link read the mailbox.
    expect(store.users.get(user.id)!.emailVerifiedAt).toBeInstanceOf(Date);
    expect(store.tokens.map((t) => t.tokenHash)).not.toContain(reset);
  });

  it('a taken email is a conflict that issues no link; a weak password is refused before anything is written', async () => {
    const store = new FakeAccountsStore();
    const accounts = service(store);
    await accounts.signUp({ email: 'ana@example.com', name: 'Ana', password: GOOD_PASSWORD }, { firstWorkspace: null });

    const taken = await refusal(
      accounts.signUp({ email: 'ANA@example.com', name: 'Other Ana', password: GOOD_PASSWORD }, { firstWorkspace: null }),
    );
    expect([taken.status, taken.code]).toEqual([409, 'email_taken']);
    const weak = await refusal(accounts.signUp({ email: 'ben@example.com', name: 'Ben', password: '1234567890' }, { firstWorkspace: null }));
    expect([weak.status, weak.code, weak.param]).toEqual([400, 'weak_password', 'password']);
    expect([store.users.size, store.tokens.length]).toEqual([1, 1]);
  });

  it('a malformed link matches nothing without asking the store', async () => {
    const store = new FakeAccountsStore();
    const spend = jest.spyOn(store, 'spendToken');
    const read = jest.spyOn(store, 'tokenIsUsable');
    const accounts = service(store);
    await expect(accounts.consumeToken('not a link', 'sign_in')).resolves.toBeNull();
    await expect(accounts.tokenIsUsable('not a link', 'sign_in')).resolves.toBe(false);
    expect([spend.mock.calls.length, read.mock.calls.length]).toEqual([0, 0]);
  });
});
