import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { User } from '../accounts/entities/user.entity';

/** An account as the operator mark reads it, its row locked. */
export interface OperatorCandidate {
  id: string;
  is_operator: boolean;
  verified: boolean;
}

/**
 * The statements on the operator mark (`users.is_operator`, a column of the accounts' table
 * that only this module writes) and on the verification of the addresses it is given.
 */
@Injectable()
export class OperatorsStore {
  constructor(@InjectRepository(User) private readonly users: Repository<User>) {}

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return this.users.manager.transaction(work);
  }

  /** Whether each of these addresses' accounts is verified; an address without an account is absent. */
  async verifiedAddresses(emails: string[]): Promise<Map<string, boolean>> {
    const rows = (await this.users.query(`SELECT email, email_verified_at IS NOT NULL AS verified FROM users WHERE email = ANY($1::text[])`, [
      emails,
    ])) as { email: string; verified: boolean }[];
    return new Map(rows.map((row) => [row.email, row.verified]));
  }

  /** The account with this (normalized) address, locked until the transaction ends; null when none has it. */
  async lockAccount(db: EntityManager, email: string): Promise<OperatorCandidate | null> {
    const [user] = (await db.query(`SELECT id, is_operator, email_verified_at IS NOT NULL AS verified FROM users WHERE email = $1 FOR UPDATE`, [
      email,
    ])) as OperatorCandidate[];
    return user ?? null;
  }

  async setOperator(db: EntityManager, userId: string, isOperator: boolean): Promise<void> {
    await db.query(`UPDATE users SET is_operator = $2, updated_at = now() WHERE id = $1`, [userId, isOperator]);
  }
}
