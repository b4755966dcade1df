import { NO_KEY_LIMITS } from '../src/workspaces/key-limits';
import { getRepositoryToken } from '@nestjs/typeorm';
import OpenAI from 'openai';
import { DataSource, Repository } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { ApiError } from '../src/common/errors/api-error';
import { ApiKey } from '../src/workspaces/entities/api-key.entity';
import { ApiKeysService, hashKey, KEY_CACHE_TTL_MS } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { describeResult, runCli } from './support/processes';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * API keys for the dashboard: expiry (enforced through the cache), listing with who made
 * each key, revocation scoped to a workspace, and `last_used_at` written in batches.
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('API keys', () => {
  let t: TestApp;
  let keys: ApiKeysService;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp();
    keys = t.app.get(ApiKeysService);
    db = t.app.get(DataSource);
  });
  afterAll(() => t?.close());

  /** What the SDK raises for a call with `client`, or null when it succeeds. */
  async function callError(client: OpenAI): Promise<unknown> {
    return client.models.list().then(
      () => null,
      (error: unknown) => error,
    );
  }

  function expectRefused(error: unknown): void {
    expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
    const authError = error as InstanceType<typeof OpenAI.AuthenticationError>;
    expect(authError.status).toBe(401);
    expect(authError.code).toBe('invalid_api_key');
  }

  async function lastUsedAt(keyId: string): Promise<Date | null> {
    const [row] = await db.query<Array<{ last_used_at: Date | null }>>('SELECT last_used_at FROM api_keys WHERE id = $1', [keyId]);
    return row.last_used_at;
  }

  async function insertUser(email: string, name: string): Promise<string> {
    const [row] = await db.query<Array<{ id: string }>>('INSERT INTO users (email, name) VALUES ($1, $2) RETURNING id', [email, name]);
    return row.id;
  }

  // First: the periodic flush (every 60 s from the app's start) must not run in between.
  describe('last_used_at', () => {
    it('is not written per request, and one statement writes every pending key', async () => {
      const workspace = await t.createWorkspace();
      const second = await keys.create(workspace.id, 'second');
      const secondClient = openAiClient(t.baseUrl, second.apiKey);
      const unused = await keys.create(workspace.id, 'never used');
      for (let i = 0; i < 3; i++) {
        await workspace.client.models.list();
        await secondClient.models.list();
      }
      expect(await lastUsedAt(workspace.apiKeyId)).toBeNull();
      expect(await lastUsedAt(second.id)).toBeNull();

      const repository = t.app.get<Repository<ApiKey>>(getRepositoryToken(ApiKey));
      const query = jest.spyOn(repository, 'query');
      const before = Date.now();
      try {
        expect(await keys.flushLastUsed()).toBeGreaterThanOrEqual(2);
        expect(query).toHaveBeenCalledTimes(1);
      } finally {
        query.mockRestore();
      }
      for (const id of [workspace.apiKeyId, second.id]) {
        const usedAt = await lastUsedAt(id);
        expect(usedAt).toBeInstanceOf(Date);
        expect(usedAt!.getTime()).toBeLessThanOrEqual(before);
        expect(before - usedAt!.getTime()).toBeLessThan(5_000);
      }
      expect(await lastUsedAt(unused.id)).toBeNull();
      // Nothing left to write.
      expect(await keys.flushLastUsed()).toBe(0);
    });

    it('keeps the uses of a failed flush for the next one, and never moves last_used_at back', async () => {
      const workspace = await t.createWorkspace();
      await db.query(`UPDATE api_keys SET last_used_at = now() + interval '1 hour' WHERE id = $1`, [workspace.apiKeyId]);
      const later = await lastUsedAt(workspace.apiKeyId);
      const other = await keys.create(workspace.id, 'other');
      await workspace.client.models.list();
      await openAiClient(t.baseUrl, other.apiKey).models.list();

      const repository = t.app.get<Repository<ApiKey>>(getRepositoryToken(ApiKey));
      const query = jest.spyOn(repository, 'query').mockRejectedValueOnce(new Error('connection lost'));
      try {
        expect(await keys.flushLastUsed()).toBe(0);
      } finally {
        query.mockRestore();
      }
      expect(await lastUsedAt(other.id)).toBeNull();

      expect(await keys.flushLastUsed()).toBeGreaterThanOrEqual(2);
      expect(await lastUsedAt(other.id)).toBeInstanceOf(Date);
      expect(await lastUsedAt(workspace.apiKeyId)).toEqual(later);
    });

    it('is written when the application shuts down', async () => {
      const workspace = await t.createWorkspace();
      const replica = await startTestApp({ databaseUrl: t.databaseUrl });
      try {
        await openAiClient(replica.baseUrl, workspace.apiKey).models.list();
        expect(await lastUsedAt(workspace.apiKeyId)).toBeNull();
      } finally {
        await replica.close();
      }
      expect(await lastUsedAt(workspace.apiKeyId)).toBeInstanceOf(Date);
    });
  });

  describe('expiry', () => {
    it('refuses an expired key like a revoked one, and accepts one expiring in the future', async () => {
      const workspace = await t.createWorkspace();
      const future = await keys.create(workspace.id, { name: 'next year', expiresAt: new Date(Date.now() + 365 * 86_400_000) });
      expect(await callError(openAiClient(t.baseUrl, future.apiKey))).toBeNull();

      const expired = await keys.create(workspace.id, { name: 'expired', expiresAt: new Date(Date.now() + 60_000) });
      // Expired since: as if an hour had passed. Never used, so nothing is cached.
      await db.query(`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, [expired.id]);
      expectRefused(await callError(openAiClient(t.baseUrl, expired.apiKey)));
    });

    it('stops accepting a cached key at its expiry, before the cache would', async () => {
      const workspace = await t.createWorkspace();
      const expiresAt = new Date(Date.now() + 1_500);
      const key = await keys.create(workspace.id, { name: 'short', expiresAt });
      const client = openAiClient(t.baseUrl, key.apiKey);
      const firstCall = Date.now();
      expect(await callError(client)).toBeNull();
      await sleep(Math.max(0, expiresAt.getTime() - Date.now() + 50));
      expectRefused(await callError(client));
      // Still within the cache's lifetime of the first lookup: the cache alone would have let it in.
      expect(Date.now() - firstCall).toBeLessThan(KEY_CACHE_TTL_MS);
    });

    it.each([
      ['in the past', new Date(Date.now() - 60_000)],
      ['now', new Date()],
      ['not a date', new Date('nope')],
    ])('refuses to create a key expiring %s (400, param expires_at)', async (_, expiresAt) => {
      const workspace = await t.createWorkspace();
      const error = await keys.create(workspace.id, { expiresAt }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ApiError);
      expect(error).toMatchObject({ status: 400, param: 'expires_at' });
    });
  });

  describe('list', () => {
    it('returns the keys newest first, with their creator (named by AccountsService) and status, and never a hash', async () => {
      const workspace = await t.createWorkspace();
      const otherWorkspace = await t.createWorkspace();
      const userId = await insertUser(`ada-${Date.now()}@example.com`, 'Ada Lovelace');
      const byUser = await keys.create(workspace.id, { name: 'from the dashboard', createdBy: userId });
      const expiring = await keys.create(workspace.id, { name: 'expiring', expiresAt: new Date(Date.now() + 60_000) });
      await db.query(`UPDATE api_keys SET expires_at = now() - interval '1 second' WHERE id = $1`, [expiring.id]);
      const revoked = await keys.create(workspace.id, { name: 'revoked', expiresAt: new Date(Date.now() + 60_000) });
      await keys.revoke(revoked.id, workspace.id);

      const list = await keys.list(workspace.id);
      expect(list.map((key) => key.id)).toEqual([revoked.id, expiring.id, byUser.id, workspace.apiKeyId]);
      expect(list.map((key) => key.status)).toEqual(['revoked', 'expired', 'active', 'active']);
      expect(list[2]).toEqual({
        id: byUser.id,
        name: 'from the dashboard',
        displayPrefix: byUser.displayPrefix,
        createdAt: expect.any(Date),
        createdBy: userId,
        expiresAt: null,
        lastUsedAt: null,
        revokedAt: null,
        status: 'active',
        limits: NO_KEY_LIMITS,
      });
      expect(list[3]).toMatchObject({ name: 'default', createdBy: null });
      expect(await t.app.get(AccountsService).namesOf(list.map((key) => key.createdBy))).toEqual(new Map([[userId, 'Ada Lovelace']]));
      expect(list[0].revokedAt).toBeInstanceOf(Date);
      expect(list[1].expiresAt).toBeInstanceOf(Date);
      for (let i = 1; i < list.length; i++) expect(list[i - 1].createdAt.getTime()).toBeGreaterThanOrEqual(list[i].createdAt.getTime());

      const json = JSON.stringify(list);
      for (const apiKey of [workspace.apiKey, byUser.apiKey, expiring.apiKey, revoked.apiKey]) {
        expect(json).not.toContain(hashKey(apiKey));
        expect(json).not.toContain(apiKey);
      }
      expect(json).not.toContain(otherWorkspace.apiKeyId);
      expect(await keys.list(otherWorkspace.id)).toEqual([expect.objectContaining({ id: otherWorkspace.apiKeyId })]);
    });
  });

  describe('revoke', () => {
    it("answers 404 for another workspace's key, exactly as for an unknown id, and leaves it working", async () => {
      const owner = await t.createWorkspace();
      const stranger = await t.createWorkspace();
      const key = await keys.create(owner.id, 'owned');
      const client = openAiClient(t.baseUrl, key.apiKey);

      const foreign = await keys.revoke(key.id, stranger.id).catch((e: unknown) => e);
      const missingId = '00000000-0000-4000-8000-000000000000';
      const unknown = await keys.revoke(missingId, stranger.id).catch((e: unknown) => e);
      expect(foreign).toBeInstanceOf(ApiError);
      expect(foreign).toMatchObject({ status: 404, code: 'api_key_not_found' });
      expect((foreign as ApiError).message).toBe((unknown as ApiError).message.replace(missingId, key.id));
      expect(unknown).toMatchObject({ status: 404, code: 'api_key_not_found' });

      const [row] = await db.query<Array<{ revoked_at: Date | null }>>('SELECT revoked_at FROM api_keys WHERE id = $1', [key.id]);
      expect(row.revoked_at).toBeNull();
      expect(await callError(client)).toBeNull();

      expect(await keys.revoke(key.id, owner.id)).toEqual({ id: key.id, revoked_at: expect.any(String) });
      expectRefused(await callError(client));
    });
  });

  describe('WorkspacesService.create', () => {
    it('makes no key with withApiKey: false', async () => {
      const created = await t.app.get(WorkspacesService).create({ name: 'Signed up', withApiKey: false });
      expect(created).toMatchObject({ apiKey: null, apiKeyId: null });
      expect(created.workspace.id).toMatch(UUID);
      expect(await keys.list(created.workspace.id)).toEqual([]);
    });
  });

  describe('CLI key create --expires', () => {
    let env: Record<string, string>;
    beforeAll(() => {
      env = { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error' };
    });

    it.each([
      ['a date in the past', '2020-01-01', 1, /expires_at must be in the future/],
      ['not a date', 'tomorrow', 2, /--expires must be an ISO 8601 date/],
      ['a day not on the calendar', '2030-02-30', 2, /--expires must be an ISO 8601 date/],
    ])('refuses %s', async (_, expires, code, message) => {
      const workspace = await t.createWorkspace();
      const args = ['key', 'create', '--workspace', workspace.id, '--expires', expires];
      const result = await runCli(args, env);
      if (result.code !== code || result.stdout !== '' || !message.test(result.stderr)) {
        throw new Error(`Expected exit ${code}, nothing on stdout and ${message} on stderr.\n${describeResult(args, result)}`);
      }
      expect(await keys.list(workspace.id)).toHaveLength(1);
    }, 60_000);

    it('creates a key that expires then', async () => {
      const workspace = await t.createWorkspace();
      const args = ['key', 'create', '--workspace', workspace.id, '--name', 'ci', '--expires', '2099-06-30T12:00:00Z'];
      const result = await runCli(args, env);
      if (result.code !== 0 || result.stderr !== '') throw new Error(describeResult(args, result));
      const printed = JSON.parse(result.stdout) as Record<string, string>;
      expect(printed).toEqual({
        id: expect.stringMatching(UUID),
        api_key: expect.stringMatching(/^sk-[A-Za-z0-9_-]{32,}$/),
        expires_at: '2099-06-30T12:00:00.000Z',
      });
      const [row] = await db.query<Array<{ expires_at: Date; name: string }>>('SELECT expires_at, name FROM api_keys WHERE id = $1', [printed.id]);
      expect(row).toEqual({ expires_at: new Date('2099-06-30T12:00:00Z'), name: 'ci' });
      expect(await callError(openAiClient(t.baseUrl, printed.api_key))).toBeNull();
    }, 60_000);
  });
});
