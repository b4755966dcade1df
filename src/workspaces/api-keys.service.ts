import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { createHash, randomBytes } from 'node:crypto';
import { EntityManager, Repository } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import type { Principal } from '../common/http/request-context';
import { ApiKey } from './entities/api-key.entity';
import { Workspace } from './entities/workspace.entity';
import { effectiveRateLimitRpm } from './tiers';

/** `sk-` and 43 characters of base64url: 256 bits from the CSPRNG. */
const KEY_FORMAT = /^sk-[A-Za-z0-9_-]{32,200}$/;
const DISPLAY_PREFIX_LENGTH = 'sk-'.length + 8;

/**
 * How long a key lookup is trusted. A revoked key (or a tier change) takes effect on
 * every replica within this time, which keeps the database off the request hot path.
 */
export const KEY_CACHE_TTL_MS = 5_000;
const KEY_CACHE_MAX_ENTRIES = 10_000;

export interface CreatedApiKey {
  id: string;
  apiKey: string;
  displayPrefix: string;
}

@Injectable()
export class ApiKeysService {
  /** SHA-256 of a key -> who it belongs to (null: unknown or revoked), with an expiry. */
  private readonly cache = new Map<string, { principal: Principal | null; expiresAt: number }>();
  /** Lookups under way: concurrent requests with the same key share one query. */
  private readonly lookups = new Map<string, Promise<Principal | null>>();

  constructor(
    @InjectRepository(ApiKey) private readonly keys: Repository<ApiKey>,
    @InjectRepository(Workspace) private readonly workspaces: Repository<Workspace>,
  ) {}

  /** In the caller's transaction when given one (a new workspace and its first key commit together). */
  async create(workspaceId: string, name?: string, manager?: EntityManager): Promise<CreatedApiKey> {
    assertUuid(workspaceId, 'workspace');
    const workspaces = manager ? manager.getRepository(Workspace) : this.workspaces;
    const keys = manager ? manager.getRepository(ApiKey) : this.keys;
    const workspace = await workspaces.findOneBy({ id: workspaceId });
    if (!workspace) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    const apiKey = `sk-${randomBytes(32).toString('base64url')}`;
    const row = await keys.save(
      keys.create({
        workspaceId,
        name: name ?? null,
        keyHash: hashKey(apiKey),
        displayPrefix: apiKey.slice(0, DISPLAY_PREFIX_LENGTH),
        revokedAt: null,
      }),
    );
    return { id: row.id, apiKey, displayPrefix: row.displayPrefix };
  }

  /** Revokes a key; revoking it again is not an error. */
  async revoke(keyId: string): Promise<{ id: string; revoked_at: string }> {
    assertUuid(keyId, 'key');
    const key = await this.keys.findOneBy({ id: keyId });
    if (!key) throw ApiError.notFound(`No API key with id ${keyId}.`, 'api_key_not_found');
    const revokedAt = key.revokedAt ?? new Date();
    if (!key.revokedAt) await this.keys.update({ id: keyId }, { revokedAt });
    this.cache.delete(key.keyHash);
    this.lookups.delete(key.keyHash);
    return { id: keyId, revoked_at: revokedAt.toISOString() };
  }

  /**
   * True when this process has found the key valid before (its cache entry, fresh or
   * expired, names a caller). Such a key is not a guess, so the guard does not count it
   * against its client address.
   */
  seenValid(apiKey: string): boolean {
    return KEY_FORMAT.test(apiKey) && Boolean(this.cache.get(hashKey(apiKey))?.principal);
  }

  /** The caller a bearer key stands for, or null for a malformed, unknown or revoked key. */
  async authenticate(apiKey: string): Promise<Principal | null> {
    if (!KEY_FORMAT.test(apiKey)) return null;
    const hash = hashKey(apiKey);
    const now = Date.now();
    const cached = this.cache.get(hash);
    if (cached && cached.expiresAt > now) return cached.principal;

    let lookup = this.lookups.get(hash);
    if (!lookup) {
      lookup = this.lookUp(hash).finally(() => this.lookups.delete(hash));
      this.lookups.set(hash, lookup);
    }
    return lookup;
  }

  private async lookUp(hash: string): Promise<Principal | null> {
    const key = await this.keys.findOne({ where: { keyHash: hash }, relations: { workspace: true } });
    const principal: Principal | null =
      key && !key.revokedAt && key.workspace
        ? {
            workspaceId: key.workspaceId,
            apiKeyId: key.id,
            tier: key.workspace.tier,
            rateLimitRpm: effectiveRateLimitRpm(key.workspace.tier, key.workspace.customRateLimitRpm),
          }
        : null;
    this.remember(hash, principal, Date.now());
    return principal;
  }

  private remember(hash: string, principal: Principal | null, now: number): void {
    this.cache.delete(hash);
    if (this.cache.size >= KEY_CACHE_MAX_ENTRIES) {
      // Maps iterate in insertion order: the first entry is the oldest.
      this.cache.delete(this.cache.keys().next().value!);
    }
    this.cache.set(hash, { principal, expiresAt: now + KEY_CACHE_TTL_MS });
  }
}

export function hashKey(apiKey: string): string {
  return createHash('sha256').update(apiKey).digest('hex');
}
