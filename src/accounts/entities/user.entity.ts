import { Column, CreateDateColumn, Entity, PrimaryGeneratedColumn, UpdateDateColumn } from 'typeorm';

/** A person who signs in to the dashboard. Workspaces are reached through memberships. */
@Entity({ name: 'users' })
export class User {
  @PrimaryGeneratedColumn('uuid')
  id: string;

  /** Always lower case (a CHECK constraint holds it), unique. */
  @Column({ type: 'text' })
  email: string;

  @Column({ type: 'text' })
  name: string;

  /** argon2id; null until a password is set (the first-start owner signs in by a link). */
  @Column({ name: 'password_hash', type: 'text', nullable: true, select: false })
  passwordHash: string | null;

  @Column({ name: 'email_verified_at', type: 'timestamptz', nullable: true })
  emailVerifiedAt: Date | null;

  /** Sessions started before this moment are refused: moved forward by a password change or reset. */
  @Column({ name: 'sessions_valid_from', type: 'timestamptz' })
  sessionsValidFrom: Date;

  /** Set by `cli operator grant`; OPERATOR_EMAILS makes operators too (see OperatorsService). */
  @Column({ name: 'is_operator', type: 'boolean', default: false })
  isOperator: boolean;

  @CreateDateColumn({ name: 'created_at', type: 'timestamptz' })
  createdAt: Date;

  @UpdateDateColumn({ name: 'updated_at', type: 'timestamptz' })
  updatedAt: Date;
}
