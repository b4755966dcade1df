import { Injectable } from '@nestjs/common';
import { EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { WorkspacesService } from '../workspaces/workspaces.service';
import { AccountsStore } from './accounts-store';
import { OneTimeTokenPurpose } from './entities/one-time-token.entity';
import { User } from './entities/user.entity';
import { isLinkSecret, newLinkSecret, sha256 } from './link-secrets';
import { hashPassword, passwordProblem, verifyPassword } from './passwords';

/** How long each kind of single-use link lives. */
export const TOKEN_LIFETIME_MS: Record<OneTimeTokenPurpose, number> = {
  verify_email: 48 * 3_600_000,
  reset_password: 3_600_000,
  sign_in: 24 * 3_600_000,
};

const EMAIL_PATTERN = /^[^\s@]+@[^\s@]+$/;
const MAX_EMAIL_LENGTH = 254;
const MAX_NAME_LENGTH = 100;

export interface SignUpCommand {
  email: string;
  name: string;
  password: string;
}

/** A new account; `workspaceId` is its first workspace (none when it joins one by invitation). */
export interface SignedUp {
  user: User;
  workspaceId: string | null;
  /** The secret of the email verification link; null when the address is verified already (sign-up by invitation). */
  verificationToken: string | null;
}

/**
 * People and their credentials: sign-up, passwords, email verification and the single-use
 * links (verification, reset, sign-in) of which only a SHA-256 is stored. Which workspaces
 * a person reaches, and with what role, is MembersService's.
 */
@Injectable()
export class AccountsService {
  constructor(
    private readonly store: AccountsStore,
    private readonly workspaces: WorkspacesService,
  ) {}

  /**
   * Creates an account, and (unless it joins a workspace by invitation) its first workspace
   * with the person as owner, in one transaction. A taken email is a `conflict`: the caller
   * decides what the person is told.
   */
  async signUp(
    command: SignUpCommand,
    options: {
      firstWorkspace: { tier: string } | null;
      /** The address is known to be the person's (the invitation link came to that mailbox): no verification link. */
      emailVerified?: boolean;
      /** Runs in the same transaction once the account exists (joining a workspace by invitation). */
      onCreated?: (user: User, manager: EntityManager) => Promise<void>;
    },
  ): Promise<SignedUp> {
    const email = normalizeEmail(command.email);
    const name = normalizeName(command.name);
    const problem = passwordProblem(command.password, email);
    if (problem) throw ApiError.badRequest(problem, 'password', 'weak_password');
    const passwordHash = await hashPassword(command.password);

    const work = async (manager: EntityManager): Promise<SignedUp> => {
      const emailVerifiedAt = options.emailVerified ? new Date() : null;
      const user = await this.insertUser(manager, { email, name, passwordHash, emailVerifiedAt });
      let workspaceId: string | null = null;
      if (options.firstWorkspace) {
        const created = await this.workspaces.create(
          { name: `${name}'s workspace`, tier: options.firstWorkspace.tier, withApiKey: false },
          manager,
        );
        workspaceId = created.workspace.id;
        await this.store.addOwner(manager, workspaceId, user.id);
      }
      await options.onCreated?.(user, manager);
      const verificationToken = emailVerifiedAt ? null : await this.issueToken(user.id, 'verify_email', manager);
      return { user, workspaceId, verificationToken };
    };
    return this.store.transaction(work);
  }

  /**
   * An account without a password, verified, owning `workspaceId`: the first-start owner,
   * who signs in by a link and sets a password on the account page.
   */
  async createOwnerWithoutPassword(
    manager: EntityManager,
    workspaceId: string,
    person: { email: string; name: string },
  ): Promise<User> {
    const user = await this.insertUser(manager, {
      email: normalizeEmail(person.email),
      name: normalizeName(person.name),
      passwordHash: null,
      emailVerifiedAt: new Date(),
    });
    await this.store.addOwner(manager, workspaceId, user.id);
    return user;
  }

  /** The account of these credentials, or null; as slow for an unknown email as for a wrong password. */
  async authenticate(email: string, password: string): Promise<User | null> {
    const row = await this.store.withPasswordHashByEmail(safeEmail(email));
    const valid = await verifyPassword(row?.passwordHash ?? null, password);
    if (!row || !valid) return null;
    delete (row as Partial<User>).passwordHash;
    return row;
  }

  /**
   * When the password of the account with this email was last set (ms), or null for no such
   * account: the sign-in throttle names an account's windows after it, so a reset starts them afresh.
   */
  async passwordEpoch(email: string): Promise<number | null> {
    return this.store.passwordEpoch(safeEmail(email));
  }

  async hasPassword(userId: string): Promise<boolean> {
    return this.store.hasPassword(userId);
  }

  async findById(userId: string): Promise<User | null> {
    return this.store.findById(userId);
  }

  /**
   * The names of these accounts, by id (ids of no account, and nulls, are left out): for
   * pages that show who did something, such as the creator of an API key.
   */
  async namesOf(userIds: ReadonlyArray<string | null>): Promise<Map<string, string>> {
    const ids = [...new Set(userIds.filter((id): id is string => id !== null))];
    const users = ids.length > 0 ? await this.store.namesOf(ids) : [];
    return new Map(users.map((user) => [user.id, user.name]));
  }

  async findByEmail(email: string): Promise<User | null> {
    return this.store.findByEmail(safeEmail(email));
  }

  async updateName(userId: string, name: string): Promise<void> {
    await this.store.setName(userId, normalizeName(name));
  }

  async markEmailVerified(userId: string): Promise<void> {
    await this.store.markEmailVerified(userId);
  }

  /**
   * Sets a new password and ends every session started before now (the caller starts a
   * fresh one for the person's own browser). `currentPassword` is checked when given; an
   * account without a password (first start) sets its first one without it.
   */
  async changePassword(userId: string, newPassword: string, currentPassword?: string): Promise<Date> {
    const row = await this.store.withPasswordHashById(userId);
    if (!row) throw ApiError.notFound('No such account.', 'user_not_found');
    if (row.passwordHash !== null && !(await verifyPassword(row.passwordHash, currentPassword ?? ''))) {
      throw ApiError.badRequest('Your current password is not right.', 'current_password', 'wrong_password');
    }
    return this.setPassword(userId, row.email, newPassword);
  }

  /**
   * Resets a password through a reset link; the link is spent, every session ended, and every
   * other outstanding reset or sign-in link of the account stops working (one of them may be
   * what an intruder holds).
   */
  async resetPassword(token: string, newPassword: string): Promise<User> {
    return this.store.transaction(async (manager) => {
      const userId = await this.consumeToken(token, 'reset_password', manager);
      if (!userId) throw invalidLink();
      const user = await this.store.findById(userId, manager);
      if (!user) throw invalidLink();
      await this.setPassword(userId, user.email, newPassword, manager);
      await this.store.spendOutstandingTokens(manager, userId, ['reset_password', 'sign_in']);
      // Whoever holds the link has read the mailbox: the address is verified.
      await this.store.setEmailVerifiedAt(manager, userId, user.emailVerifiedAt ?? new Date());
      return user;
    });
  }

  /** A new single-use link secret for the person; only its SHA-256 is kept. */
  async issueToken(userId: string, purpose: OneTimeTokenPurpose, manager?: EntityManager): Promise<string> {
    const { secret: token, hash } = newLinkSecret();
    await this.store.insertToken(manager, {
      userId,
      purpose,
      tokenHash: hash,
      expiresAt: new Date(Date.now() + TOKEN_LIFETIME_MS[purpose]),
    });
    return token;
  }

  /**
   * Spends a link: the one statement that marks it used is what decides, so a link opened
   * twice at once works once. Returns its account, or null for an unknown, used or expired link.
   */
  async consumeToken(token: string, purpose: OneTimeTokenPurpose, manager?: EntityManager): Promise<string | null> {
    if (!isLinkSecret(token)) return null;
    return this.store.spendToken(manager, sha256(token), purpose);
  }

  /** Whether a link can still be used, without spending it (to show its form). */
  async tokenIsUsable(token: string, purpose: OneTimeTokenPurpose): Promise<boolean> {
    if (!isLinkSecret(token)) return false;
    return this.store.tokenIsUsable(sha256(token), purpose);
  }

  private async setPassword(userId: string, email: string, password: string, manager?: EntityManager): Promise<Date> {
    const problem = passwordProblem(password, email);
    if (problem) throw ApiError.badRequest(problem, 'password', 'weak_password');
    const passwordHash = await hashPassword(password);
    return this.store.setPasswordHash(manager, userId, passwordHash);
  }

  private async insertUser(
    manager: EntityManager,
    fields: { email: string; name: string; passwordHash: string | null; emailVerifiedAt: Date | null },
  ): Promise<User> {
    const user = await this.store.insertUser(manager, fields);
    if (!user) throw ApiError.conflict('An account with this email exists.', 'email_taken');
    return user;
  }
}

/** Trimmed and lower-cased; refused when it cannot be an address. */
export function normalizeEmail(email: string): string {
  const normalized = String(email ?? '').trim().toLowerCase();
  if (normalized.length > MAX_EMAIL_LENGTH || !EMAIL_PATTERN.test(normalized)) {
    throw ApiError.badRequest('Enter an email address such as name@example.com.', 'email', 'invalid_email');
  }
  return normalized;
}

/** For lookups: an impossible address matches nothing instead of failing. */
function safeEmail(email: string): string {
  return String(email ?? '').trim().toLowerCase().slice(0, MAX_EMAIL_LENGTH + 1);
}

function normalizeName(name: string): string {
  const normalized = String(name ?? '').trim().replace(/\s+/g, ' ');
  if (!normalized) throw ApiError.badRequest('Enter your name.', 'name', 'invalid_name');
  if (normalized.length > MAX_NAME_LENGTH) {
    throw ApiError.badRequest(`Use at most ${MAX_NAME_LENGTH} characters for your name.`, 'name', 'invalid_name');
  }
  return normalized;
}

function invalidLink(): ApiError {
  return ApiError.badRequest('This link is invalid, used or expired. Ask for a new one.', 'token', 'invalid_link');
}
