import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, In, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { Membership, Role } from './entities/membership.entity';
import { OneTimeToken, OneTimeTokenPurpose } from './entities/one-time-token.entity';
import { User } from './entities/user.entity';

/** The fields of a new account, already normalized and hashed. */
export interface NewUser {
  email: string;
  name: string;
  passwordHash: string | null;
  emailVerifiedAt: Date | null;
}

/** A single-use link as it is stored: the SHA-256 of its secret, never the secret. */
export interface NewToken {
  userId: string;
  purpose: OneTimeTokenPurpose;
  tokenHash: string;
  expiresAt: Date;
}

/**
 * The statements of accounts: `users` and `one_time_tokens`, and the owner membership a new
 * account starts with. The rules (normal forms, password strength, which links a reset ends)
 * are AccountsService's. A `db` argument runs the statement in the caller's transaction.
 */
@Injectable()
export class AccountsStore {
  constructor(@InjectRepository(User) private readonly users: Repository<User>) {}

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return this.users.manager.transaction(work);
  }

  /** The new account, or null when the email is taken (nothing is written then). */
  async insertUser(db: EntityManager, fields: NewUser): Promise<User | null> {
    const rows: { id: string }[] = await db.query(
      `INSERT INTO users (email, name, password_hash, email_verified_at) VALUES ($1, $2, $3, $4)
       ON CONFLICT (email) DO NOTHING RETURNING id`,
      [fields.email, fields.name, fields.passwordHash, fields.emailVerifiedAt],
    );
    if (rows.length === 0) return null;
    return db.findOneByOrFail(User, { id: rows[0].id });
  }

  async addOwner(db: EntityManager, workspaceId: string, userId: string): Promise<void> {
    await db.insert(Membership, { workspaceId, userId, role: 'owner' as Role });
  }

  /** The account with its password hash (which a plain read leaves out), by email. */
  async withPasswordHashByEmail(email: string): Promise<User | null> {
    return this.users.createQueryBuilder('user').addSelect('user.passwordHash').where('user.email = :email', { email }).getOne();
  }

  /** The account with its password hash (which a plain read leaves out), by id. */
  async withPasswordHashById(userId: string): Promise<User | null> {
    return this.users.createQueryBuilder('user').addSelect('user.passwordHash').where('user.id = :userId', { userId }).getOne();
  }

  /** When the password of the account with this email was last set (ms), or null for no such account. */
  async passwordEpoch(email: string): Promise<number | null> {
    const rows: { epoch: string }[] = await this.users.query(
      `SELECT (extract(epoch FROM sessions_valid_from) * 1000)::bigint::text AS epoch FROM users WHERE email = $1`,
      [email],
    );
    return rows[0] ? Number(rows[0].epoch) : null;
  }

  async hasPassword(userId: string): Promise<boolean> {
    const rows: unknown[] = await this.users.query(`SELECT 1 FROM users WHERE id = $1 AND password_hash IS NOT NULL`, [userId]);
    return rows.length > 0;
  }

  async findById(userId: string, db?: EntityManager): Promise<User | null> {
    return db ? db.findOneBy(User, { id: userId }) : this.users.findOneBy({ id: userId });
  }

  async findByEmail(email: string): Promise<User | null> {
    return this.users.findOneBy({ email });
  }

  async namesOf(ids: string[]): Promise<{ id: string; name: string }[]> {
    return this.users.find({ select: { id: true, name: true }, where: { id: In(ids) } });
  }

  async setName(userId: string, name: string): Promise<void> {
    await this.users.update({ id: userId }, { name });
  }

  /** Keeps the first verification time when there is one. */
  async markEmailVerified(userId: string): Promise<void> {
    await this.users
      .createQueryBuilder()
      .update()
      .set({ emailVerifiedAt: () => 'COALESCE(email_verified_at, now())' })
      .where('id = :userId', { userId })
      .execute();
  }

  async setEmailVerifiedAt(db: EntityManager, userId: string, at: Date): Promise<void> {
    await db.update(User, { id: userId }, { emailVerifiedAt: at });
  }

  /** Sets the hash and ends every session started before now; answers the database's now. */
  async setPasswordHash(db: EntityManager | undefined, userId: string, passwordHash: string): Promise<Date> {
    const [{ now }] = await queryRows<{ now: Date }>(
      db ?? this.users.manager,
      `UPDATE users SET password_hash = $2, sessions_valid_from = now(), updated_at = now() WHERE id = $1 RETURNING now() AS now`,
      [userId, passwordHash],
    );
    return now;
  }

  async insertToken(db: EntityManager | undefined, token: NewToken): Promise<void> {
    await (db ?? this.users.manager).insert(OneTimeToken, { ...token, usedAt: null });
  }

  /**
   * Spends a link: the one statement that marks it used is what decides, so a link opened
   * twice at once works once. Returns its account, or null for an unknown, used or expired link.
   */
  async spendToken(db: EntityManager | undefined, tokenHash: string, purpose: OneTimeTokenPurpose): Promise<string | null> {
    // queryRows: TypeORM answers an UPDATE with [rows, rowCount], not with the rows.
    const rows = await queryRows<{ user_id: string }>(
      db ?? this.users.manager,
      `UPDATE one_time_tokens SET used_at = now()
        WHERE token_hash = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now()
        RETURNING user_id`,
      [tokenHash, purpose],
    );
    return rows[0]?.user_id ?? null;
  }

  /** Marks every outstanding link of these purposes of the account used. */
  async spendOutstandingTokens(db: EntityManager, userId: string, purposes: OneTimeTokenPurpose[]): Promise<void> {
    await db.query(
      `UPDATE one_time_tokens SET used_at = now()
        WHERE user_id = $1 AND purpose = ANY($2::text[]) AND used_at IS NULL`,
      [userId, purposes],
    );
  }

  async tokenIsUsable(tokenHash: string, purpose: OneTimeTokenPurpose): Promise<boolean> {
    const rows: unknown[] = await this.users.query(
      `SELECT 1 FROM one_time_tokens WHERE token_hash = $1 AND purpose = $2 AND used_at IS NULL AND expires_at > now()`,
      [tokenHash, purpose],
    );
    return rows.length > 0;
  }
}
