import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { isTierName, TIER_NAMES, TierName } from '../common/tier-name';
import { assertUuid } from '../common/validation/uuid';
import { TIERS } from '../limits/tier-policy';
import { WalletService } from '../wallet/wallet.service';
import { ApiKeysService } from './api-keys.service';
import { Workspace, type WorkspaceStatus } from './entities/workspace.entity';

export interface CreateWorkspaceCommand {
  name: string;
  tier?: string;
  /** Opening credit in millicents, booked as a `topup`. */
  balanceMillicents?: number;
  /**
   * Default true: a first key named "default" (the CLI, first start). The dashboard's
   * sign-up passes false: its people make their first key themselves.
   */
  withApiKey?: boolean;
}

export interface CreatedWorkspace {
  workspace: Workspace;
  apiKey: string;
  apiKeyId: string;
}

/** `create` with `withApiKey: false`. */
export interface CreatedWorkspaceWithoutKey {
  workspace: Workspace;
  apiKey: null;
  apiKeyId: null;
}

@Injectable()
export class WorkspacesService {
  constructor(
    @InjectRepository(Workspace) private readonly workspaces: Repository<Workspace>,
    private readonly apiKeys: ApiKeysService,
    private readonly wallet: WalletService,
  ) {}

  /**
   * A workspace with its wallet, an opening credit if asked, and a first API key, committed
   * together (in the caller's transaction when given one), so a failure leaves nothing behind.
   * With `withApiKey: false`, no key: `apiKey` and `apiKeyId` are null.
   */
  create(
    command: CreateWorkspaceCommand & { withApiKey?: true },
    outerTransaction?: EntityManager,
  ): Promise<CreatedWorkspace>;
  create(
    command: CreateWorkspaceCommand & { withApiKey: false },
    outerTransaction?: EntityManager,
  ): Promise<CreatedWorkspaceWithoutKey>;
  create(
    command: CreateWorkspaceCommand,
    outerTransaction?: EntityManager,
  ): Promise<CreatedWorkspace | CreatedWorkspaceWithoutKey>;
  async create(
    command: CreateWorkspaceCommand,
    outerTransaction?: EntityManager,
  ): Promise<CreatedWorkspace | CreatedWorkspaceWithoutKey> {
    const name = command.name?.trim();
    if (!name) throw ApiError.badRequest('A workspace needs a name.', 'name');
    const tier = parseTier(command.tier ?? 'free');
    const opening = command.balanceMillicents ?? 0;
    if (!Number.isSafeInteger(opening) || opening < 0) {
      throw ApiError.badRequest('balance must be a whole, non-negative number of millicents.', 'balance');
    }

    const create = async (manager: EntityManager): Promise<CreatedWorkspace | CreatedWorkspaceWithoutKey> => {
      const workspace = await manager.save(manager.create(Workspace, { name, tier, customRateLimitRpm: null }));
      await this.wallet.open(manager, workspace.id);
      if (opening > 0) {
        await this.wallet.credit(
          {
            workspaceId: workspace.id,
            amountMillicents: opening,
            type: 'topup',
            description: 'Opening balance',
            idempotencyKey: `opening:${workspace.id}`,
          },
          manager,
        );
      }
      if (command.withApiKey === false) return { workspace, apiKey: null, apiKeyId: null };
      const key = await this.apiKeys.create(workspace.id, 'default', manager);
      return { workspace, apiKey: key.apiKey, apiKeyId: key.id };
    };
    return outerTransaction ? create(outerTransaction) : this.workspaces.manager.transaction(create);
  }

  /**
   * Moves a workspace to a tier. A custom rate is for the tiers whose policy allows one
   * (enterprise), and moving to another tier drops it. Takes effect on running servers
   * within the key cache's lifetime. In the caller's transaction when given one (the
   * operator console writes its audit entry in the same one).
   */
  async setTier(workspaceId: string, tierName: string, customRateLimitRpm?: number, manager?: EntityManager): Promise<Workspace> {
    const tier = parseTier(tierName);
    const { customRateAllowed } = TIERS[tier];
    if (customRateLimitRpm !== undefined) {
      if (!customRateAllowed) {
        const allowed = TIER_NAMES.filter((name) => TIERS[name].customRateAllowed);
        throw ApiError.badRequest(`A custom rate limit is available on the ${allowed.join(' and ')} tier only.`, 'rpm');
      }
      if (!Number.isSafeInteger(customRateLimitRpm) || (customRateLimitRpm < 1 && customRateLimitRpm !== -1)) {
        throw ApiError.badRequest('rpm must be a positive whole number, or -1 for no limit.', 'rpm');
      }
    }
    assertUuid(workspaceId, 'workspace');
    const workspace = manager ? await this.getLocked(manager, workspaceId) : await this.get(workspaceId);
    workspace.tier = tier;
    workspace.customRateLimitRpm = customRateAllowed ? (customRateLimitRpm ?? null) : null;
    return manager ? manager.save(workspace) : this.workspaces.save(workspace);
  }

  async get(workspaceId: string): Promise<Workspace> {
    assertUuid(workspaceId, 'workspace');
    const workspace = await this.workspaces.findOneBy({ id: workspaceId });
    if (!workspace) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return workspace;
  }

  /**
   * The workspace, its row locked in the caller's transaction until it ends: what the caller
   * checks against the tier (assistants per workspace) holds while it writes, and concurrent
   * callers queue. 404 like `get`.
   */
  async getLocked(manager: EntityManager, workspaceId: string): Promise<Workspace> {
    const workspace = await manager.findOne(Workspace, { where: { id: workspaceId }, lock: { mode: 'pessimistic_write' } });
    if (!workspace) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    return workspace;
  }

  /** Suspends or resumes the workspace, in the caller's transaction (the operator console audits it in the same one). */
  async setStatus(manager: EntityManager, workspaceId: string, status: WorkspaceStatus): Promise<void> {
    await manager.update(Workspace, { id: workspaceId }, { status });
  }

  /** Gives a workspace a new name (checked by the caller); false when there is no such workspace. */
  async rename(workspaceId: string, name: string): Promise<boolean> {
    if (!name.trim()) throw ApiError.badRequest('A workspace needs a name.', 'name');
    const result = await this.workspaces.update({ id: workspaceId }, { name });
    return (result.affected ?? 0) > 0;
  }

  async count(): Promise<number> {
    return this.workspaces.count();
  }
}

function parseTier(value: string): TierName {
  if (!isTierName(value)) throw ApiError.badRequest(`tier must be one of ${TIER_NAMES.join(', ')}.`, 'tier');
  return value;
}
