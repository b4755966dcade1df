/**
 * A big installation's workspaces, for the benchmarks that need thousands of them
 * (operator-pages.ts, data-scale.ts): made with generate_series in a few statements, with ids
 * derived from the workspace's number, so that later statements can name workspace k (and its
 * key) without reading anything back.
 */

/** Runs one statement on the benchmark's seeding connection. */
export type Seed = (sql: string, parameters?: unknown[]) => Promise<unknown[]>;

const NAMES = 'Acme Globex Initech Umbrella Hooli Stark Wayne Wonka Cyberdyne Tyrell Soylent Aperture Vandelay Gringotts Pied Piper'.split(' ');

/** An md5 shaped as a version-4 UUID (the app accepts no other kind of id), of `label` and the SQL `expression`. */
function uuidOf(label: string, expression: string): string {
  return `overlay(overlay(md5('${label}' || (${expression})) placing '4' from 13) placing '8' from 17)::uuid`;
}

/** SQL: the id of workspace k, k the SQL expression given (1 to the count seeded). */
export const workspaceIdSql = (expression: string): string => uuidOf('bench-ws-', expression);

/** SQL: the id of workspace k's API key (named `default`). */
export const apiKeyIdSql = (expression: string): string => uuidOf('bench-key-', expression);

/**
 * Workspaces `first` to `last` (all tiers, one in fifty suspended), each with a wallet, an opening
 * ledger row, an owner (user k) and one API key; and `members` more users, two at a time members
 * of every tenth workspace from `first`.
 */
export async function seedWorkspaces(seed: Seed, options: { first: number; last: number; members: number }): Promise<void> {
  const { first, last, members } = options;
  const range = `generate_series(${first}, ${last}) AS g`;
  await seed(
    `INSERT INTO workspaces (id, name, tier, status, created_at, updated_at)
     SELECT ${workspaceIdSql('g')}, ($1::text[])[1 + g % ${NAMES.length}] || ' ' || g,
            (ARRAY['free', 'hobby', 'pro', 'team', 'enterprise'])[1 + g % 5],
            CASE WHEN g % 50 = 0 THEN 'suspended' ELSE 'active' END,
            now() - make_interval(mins => g), now()
       FROM ${range}`,
    [NAMES],
  );
  await seed(`INSERT INTO wallets (workspace_id, balance_millicents) SELECT ${workspaceIdSql('g')}, 1000000 + g * 137 FROM ${range}`);
  await seed(
    `INSERT INTO wallet_transactions (workspace_id, type, amount_millicents, balance_after_millicents, description, idempotency_key)
     SELECT ${workspaceIdSql('g')}, 'topup', 1000000 + g * 137, 1000000 + g * 137, 'Opening balance', 'bench-opening:' || g
       FROM ${range}`,
  );
  await seed(
    `INSERT INTO users (id, email, name, email_verified_at)
     SELECT md5('bench-user-' || g)::uuid, 'person' || g || '@example.com', 'Person ' || g, now()
       FROM generate_series(${first}, ${last + members}) AS g`,
  );
  await seed(
    `INSERT INTO memberships (workspace_id, user_id, role)
     SELECT ${workspaceIdSql('g')}, md5('bench-user-' || g)::uuid, 'owner' FROM ${range}
     UNION ALL
     SELECT ${workspaceIdSql(`${first} + (g - 1) / 2 * 10`)}, md5('bench-user-' || (${last} + g))::uuid, 'member'
       FROM generate_series(1, ${members}) AS g`,
  );
  await seed(
    `INSERT INTO api_keys (id, workspace_id, name, key_hash, display_prefix)
     SELECT ${apiKeyIdSql('g')}, ${workspaceIdSql('g')}, 'default', encode(sha256(('bench-key-' || g)::bytea), 'hex'), 'sk-' || substr(md5('k' || g), 1, 8)
       FROM ${range}`,
  );
}
