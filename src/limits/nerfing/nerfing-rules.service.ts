import { Injectable } from '@nestjs/common';
import { isUUID } from 'class-validator';
import { EntityManager } from 'typeorm';
import { ApiError } from '../../common/errors/api-error';
import type { TierName } from '../../common/tier-name';
import { ModelsService } from '../../models/models.service';
import { TIERS, UNLIMITED } from '../tier-policy';
import { NerfingRule } from './entities/nerfing-rule.entity';
import { NerfingRuleInput, parseRuleInput } from './nerfing-rule';
import { NerfingRulesStore } from './nerfing-rules-store';

/**
 * How long a process keeps a workspace's rules for the chat path. A change made through
 * this process applies at once (its entry is dropped); another replica sees it within this.
 */
export const NERFING_RULES_CACHE_MS = 5_000;
/** Past this many cached workspaces, expired entries are swept before one is added. */
const CACHE_SWEEP_SIZE = 10_000;

interface CacheEntry {
  rules: Promise<readonly NerfingRule[]>;
  expiresAt: number;
}

/**
 * A workspace's nerfing rules: listed, added (within the tier's `maxNerfingRules`), deleted
 * and moved, in order. The chat path reads them through `forRequests`, a short-lived cache,
 * so that a request costs no database query for its rules (and a workspace without rules
 * costs a map lookup).
 */
@Injectable()
export class NerfingRulesService {
  private readonly cache = new Map<string, CacheEntry>();

  constructor(
    private readonly store: NerfingRulesStore,
    private readonly models: ModelsService,
  ) {}

  /** The workspace's rules in the order they apply. */
  list(workspaceId: string): Promise<NerfingRule[]> {
    return this.store.list(workspaceId);
  }

  /** The rules, as cached for the chat path (at most NERFING_RULES_CACHE_MS old). */
  forRequests(workspaceId: string): Promise<readonly NerfingRule[]> {
    const now = Date.now();
    const cached = this.cache.get(workspaceId);
    if (cached && cached.expiresAt > now) return cached.rules;
    if (this.cache.size >= CACHE_SWEEP_SIZE) {
      for (const [id, entry] of this.cache) if (entry.expiresAt <= now) this.cache.delete(id);
    }
    // Concurrent requests of a workspace share one query; a failed query is not kept.
    const rules = this.list(workspaceId);
    this.cache.set(workspaceId, { rules, expiresAt: now + NERFING_RULES_CACHE_MS });
    rules.catch(() => this.cache.delete(workspaceId));
    return rules;
  }

  /**
   * Adds a rule after the others. The count is checked against the tier under a lock on the
   * workspace's row, so two concurrent adds cannot pass the limit together.
   */
  async add(workspaceId: string, input: NerfingRuleInput): Promise<NerfingRule> {
    const fields = parseRuleInput(input, (id) => this.models.find(id));
    const rule = await this.store.transaction(async (manager) => {
      const tier = await this.lockedTier(manager, workspaceId);
      const limit = TIERS[tier].maxNerfingRules;
      const { count, last } = await this.store.countAndLast(manager, workspaceId);
      if (limit !== UNLIMITED && count >= limit) {
        throw ApiError.permissionDenied(
          `The ${tier} tier allows ${limit} nerfing rule${limit === 1 ? '' : 's'} per workspace, and this workspace has ${count}. ` +
            'Delete a rule or upgrade the tier.',
          'nerfing_rule_limit_reached',
        );
      }
      return this.store.insert(manager, { ...fields, workspaceId, position: (last ?? 0) + 1 });
    });
    this.cache.delete(workspaceId);
    return rule;
  }

  /** Deletes a rule of the workspace; another workspace's rule is "not found", like an unknown id. */
  async remove(workspaceId: string, ruleId: string): Promise<void> {
    if (!isUUID(ruleId)) throw notFound();
    const deleted = await this.store.delete(workspaceId, ruleId);
    this.cache.delete(workspaceId);
    if (!deleted) throw notFound();
  }

  /** Swaps a rule with its neighbour above (`up`) or below (`down`); at either end, nothing changes. */
  async move(workspaceId: string, ruleId: string, direction: 'up' | 'down'): Promise<void> {
    if (!isUUID(ruleId)) throw notFound();
    await this.store.transaction(async (manager) => {
      await this.lockedTier(manager, workspaceId);
      const rules = await this.store.list(workspaceId, manager);
      const at = rules.findIndex((rule) => rule.id === ruleId);
      if (at < 0) throw notFound();
      const other = direction === 'up' ? at - 1 : at + 1;
      if (other < 0 || other >= rules.length) return;
      [rules[at], rules[other]] = [rules[other], rules[at]];
      // Renumbered 1..n, which also mends equal positions.
      for (const [index, rule] of rules.entries()) {
        if (rule.position !== index + 1) await this.store.setPosition(manager, rule.id, index + 1);
      }
    });
    this.cache.delete(workspaceId);
  }

  /** Locks the workspace's row for the transaction (rule changes of one workspace go one at a time) and reads its tier. */
  private async lockedTier(manager: EntityManager, workspaceId: string): Promise<TierName> {
    const tier = await this.store.lockWorkspaceTier(manager, workspaceId);
    if (tier === null) throw ApiError.notFound('No such workspace.');
    return tier;
  }
}

function notFound(): ApiError {
  return ApiError.notFound('No such nerfing rule in this workspace.', 'nerfing_rule_not_found');
}
