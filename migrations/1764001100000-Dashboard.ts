import { MigrationInterface, QueryRunner } from 'typeorm';

/**
 * The dashboard's people: accounts, their memberships in workspaces (with a role), pending
 * invitations, single-use links (email verification, password reset, first-start sign-in),
 * and the session store of connect-pg-simple. API keys learn who made them, when they
 * expire and (coarsely) when they were last used.
 */
export class Dashboard1764001100000 implements MigrationInterface {
  name = 'Dashboard1764001100000';

  public async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE users (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        email text NOT NULL,
        name text NOT NULL,
        -- Null until a password is set (the first-start owner signs in by a link).
        password_hash text,
        email_verified_at timestamptz,
        -- Sessions started before this moment are no longer valid.
        sessions_valid_from timestamptz NOT NULL DEFAULT now(),
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT users_email_lower CHECK (email = lower(email))
      )`);
    await queryRunner.query(`CREATE UNIQUE INDEX users_email_key ON users (email)`);

    await queryRunner.query(`
      CREATE TABLE memberships (
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (workspace_id, user_id)
      )`);
    await queryRunner.query(`CREATE INDEX memberships_user_id_idx ON memberships (user_id)`);

    await queryRunner.query(`
      CREATE TABLE invitations (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        workspace_id uuid NOT NULL REFERENCES workspaces(id) ON DELETE CASCADE,
        email text NOT NULL CHECK (email = lower(email)),
        role text NOT NULL CHECK (role IN ('owner', 'admin', 'member')),
        token_hash char(64) NOT NULL UNIQUE,
        invited_by uuid REFERENCES users(id) ON DELETE SET NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        accepted_at timestamptz,
        accepted_by uuid REFERENCES users(id) ON DELETE SET NULL,
        revoked_at timestamptz
      )`);
    await queryRunner.query(
      `CREATE INDEX invitations_pending_idx ON invitations (workspace_id, created_at DESC)
         WHERE accepted_at IS NULL AND revoked_at IS NULL`,
    );

    await queryRunner.query(`
      CREATE TABLE one_time_tokens (
        id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
        user_id uuid NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        purpose text NOT NULL CHECK (purpose IN ('verify_email', 'reset_password', 'sign_in')),
        -- SHA-256 of the 32 random bytes in the link; the link itself is never stored.
        token_hash char(64) NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz NOT NULL,
        used_at timestamptz
      )`);
    await queryRunner.query(`CREATE INDEX one_time_tokens_user_idx ON one_time_tokens (user_id, purpose)`);

    // connect-pg-simple's table (its table.sql), under a name of our own.
    await queryRunner.query(`
      CREATE TABLE dashboard_sessions (
        sid varchar NOT NULL PRIMARY KEY,
        sess json NOT NULL,
        expire timestamp(6) NOT NULL
      )`);
    await queryRunner.query(`CREATE INDEX dashboard_sessions_expire_idx ON dashboard_sessions (expire)`);

    await queryRunner.query(`
      ALTER TABLE api_keys
        ADD COLUMN created_by uuid REFERENCES users(id) ON DELETE SET NULL,
        ADD COLUMN expires_at timestamptz,
        ADD COLUMN last_used_at timestamptz`);
  }

  public async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE api_keys DROP COLUMN created_by, DROP COLUMN expires_at, DROP COLUMN last_used_at`);
    await queryRunner.query(`DROP TABLE dashboard_sessions`);
    await queryRunner.query(`DROP TABLE one_time_tokens`);
    await queryRunner.query(`DROP TABLE invitations`);
    await queryRunner.query(`DROP TABLE memberships`);
    await queryRunner.query(`DROP TABLE users`);
  }
}
