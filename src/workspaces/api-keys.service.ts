import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap } from '@nestjs/common';
import { createHash, randomBytes } from 'node:crypto';
import { EntityManager } from 'typeorm';
import { ApiError } from '../common/errors/api-error';
import { assertUuid } from '../common/validation/uuid';
import type { Principal } from '../common/http/request-context';
import { ApiKey } from './entities/api-key.entity';
import { ApiKeysStore } from './api-keys-store';
import { effectiveRateLimitRpm } from '../limits/tier-policy';
import { ModelsService } from '../models/models.service';
import { addressRanges, checkedKeyLimits, hasKeyLimits, KeyLimits, KeyLimitsChange, NO_KEY_LIMITS } from './key-limits';

/** `sk-` and 43 characters of base64url: 256 bits from the CSPRNG. */
const KEY_FORMAT = /^sk-[A-Za-z0-9_-]{32,200}$/;
const DISPLAY_PREFIX_LENGTH = 'sk-'.length + 8;
/** A key's name is a label (copied into every usage record of the key and into GET /v1/key), not a document. */
export const KEY_NAME_MAX_LENGTH = 100;

/**
 * How long a key lookup is trusted. A revoked key (or a tier change) takes effect on
 * every replica within this time, which keeps the database off the request hot path.
 * A key's own expiry is never trusted past: its cache entry ends at the expiry.
 */
export const KEY_CACHE_TTL_MS = 5_000;
const KEY_CACHE_MAX_ENTRIES = 10_000;

/**
 * `last_used_at` is written in batches, this often (and at shutdown), never once per
 * request: on each replica, one UPDATE per interval for all the keys used in it.
 */
export const LAST_USED_FLUSH_INTERVAL_MS = 60_000;
/** Keys whose use waits to be written; beyond this (a long database outage) new ones are dropped. */
const LAST_USED_MAX_PENDING = 100_000;

export interface CreateApiKeyOptions {
  name?: string | null;
  /** Must be in the future; null or absent: the key does not expire. */
  expiresAt?: Date | null;
  /** The dashboard user who makes it; absent for the CLI and first start. */
  createdBy?: string | null;
  /** Its limits beyond the workspace's (see key-limits.ts); absent: none. */
  limits?: KeyLimitsChange;
}

export interface CreatedApiKey {
  id: string;
  /** The secret: shown once, never stored. */
  apiKey: string;
  displayPrefix: string;
  expiresAt: Date | null;
}

export type ApiKeyStatus = 'active' | 'revoked' | 'expired';

/** A key as the dashboard lists it: never its hash. */
export interface ApiKeySummary {
  id: string;
  name: string | null;
  /** `sk-` and the first 8 characters. */
  displayPrefix: string;
  createdAt: Date;
  /**
   * The user who made it; null for keys made by the CLI or at first start (or whose user is
   * gone). Their name is the accounts module's (AccountsService.namesOf).
   */
  createdBy: string | null;
  expiresAt: Date | null;
  /** Coarse: written every LAST_USED_FLUSH_INTERVAL_MS by each replica. */
  lastUsedAt: Date | null;
  revokedAt: Date | null;
  /** Revoked wins over expired. */
  status: ApiKeyStatus;
  limits: KeyLimits;
}

@Injectable()
export class ApiKeysService implements OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('ApiKeys');
  /** SHA-256 of a key -> who it belongs to (null: unknown, revoked or expired), with an expiry. */
  private readonly cache = new Map<string, { principal: Principal | null; expiresAt: number }>();
  /** Lookups under way: concurrent requests with the same key share one query. */
  private readonly lookups = new Map<string, Promise<Principal | null>>();
  /** Bumped by each revocation, so a lookup that was under way does not cache what it read before. */
  private cacheGeneration = 0;

  /** Key id -> time (ms) of its last successful authentication here, not yet written. */
  private readonly pendingUses = new Map<string, number>();
  private flushing: Promise<number> | null = null;
  private flushTimer: NodeJS.Timeout | null = null;
  private warnedFull = false;

  constructor(
    private readonly store: ApiKeysStore,
    private readonly models: ModelsService,
  ) {}

  /** What a key's allowed models are checked against. */
  private readonly catalog = {
    isModel: (id: string) => this.models.find(id) !== undefined,
    aliasOf: (name: string) => this.models.resolve(name)?.id,
  };

  onApplicationBootstrap(): void {
    this.flushTimer = setInterval(() => void this.flushLastUsed(), LAST_USED_FLUSH_INTERVAL_MS).unref();
  }

  /** Before TypeORM closes the pool (in its onApplicationShutdown): the last uses are written. */
  async beforeApplicationShutdown(): Promise<void> {
    if (this.flushTimer) clearInterval(this.flushTimer);
    this.flushTimer = null;
    await this.flushLastUsed();
  }

  /**
   * A new key. `options` is its name, or the dashboard's fields. In the caller's transaction
   * when given one (a new workspace and its first key commit together).
   */
  async create(
    workspaceId: string,
    options?: string | CreateApiKeyOptions,
    manager?: EntityManager,
  ): Promise<CreatedApiKey> {
    assertUuid(workspaceId, 'workspace');
    const fields: CreateApiKeyOptions = typeof options === 'string' ? { name: options } : (options ?? {});
    const { name = null, expiresAt = null, createdBy = null } = fields;
    // The same bound for the CLI, the dashboard and first start: the name is copied into every usage record.
    if (name !== null && name.length > KEY_NAME_MAX_LENGTH) {
      throw ApiError.badRequest(`name has at most ${KEY_NAME_MAX_LENGTH} characters (got ${name.length}).`, 'name');
    }
    const limits = checkedKeyLimits(NO_KEY_LIMITS, fields.limits ?? {}, this.catalog);
    if (expiresAt !== null) {
      if (!(expiresAt instanceof Date) || Number.isNaN(expiresAt.getTime())) {
        throw ApiError.badRequest('expires_at must be a valid date.', 'expires_at');
      }
      if (expiresAt.getTime() <= Date.now()) {
        throw ApiError.badRequest('expires_at must be in the future.', 'expires_at');
      }
    }
    if (createdBy !== null) assertUuid(createdBy, 'created_by');

    if (!(await this.store.workspaceExists(workspaceId, manager))) throw ApiError.notFound(`No workspace with id ${workspaceId}.`, 'workspace_not_found');
    const apiKey = `sk-${randomBytes(32).toString('base64url')}`;
    const row = await this.store.insert(
      {
        workspaceId,
        name,
        keyHash: hashKey(apiKey),
        displayPrefix: apiKey.slice(0, DISPLAY_PREFIX_LENGTH),
        revokedAt: null,
        createdBy,
        expiresAt,
        lastUsedAt: null,
        ...limits,
      },
      manager,
    );
    return { id: row.id, apiKey, displayPrefix: row.displayPrefix, expiresAt: row.expiresAt };
  }

  /** The workspace's keys, newest first, with the id of who made them. Revoked and expired ones included. */
  async list(workspaceId: string): Promise<ApiKeySummary[]> {
    assertUuid(workspaceId, 'workspace');
    const rows = await this.store.summaries(workspaceId);
    const now = Date.now();
    return rows.map((row) => ({
      id: row.id,
      name: row.name,
      displayPrefix: row.display_prefix,
      createdAt: row.created_at,
      createdBy: row.created_by,
      expiresAt: row.expires_at,
      lastUsedAt: row.last_used_at,
      revokedAt: row.revoked_at,
      status: row.revoked_at ? 'revoked' : row.expires_at && row.expires_at.getTime() <= now ? 'expired' : 'active',
      limits: {
        spendLimitMillicents: row.spend_limit_millicents === null ? null : Number(row.spend_limit_millicents),
        spendLimitPeriod: row.spend_limit_period,
        allowedModels: row.allowed_models,
        allowedAssistants: row.allowed_assistants,
        rateLimitRpm: row.rate_limit_rpm,
        allowedIps: row.allowed_ips,
      },
    }));
  }

  /**
   * Sets a key's limits (the fields of `change`; null clears one). With `workspaceId`, a key of
   * another workspace is not found. Takes effect at once in this process, on other replicas
   * within KEY_CACHE_TTL_MS; a lowered spending limit holds for requests admitted after it.
   */
  async setLimits(keyId: string, change: KeyLimitsChange, workspaceId?: string): Promise<{ id: string; limits: KeyLimits }> {
    assertUuid(keyId, 'key');
    if (workspaceId !== undefined) assertUuid(workspaceId, 'workspace');
    const key = await this.store.find(keyId, workspaceId);
    if (!key) throw ApiError.notFound(`No API key with id ${keyId}.`, 'api_key_not_found');
    const limits = checkedKeyLimits(limitsOf(key), change, this.catalog);
    await this.store.update(keyId, limits);
    this.forget(key.keyHash);
    return { id: keyId, limits };
  }

  /** The key's own row, for GET /v1/key: its name, limits and dates. */
  async describe(keyId: string): Promise<ApiKey> {
    const key = await this.store.find(keyId);
    if (!key) throw ApiError.notFound(`No API key with id ${keyId}.`, 'api_key_not_found');
    return key;
  }

  /** Drops a key's cache entry (and a lookup under way) after a change to it. */
  private forget(keyHash: string): void {
    this.cacheGeneration++;
    this.cache.delete(keyHash);
    this.lookups.delete(keyHash);
  }

  /**
   * Revokes a key; revoking it again is not an error. With `workspaceId`, a key of another
   * workspace is not found, exactly like an unknown id. Takes effect at once in this
   * process, on other replicas within KEY_CACHE_TTL_MS.
   */
  async revoke(keyId: string, workspaceId?: string): Promise<{ id: string; revoked_at: string }> {
    assertUuid(keyId, 'key');
    if (workspaceId !== undefined) assertUuid(workspaceId, 'workspace');
    const key = await this.store.find(keyId, workspaceId);
    if (!key) throw ApiError.notFound(`No API key with id ${keyId}.`, 'api_key_not_found');
    const revokedAt = key.revokedAt ?? new Date();
    if (!key.revokedAt) await this.store.update(keyId, { revokedAt });
    this.forget(key.keyHash);
    return { id: keyId, revoked_at: revokedAt.toISOString() };
  }

  /**
   * Forgets every cached lookup, so that a workspace's new status (a suspension) takes effect
   * on this replica at once; other replicas see it within KEY_CACHE_TTL_MS. Rare enough that
   * clearing the whole cache costs less than indexing it by workspace.
   */
  forgetCachedLookups(): void {
    this.cacheGeneration++;
    this.cache.clear();
    this.lookups.clear();
  }

  /**
   * True when this process has found the key valid before (its cache entry, fresh or
   * expired, names a caller). Such a key is not a guess, so the guard does not count it
   * against its client address.
   */
  seenValid(apiKey: string): boolean {
    return KEY_FORMAT.test(apiKey) && Boolean(this.cache.get(hashKey(apiKey))?.principal);
  }

  /** The caller a bearer key stands for, or null for a malformed, unknown, revoked or expired key. */
  async authenticate(apiKey: string): Promise<Principal | null> {
    if (!KEY_FORMAT.test(apiKey)) return null;
    const hash = hashKey(apiKey);
    const cached = this.cache.get(hash);
    if (cached && cached.expiresAt > Date.now()) return cached.principal;

    let lookup = this.lookups.get(hash);
    if (!lookup) {
      lookup = this.lookUp(hash).finally(() => this.lookups.delete(hash));
      this.lookups.set(hash, lookup);
    }
    return lookup;
  }

  /**
   * Notes that a key was just used: memory only. The database learns it at the next flush
   * (every LAST_USED_FLUSH_INTERVAL_MS, and at shutdown).
   */
  recordUse(apiKeyId: string): void {
    if (this.pendingUses.size >= LAST_USED_MAX_PENDING && !this.pendingUses.has(apiKeyId)) {
      if (!this.warnedFull) {
        this.warnedFull = true;
        this.logger.warn(`${LAST_USED_MAX_PENDING} keys' last use wait to be written; further keys' are dropped until a flush succeeds.`);
      }
      return;
    }
    this.pendingUses.set(apiKeyId, Date.now());
  }

  /**
   * Writes every pending last use in one statement; resolves to the number of keys written.
   * Never rejects: a failure is logged and the uses are kept for the next try. GREATEST
   * makes it safe for replicas (and late flushes) to write in any order.
   */
  async flushLastUsed(): Promise<number> {
    // One flush at a time; a call during a flush writes what arrived since it started.
    while (this.flushing) await this.flushing;
    if (this.pendingUses.size === 0) return 0;
    this.flushing = this.writePendingUses().finally(() => (this.flushing = null));
    return this.flushing;
  }

  private async writePendingUses(): Promise<number> {
    const batch = [...this.pendingUses];
    this.pendingUses.clear();
    try {
      await this.store.writeLastUsed(batch);
      this.warnedFull = false;
      return batch.length;
    } catch (error) {
      this.logger.warn(`Could not write the last use of ${batch.length} API keys; will retry: ${String(error)}`);
      for (const [id, usedAt] of batch) {
        const newer = this.pendingUses.get(id);
        if (newer !== undefined) continue; // used again meanwhile: that time is later
        if (this.pendingUses.size >= LAST_USED_MAX_PENDING) break;
        this.pendingUses.set(id, usedAt);
      }
      return 0;
    }
  }

  private async lookUp(hash: string): Promise<Principal | null> {
    const generation = this.cacheGeneration;
    const key = await this.store.findByHashWithWorkspace(hash);
    const now = Date.now();
    const expiresAt = key?.expiresAt ? key.expiresAt.getTime() : Infinity;
    const principal: Principal | null =
      key && !key.revokedAt && expiresAt > now && key.workspace
        ? {
            workspaceId: key.workspaceId,
            apiKeyId: key.id,
            tier: key.workspace.tier,
            rateLimitRpm: effectiveRateLimitRpm(key.workspace.tier, key.workspace.customRateLimitRpm),
            suspended: key.workspace.status === 'suspended',
            apiKeyName: key.name,
            ...limitsOfKey(key),
          }
        : null;
    // A revocation while this query ran: what it read may be stale, so it is not cached.
    if (generation === this.cacheGeneration) {
      this.remember(hash, principal, Math.min(now + KEY_CACHE_TTL_MS, principal ? expiresAt : Infinity));
    }
    return principal;
  }

  private remember(hash: string, principal: Principal | null, expiresAt: number): void {
    this.cache.delete(hash);
    if (this.cache.size >= KEY_CACHE_MAX_ENTRIES) {
      // Maps iterate in insertion order: the first entry is the oldest.
      this.cache.delete(this.cache.keys().next().value!);
    }
    this.cache.set(hash, { principal, expiresAt });
  }
}

/** A key row's limits. */
export function limitsOf(key: ApiKey): KeyLimits {
  return {
    spendLimitMillicents: key.spendLimitMillicents,
    spendLimitPeriod: key.spendLimitPeriod,
    allowedModels: key.allowedModels,
    allowedAssistants: key.allowedAssistants,
    rateLimitRpm: key.rateLimitRpm,
    allowedIps: key.allowedIps,
  };
}

/** What a principal carries of its key's limits: nothing for a key without any. */
function limitsOfKey(key: ApiKey): Pick<Principal, 'keyLimits' | 'allowedFrom'> {
  const limits = limitsOf(key);
  if (!hasKeyLimits(limits)) return {};
  return { keyLimits: limits, ...(limits.allowedIps && { allowedFrom: addressRanges(limits.allowedIps) }) };
}

export function hashKey(apiKey: string): string {
  // The guard asks twice per request (seenValid, then authenticate): the last key's hash is kept.
  if (lastHashed?.key !== apiKey) lastHashed = { key: apiKey, hash: createHash('sha256').update(apiKey).digest('hex') };
  return lastHashed.hash;
}
let lastHashed: { key: string; hash: string } | undefined;
