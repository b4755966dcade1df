import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import type { KeyLimits } from './key-limits';
import { ApiKey } from './entities/api-key.entity';
import { Workspace } from './entities/workspace.entity';

/** A key as the workspace's list reads it (never its hash). */
export interface ApiKeySummaryRow {
  id: string;
  name: string | null;
  display_prefix: string;
  created_at: Date;
  created_by: string | null;
  expires_at: Date | null;
  last_used_at: Date | null;
  revoked_at: Date | null;
  spend_limit_millicents: string | null;
  spend_limit_period: KeyLimits['spendLimitPeriod'];
  allowed_models: string[] | null;
  allowed_assistants: string[] | null;
  rate_limit_rpm: number | null;
  allowed_ips: string[] | null;
}

/**
 * Keys' spend, from api_key_spend (per key and UTC day, kept by the usage records' trigger in
 * the statement that charges them) and api_key_holds: a few rows per key, however many
 * requests it made. The periods are the database's clock, as in reserve_key_budget().
 */
const KEY_SPEND_SQL = `
  WITH bounds AS (
    SELECT (now() AT TIME ZONE 'UTC')::date AS today,
           date_trunc('week', now() AT TIME ZONE 'UTC')::date AS week,
           date_trunc('month', now() AT TIME ZONE 'UTC')::date AS month)
  SELECT k.id,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= CASE k.spend_limit_period WHEN 'daily' THEN b.today
                                                                    WHEN 'weekly' THEN b.week WHEN 'monthly' THEN b.month
                                                                    ELSE '-infinity'::date END), 0) AS period,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.today), 0) AS today,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.week), 0) AS week,
         coalesce(sum(s.charged_millicents) FILTER (WHERE s.day >= b.month), 0) AS month,
         coalesce(sum(s.charged_millicents), 0) AS all_time,
         (SELECT coalesce(sum(h.amount_millicents), 0) FROM api_key_holds h WHERE h.api_key_id = k.id AND h.expires_at >= now()) AS held
    FROM api_keys k CROSS JOIN bounds b
    LEFT JOIN api_key_spend s ON s.api_key_id = k.id
   WHERE k.id = ANY($1::uuid[])
   GROUP BY k.id, k.spend_limit_period, b.today, b.week, b.month`;

/** A key's spend as the statement answers it: whole millicents, as text. */
export type KeySpendRow = Record<'id' | 'period' | 'today' | 'week' | 'month' | 'all_time' | 'held', string>;

/**
 * The statements of `api_keys`. Key formats, limits, expiry and the lookup cache are
 * ApiKeysService's. A `db` argument runs the statement in the caller's transaction.
 */
@Injectable()
export class ApiKeysStore {
  constructor(
    @InjectRepository(ApiKey) private readonly keys: Repository<ApiKey>,
    @InjectRepository(Workspace) private readonly workspaces: Repository<Workspace>,
  ) {}

  async workspaceExists(workspaceId: string, db?: EntityManager): Promise<boolean> {
    const workspaces = db ? db.getRepository(Workspace) : this.workspaces;
    return (await workspaces.findOneBy({ id: workspaceId })) !== null;
  }

  insert(fields: Partial<ApiKey>, db?: EntityManager): Promise<ApiKey> {
    const keys = db ? db.getRepository(ApiKey) : this.keys;
    return keys.save(keys.create(fields));
  }

  /** The workspace's keys, newest first. */
  summaries(workspaceId: string): Promise<ApiKeySummaryRow[]> {
    return this.keys.query(
      `SELECT id, name, display_prefix, created_at, created_by, expires_at, last_used_at, revoked_at,
              spend_limit_millicents, spend_limit_period, allowed_models, allowed_assistants, rate_limit_rpm, allowed_ips
         FROM api_keys
        WHERE workspace_id = $1
        ORDER BY created_at DESC, id DESC`,
      [workspaceId],
    );
  }

  /** A key by id; with `workspaceId`, only that workspace's. */
  find(keyId: string, workspaceId?: string): Promise<ApiKey | null> {
    return this.keys.findOneBy(workspaceId === undefined ? { id: keyId } : { id: keyId, workspaceId });
  }

  /** The key of this SHA-256, with its workspace (whose tier and status the request needs). */
  findByHashWithWorkspace(keyHash: string): Promise<ApiKey | null> {
    return this.keys.findOne({ where: { keyHash }, relations: { workspace: true } });
  }

  async update(keyId: string, fields: Partial<Pick<ApiKey, keyof KeyLimits | 'revokedAt'>>): Promise<void> {
    await this.keys.update({ id: keyId }, fields);
  }

  /** One statement for a batch of [key id, time of use (ms)]; a time never moves back. */
  async writeLastUsed(batch: [string, number][]): Promise<void> {
    await this.keys.query(
      `UPDATE api_keys
          SET last_used_at = GREATEST(COALESCE(last_used_at, '-infinity'), v.used_at)
         FROM unnest($1::uuid[], $2::timestamptz[]) AS v(id, used_at)
        WHERE api_keys.id = v.id`,
      [batch.map(([id]) => id), batch.map(([, usedAt]) => new Date(usedAt).toISOString())],
    );
  }

  /** Each key's spend in its periods and what its requests in flight hold. */
  spendOf(keyIds: string[]): Promise<KeySpendRow[]> {
    return queryRows<KeySpendRow>(this.keys.manager, KEY_SPEND_SQL, [keyIds]);
  }
}
