import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import type { TierName } from '../../common/tier-name';
import { NerfingRule } from './entities/nerfing-rule.entity';

/**
 * The statements of `nerfing_rules`. The tier's limit, the order and the cache are
 * NerfingRulesService's. One exception: the workspace's row is locked here (and its tier
 * read) so that a workspace's rule changes go one at a time.
 */
@Injectable()
export class NerfingRulesStore {
  constructor(@InjectRepository(NerfingRule) private readonly rules: Repository<NerfingRule>) {}

  transaction<T>(work: (db: EntityManager) => Promise<T>): Promise<T> {
    return this.rules.manager.transaction(work);
  }

  /** The workspace's rules in the order they apply. */
  list(workspaceId: string, db?: EntityManager): Promise<NerfingRule[]> {
    return (db ?? this.rules.manager).find(NerfingRule, { where: { workspaceId }, order: { position: 'ASC', createdAt: 'ASC' } });
  }

  /** Locks the workspace's row for the transaction and reads its tier; null for no such workspace. */
  async lockWorkspaceTier(db: EntityManager, workspaceId: string): Promise<TierName | null> {
    const rows = (await db.query('SELECT tier FROM workspaces WHERE id = $1 FOR UPDATE', [workspaceId])) as { tier: TierName }[];
    return rows[0]?.tier ?? null;
  }

  /** How many rules the workspace has, and the last position. */
  async countAndLast(db: EntityManager, workspaceId: string): Promise<{ count: number; last: number | null }> {
    const [row] = (await db.query('SELECT count(*)::int AS count, max(position) AS last FROM nerfing_rules WHERE workspace_id = $1', [
      workspaceId,
    ])) as { count: number; last: number | null }[];
    return row;
  }

  insert(db: EntityManager, rule: Partial<NerfingRule>): Promise<NerfingRule> {
    return db.save(db.create(NerfingRule, rule));
  }

  /** Whether a rule of this workspace was deleted. */
  async delete(workspaceId: string, ruleId: string): Promise<boolean> {
    const { affected } = await this.rules.delete({ id: ruleId, workspaceId });
    return Boolean(affected);
  }

  async setPosition(db: EntityManager, ruleId: string, position: number): Promise<void> {
    await db.update(NerfingRule, { id: ruleId }, { position });
  }
}
