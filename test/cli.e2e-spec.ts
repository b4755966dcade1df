import OpenAI from 'openai';
import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { freePort } from '../src/database/embedded-postgres';
import { describeResult, MAIN_JS, ProcessResult, runCli, runCliInProcess, runNode, waitUntil } from './support/processes';
import { openAiClient, startTestApp, TestApp } from './support/test-app';

/**
 * The operator CLI against the database of a running app. Its contract: a command prints
 * exactly one JSON object on stdout and exits 0; a failure prints nothing on stdout,
 * explains itself on stderr and exits 1 (2 for wrong usage, with the usage text).
 *
 * The commands run in-process through the exported `main()` (booting a Node process per case
 * took most of this file's time); two smoke tests at the end run the compiled
 * `dist/src/cli.js` as an operator does, so the exit code and the bare stdout of a real
 * process stay covered.
 */

// The smoke tests spawn processes; on a busy machine a test of several CLI runs needs more than 30 s.
jest.setTimeout(60_000);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

interface Wallet {
  balanceMillicents: number;
  reservedMillicents: number;
  availableMillicents: number;
}
interface TransactionPage {
  data: Array<{ id: string; type: string; amountMillicents: number; balanceAfterMillicents: number; description: string }>;
}
interface Limits {
  data: { tier: string; rateLimitRpm: number };
}

/** A well-formed id that names nothing. */
const MISSING = '00000000-0000-4000-8000-000000000000';
/** Wrong usage: exit 2, the problem and the usage text on stderr. */
const USAGE_CASES: Array<[string[], RegExp]> = [
  [['workspace', 'delete'], /Unknown command "workspace delete"/],
  [[], /No command given/],
  [['workspace', 'create', 'extra'], /Unknown command "workspace create"/],
  [['workspace', 'create', '--bogus', 'x'], /Unknown option '--bogus'/],
  [['workspace', 'create'], /--name is required/],
  [['workspace', 'set-tier', '--tier', 'pro'], /--workspace is required/],
  [['key', 'create'], /--workspace is required/],
  [['wallet', 'topup', '--workspace', MISSING], /--amount is required/],
  [['wallet', 'adjust', '--workspace', MISSING, '--amount', '1.5'], /--amount must be a whole number \(got "1.5"\)/],
  [['workspace', 'create', '--name', 'X', '--balance', 'lots'], /--balance must be a whole number \(got "lots"\)/],
];
/** Malformed ids: exit 1, a clear message. */
const BAD_ID_CASES: Array<[string[], string]> = [
  [['key', 'create', '--workspace', 'not-a-uuid'], 'workspace must be a UUID (got "not-a-uuid").'],
  [['key', 'revoke', '--key', '123'], 'key must be a UUID (got "123").'],
  [['workspace', 'set-tier', '--workspace', 'nope', '--tier', 'pro'], 'workspace must be a UUID (got "nope").'],
  [['wallet', 'topup', '--workspace', 'xyz', '--amount', '5'], 'workspace must be a UUID (got "xyz").'],
];
/** Well-formed commands the service refuses: exit 1, the reason on stderr. */
const REFUSED_CASES: Array<[string[], string]> = [
  [['key', 'revoke', '--key', MISSING], `No API key with id ${MISSING}.`],
  [['key', 'create', '--workspace', MISSING], `No workspace with id ${MISSING}.`],
  [['wallet', 'topup', '--workspace', MISSING, '--amount', '5'], `No wallet for workspace ${MISSING}.`],
  [['workspace', 'create', '--name', 'X', '--tier', 'platinum'], 'tier must be one of free, hobby, pro, team, enterprise.'],
  [['workspace', 'create', '--name', 'X', '--balance', '-5'], 'balance must be a whole, non-negative number of millicents.'],
  [['workspace', 'set-tier', '--workspace', MISSING, '--tier', 'enterprise', '--rpm', '0'], 'rpm must be a positive whole number, or -1 for no limit.'],
  [['wallet', 'topup', '--workspace', MISSING, '--amount', '-5'], 'A topup must be positive; use an adjustment to take money out.'],
  [['wallet', 'adjust', '--workspace', MISSING, '--amount', '0'], 'amount must be a non-zero whole number of millicents.'],
];

describe('operator CLI', () => {
  let t: TestApp;
  let env: Record<string, string>;

  beforeAll(async () => {
    t = await startTestApp();
    env = { DATABASE_URL: t.databaseUrl, LOG_LEVEL: 'error' };
  });
  afterAll(async () => {
    await t?.close();
  });

  /** Runs a command that must succeed; returns the one JSON object it printed. */
  async function cli(...args: string[]): Promise<Record<string, unknown>> {
    const result = await runCliInProcess(args, env);
    const lines = result.stdout.split('\n');
    if (result.code !== 0 || lines.length !== 2 || lines[1] !== '' || result.stderr !== '') {
      throw new Error(`Expected exit 0, one line of JSON and nothing on stderr.\n${describeResult(args, result)}`);
    }
    const parsed: unknown = JSON.parse(lines[0]);
    if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
      throw new Error(`Expected a JSON object.\n${describeResult(args, result)}`);
    }
    return parsed as Record<string, unknown>;
  }

  /** Runs a command that must fail with `code`, nothing on stdout and a message on stderr. */
  async function cliFails(code: number, ...args: string[]): Promise<string> {
    const result: ProcessResult = await runCliInProcess(args, env);
    if (result.code !== code || result.stdout !== '' || result.stderr.trim() === '') {
      throw new Error(`Expected exit ${code}, empty stdout and a message on stderr.\n${describeResult(args, result)}`);
    }
    return result.stderr;
  }

  /** A workspace made by the CLI, as an operator makes one for a customer. */
  async function createWorkspace(tier: string, balance: number) {
    const created = await cli('workspace', 'create', '--name', `CLI ${tier}`, '--tier', tier, '--balance', String(balance));
    return { id: created.workspace_id as string, client: openAiClient(t.baseUrl, created.api_key as string) };
  }

  /** A key never used yet, so the app has no cache entry for it. */
  async function freshClient(workspaceId: string): Promise<OpenAI> {
    const key = await cli('key', 'create', '--workspace', workspaceId);
    return openAiClient(t.baseUrl, key.api_key as string);
  }

  describe('usage partitions and usage purge', () => {
    it('lists the daily partitions to a week ahead, and purges the days out of the window', async () => {
      const listed = (await cli('usage', 'partitions')).data as { name: string; from: string | null; to: string; bytes: number; detaching: boolean }[];
      const day = (offset: number) => new Date(Date.now() + offset * 86_400_000).toISOString().slice(0, 10);
      const names = listed.map((partition) => partition.name);
      expect(names).toContain(`usage_records_p${day(7).replace(/-/g, '')}`);
      const today = listed.find((partition) => partition.name === `usage_records_p${day(0).replace(/-/g, '')}`);
      expect(today).toMatchObject({ from: `${day(0)}T00:00:00.000Z`, to: `${day(1)}T00:00:00.000Z`, detaching: false });
      expect(today!.bytes).toBeGreaterThan(0);
      // The template covers 95 days back (test/support/global-setup.ts); the default window is 90 days, today included.
      const purged = await cli('usage', 'purge');
      expect(purged).toMatchObject({ ran: true, cutoff: `${day(-89)}T00:00:00.000Z`, deleted: 0 });
      const dropped = purged.dropped_partitions as string[];
      expect(dropped).toContain(`usage_records_p${day(-90).replace(/-/g, '')}`);
      expect(dropped.every((name) => name < `usage_records_p${day(-89).replace(/-/g, '')}`)).toBe(true);
      const after = ((await cli('usage', 'partitions')).data as { name: string }[]).map((partition) => partition.name);
      expect(after[0]).toBe(`usage_records_p${day(-89).replace(/-/g, '')}`);
    });
  });

  describe('workspace create', () => {
    it('prints the workspace id and a key that works on the running app', async () => {
      const created = await cli('workspace', 'create', '--name', 'Acme', '--tier', 'free', '--balance', '5000');
      expect(created).toEqual({
        workspace_id: expect.stringMatching(UUID),
        api_key: expect.stringMatching(/^sk-[A-Za-z0-9_-]+$/),
        api_key_id: expect.stringMatching(UUID),
        tier: 'free',
      });
      expect((created.api_key as string).length).toBeGreaterThanOrEqual(35);

      const client = openAiClient(t.baseUrl, created.api_key as string);
      expect(await client.get<Wallet>('/wallet')).toEqual({
        balanceMillicents: 5000,
        reservedMillicents: 0,
        availableMillicents: 5000,
      });
      const ledger = await client.get<TransactionPage>('/wallet/transactions');
      expect(ledger.data).toEqual([
        expect.objectContaining({ type: 'topup', amountMillicents: 5000, balanceAfterMillicents: 5000 }),
      ]);
    });

    it('defaults to the free tier and an empty wallet', async () => {
      const created = await cli('workspace', 'create', '--name', 'Defaults');
      expect(created.tier).toBe('free');
      const client = openAiClient(t.baseUrl, created.api_key as string);
      expect(await client.get<Wallet>('/wallet')).toMatchObject({ balanceMillicents: 0 });
      expect(await client.get<Limits>('/limits')).toMatchObject({ data: { tier: 'free', rateLimitRpm: 5 } });
    });
  });

  describe('workspace set-tier', () => {
    it('moves a workspace to pro, refuses --rpm below enterprise, and sets a custom rate on enterprise', async () => {
      const workspace = await createWorkspace('free', 0);

      expect(await cli('workspace', 'set-tier', '--workspace', workspace.id, '--tier', 'pro')).toEqual({
        workspace_id: workspace.id,
        tier: 'pro',
        custom_rate_limit_rpm: null,
      });
      // The app caches a key's workspace for 5 s: a key never used shows the change at once.
      expect(await (await freshClient(workspace.id)).get('/limits')).toMatchObject({
        data: { tier: 'pro', rateLimitRpm: 60 },
      });

      const refused = await cliFails(1, 'workspace', 'set-tier', '--workspace', workspace.id, '--tier', 'pro', '--rpm', '1000');
      expect(refused).toMatch(/enterprise tier only/);

      expect(
        await cli('workspace', 'set-tier', '--workspace', workspace.id, '--tier', 'enterprise', '--rpm', '1000'),
      ).toEqual({ workspace_id: workspace.id, tier: 'enterprise', custom_rate_limit_rpm: 1000 });
      expect(await (await freshClient(workspace.id)).get('/limits')).toMatchObject({
        data: { tier: 'enterprise', rateLimitRpm: 1000 },
      });

      // Leaving enterprise drops the custom rate.
      expect(await cli('workspace', 'set-tier', '--workspace', workspace.id, '--tier', 'team')).toMatchObject({
        tier: 'team',
        custom_rate_limit_rpm: null,
      });
    });
  });

  describe('keys', () => {
    it('creates a working key for a workspace', async () => {
      const workspace = await createWorkspace('pro', 1234);
      const key = await cli('key', 'create', '--workspace', workspace.id, '--name', 'ci');
      expect(key).toEqual({ id: expect.stringMatching(UUID), api_key: expect.stringMatching(/^sk-[A-Za-z0-9_-]{32,}$/) });
      const client = openAiClient(t.baseUrl, key.api_key as string);
      expect(await client.get('/wallet')).toMatchObject({ balanceMillicents: 1234 });
    });

    it('revokes a key: the app refuses it with 401, and revoking again is not an error', async () => {
      const workspace = await createWorkspace('pro', 0);
      const key = await cli('key', 'create', '--workspace', workspace.id);

      const revoked = await cli('key', 'revoke', '--key', key.id as string);
      expect(revoked).toEqual({ id: key.id, revoked_at: expect.any(String) });
      expect(new Date(revoked.revoked_at as string).toISOString()).toBe(revoked.revoked_at);

      // Never used before the revocation, so the app has nothing cached for it.
      const error = await openAiClient(t.baseUrl, key.api_key as string)
        .get('/wallet')
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.AuthenticationError);
      expect((error as InstanceType<typeof OpenAI.AuthenticationError>).status).toBe(401);

      // The workspace's other key is untouched.
      expect(await workspace.client.get('/wallet')).toMatchObject({ balanceMillicents: 0 });

      expect(await cli('key', 'revoke', '--key', key.id as string)).toEqual(revoked);
    });

    it("sets a key's limits, which GET /v1/key shows, and clears them", async () => {
      const workspace = await createWorkspace('pro', 100_000);
      const key = await cli('key', 'create', '--workspace', workspace.id, '--name', 'capped', '--spend-limit', '5000', '--period', 'weekly');
      const client = openAiClient(t.baseUrl, key.api_key as string);
      expect(await client.get('/key')).toMatchObject({ data: { name: 'capped', limit_millicents: 5_000, limit_reset: 'weekly', allowed_models: null } });
      const set = await cli('key', 'limits', '--key', key.id as string, '--models', 'gpt-4o-mini', '--ips', '127.0.0.1,10.0.0.0/8', '--rpm', '30');
      expect(set).toEqual({
        id: key.id,
        spend_limit_millicents: 5_000,
        spend_limit_period: 'weekly',
        allowed_models: ['gpt-4o-mini'],
        allowed_assistants: null,
        rate_limit_rpm: 30,
        allowed_ips: ['127.0.0.1', '10.0.0.0/8'],
      });
      // The CLI's change reaches the running app within its key cache (5 s).
      expect(await waitUntil(async () => (await client.get<{ data: { rate_limit_rpm: number | null } }>('/key')).data.rate_limit_rpm === 30, 8_000)).toBe(true);
      const cleared = await cli('key', 'limits', '--key', key.id as string, '--spend-limit', 'none', '--models', 'all', '--ips', 'any', '--rpm', 'none');
      expect(cleared).toMatchObject({ spend_limit_millicents: null, allowed_models: null, allowed_ips: null, rate_limit_rpm: null });
      expect(await cliFails(1, 'key', 'limits', '--key', key.id as string, '--ips', 'nowhere')).toContain('is not an IP address or a CIDR range');
      expect(await cliFails(1, 'key', 'limits', '--key', key.id as string, '--period', 'hourly')).toContain('spend_limit_period must be one of');
    });
    it('refuses a key name over 100 characters, unknown models and impossible or unknown assistants, naming them', async () => {
      const workspace = await createWorkspace('pro', 0);
      expect(await cliFails(1, 'key', 'create', '--workspace', workspace.id, '--name', 'n'.repeat(100_000))).toBe('name has at most 100 characters (got 100000).\n');
      const key = await cli('key', 'create', '--workspace', workspace.id, '--name', 'n'.repeat(100));
      const keyId = key.id as string;
      expect(await cliFails(1, 'key', 'create', '--workspace', workspace.id, '--models', 'no-such-model')).toContain('allowed_models: "no-such-model" is not a model of the catalog');
      expect(await cliFails(1, 'key', 'limits', '--key', keyId, '--models', 'gpt-4o-mini,no-such-model')).toContain(
        'allowed_models: "no-such-model" is not a model of the catalog',
      );
      expect(await cliFails(1, 'key', 'limits', '--key', keyId, '--assistants', 'NoSuchSlug')).toContain('allowed_assistants: "NoSuchSlug" is not an assistant slug');
      expect(await cliFails(1, 'key', 'limits', '--key', keyId, '--assistants', 'no-such-slug')).toContain(
        'allowed_assistants: "no-such-slug" is not an assistant of this workspace',
      );
      await cli('assistant', 'create', '--workspace', workspace.id, '--name', 'Support', '--model', 'gpt-4o-mini', '--slug', 'support');
      expect(await cli('key', 'limits', '--key', keyId, '--models', 'gpt-4o-mini', '--assistants', 'support')).toMatchObject({
        allowed_models: ['gpt-4o-mini'],
        allowed_assistants: ['support'],
      });
      // Only the last, valid change was stored; the name is within the bound GET /v1/key answers.
      const { data } = await openAiClient(t.baseUrl, key.api_key as string).get<{ data: { name: string } }>('/key');
      expect(data.name).toHaveLength(100);
    });
  });

  describe('wallet', () => {
    it('books a top-up and a negative adjustment as ledger rows the API shows', async () => {
      const workspace = await createWorkspace('pro', 5000);

      const topup = await cli('wallet', 'topup', '--workspace', workspace.id, '--amount', '2500', '--description', 'Invoice 42');
      expect(topup).toEqual({
        transaction_id: expect.stringMatching(UUID),
        type: 'topup',
        amount_millicents: 2500,
        balance_after_millicents: 7500,
      });
      // A negative amount as a separate argument, as an operator types it.
      const adjustment = await cli('wallet', 'adjust', '--workspace', workspace.id, '--amount', '-100');
      expect(adjustment).toEqual({
        transaction_id: expect.stringMatching(UUID),
        type: 'adjustment',
        amount_millicents: -100,
        balance_after_millicents: 7400,
      });

      expect(await workspace.client.get('/wallet')).toMatchObject({ balanceMillicents: 7400, availableMillicents: 7400 });
      const ledger = await workspace.client.get<TransactionPage>('/wallet/transactions');
      expect(ledger.data.map((row) => [row.id, row.type, row.amountMillicents, row.balanceAfterMillicents])).toEqual([
        [adjustment.transaction_id, 'adjustment', -100, 7400],
        [topup.transaction_id, 'topup', 2500, 7500],
        [expect.any(String), 'topup', 5000, 5000],
      ]);
      expect(ledger.data[1].description).toBe('Invoice 42');
      expect(ledger.data[0].description).toBe('Manual adjustment');
    });

    it('credits once for a repeated idempotency key', async () => {
      const workspace = await createWorkspace('pro', 0);
      const args = ['wallet', 'topup', '--workspace', workspace.id, '--amount', '700', '--idempotency-key', 'k'];
      const first = await cli(...args);
      const second = await cli(...args);
      expect(second).toEqual(first);
      expect(await workspace.client.get('/wallet')).toMatchObject({ balanceMillicents: 700 });
      const ledger = await workspace.client.get<TransactionPage>('/wallet/transactions');
      expect(ledger.data).toHaveLength(1);
    });

    it('refuses an adjustment below zero and changes nothing', async () => {
      const workspace = await createWorkspace('pro', 300);
      const stderr = await cliFails(1, 'wallet', 'adjust', '--workspace', workspace.id, '--amount', '-301');
      expect(stderr.trim()).toBe(
        'The adjustment would take the balance (300) below the amount reserved for requests in flight (0).',
      );
      expect(await workspace.client.get('/wallet')).toMatchObject({ balanceMillicents: 300 });
      expect((await workspace.client.get<TransactionPage>('/wallet/transactions')).data).toHaveLength(1);

      // Down to exactly zero is allowed.
      expect(await cli('wallet', 'adjust', '--workspace', workspace.id, '--amount', '-300')).toMatchObject({
        balance_after_millicents: 0,
      });
    });

    it('refuses a top-up that would take the balance past 2^53 - 1 millicents, and changes nothing', async () => {
      const workspace = await createWorkspace('pro', 9_007_199_254_740_000);
      const stderr = await cliFails(1, 'wallet', 'topup', '--workspace', workspace.id, '--amount', '1000');
      expect(stderr.trim()).toBe(
        'The credit would take the balance (9007199254740000) above 9007199254740991 millicents, the most a wallet can hold.',
      );
      expect(await workspace.client.get('/wallet')).toMatchObject({ balanceMillicents: 9_007_199_254_740_000 });
      expect((await workspace.client.get<TransactionPage>('/wallet/transactions')).data).toHaveLength(1);
    });
  });

  describe('assistants', () => {
    it('creates, lists, updates and deletes assistants, within the tier limit', async () => {
      const { id: workspaceId } = await createWorkspace('hobby', 100_000);
      const created = await cli(
        'assistant', 'create', '--workspace', workspaceId, '--name', 'Docs Helper', '--model', 'gpt-4o-mini',
        '--system-prompt', 'You answer from the docs.', '--temperature', '0.4', '--tools', 'web_search,file_search',
        '--max-tool-iterations', '3',
      );
      expect(created).toEqual({ id: expect.stringMatching(/^[0-9a-f-]{36}$/), slug: 'docs-helper' });

      const listed = (await cli('assistant', 'list', '--workspace', workspaceId)) as { data: Array<Record<string, unknown>> };
      expect(listed.data).toEqual([
        expect.objectContaining({
          id: created.id,
          slug: 'docs-helper',
          model: 'gpt-4o-mini',
          system_prompt: 'You answer from the docs.',
          temperature: 0.4,
          tools: [{ type: 'web_search' }, { type: 'file_search' }],
          max_tool_iterations: 3,
        }),
      ]);

      const updated = await cli('assistant', 'update', '--assistant', created.id as string, '--model', 'gpt-4o', '--tools', 'file_search');
      expect(updated).toMatchObject({ model: 'gpt-4o', tools: [{ type: 'file_search' }], slug: 'docs-helper' });

      // The hobby tier allows two assistants.
      await cli('assistant', 'create', '--workspace', workspaceId, '--name', 'Second', '--model', 'gpt-4o-mini');
      const refused = await cliFails(1, 'assistant', 'create', '--workspace', workspaceId, '--name', 'Third', '--model', 'gpt-4o-mini');
      expect(refused).toContain('hobby tier allows 2 assistants');

      expect(await cli('assistant', 'delete', '--assistant', created.id as string)).toEqual({ id: created.id, deleted: true });
      expect(((await cli('assistant', 'list', '--workspace', workspaceId)) as { data: unknown[] }).data).toHaveLength(1);
      expect(await cliFails(1, 'assistant', 'create', '--workspace', workspaceId, '--name', 'X', '--model', 'gpt-9')).toContain('gpt-9');
    });

    it("chunk settings: stored, refused out of bounds naming the field, applied to documents by document reindex", async () => {
      const { id: workspaceId } = await createWorkspace('pro', 100_000);
      const created = (await cli(
        'assistant', 'create', '--workspace', workspaceId, '--name', 'Chunky', '--model', 'gpt-4o-mini',
        '--chunk-max-tokens', '150', '--chunk-overlap-tokens', '30',
      )) as { id: string };
      const listed = (await cli('assistant', 'list', '--workspace', workspaceId)) as { data: Array<Record<string, unknown>> };
      expect(listed.data[0]).toMatchObject({ chunk_max_tokens: 150, chunk_overlap_tokens: 30 });
      expect(await cliFails(1, 'assistant', 'update', '--assistant', created.id, '--chunk-max-tokens', '5000')).toContain(
        'chunk_max_tokens must be a whole number from 100 to 4096.',
      );
      expect(await cliFails(1, 'assistant', 'update', '--assistant', created.id, '--chunk-overlap-tokens', '76')).toContain(
        'chunk_overlap_tokens must be a whole number from 0 to half of chunk_max_tokens (75).',
      );

      const dir = await mkdtemp(path.join(tmpdir(), 'acs-cli-reindex-'));
      const file = path.join(dir, 'handbook.md');
      const paragraphs = Array.from({ length: 8 }, (_, p) =>
        Array.from({ length: 5 }, (_, s) => `Rule ${p}.${s} of the handbook says how the ${['office', 'kitchen', 'garden'][s % 3]} is kept tidy.`).join(' '),
      );
      await writeFile(file, paragraphs.join('\n\n'));
      // Progress goes to stderr: not the `cli` helper's case.
      const adding = await runCliInProcess(['document', 'add', '--assistant', created.id, '--file', file], env);
      expect(adding.code).toBe(0);
      const added = JSON.parse(adding.stdout) as { id: string; chunks: number };
      expect(added.chunks).toBeGreaterThan(4);

      // New settings apply to new uploads; the stored document keeps its chunks until re-indexed.
      await cli('assistant', 'update', '--assistant', created.id, '--chunk-max-tokens', '800', '--chunk-overlap-tokens', '100');
      const before = (await cli('document', 'list', '--assistant', created.id)) as { data: Array<{ chunks: number }> };
      expect(before.data[0].chunks).toBe(added.chunks);
      expect(await cli('document', 'reindex', '--assistant', created.id)).toEqual({
        assistant_id: created.id,
        documents: 1,
        chunks: 1,
        chunk_max_tokens: 800,
        chunk_overlap_tokens: 100,
      });
      const after = (await cli('document', 'list', '--assistant', created.id)) as { data: Array<{ chunks: number; language: string }> };
      expect(after.data[0]).toMatchObject({ chunks: 1, language: 'english' });
    });

    it('sets the embedding model of document search, per assistant and per workspace; a chat model is refused', async () => {
      const { id: workspaceId } = await createWorkspace('pro', 100_000);
      const created = await cli('assistant', 'create', '--workspace', workspaceId, '--name', 'Searcher', '--model', 'gpt-4o-mini', '--embedding-model', 'text-embedding-3-small');
      const listed = (await cli('assistant', 'list', '--workspace', workspaceId)) as { data: Array<Record<string, unknown>> };
      expect(listed.data).toEqual([expect.objectContaining({ id: created.id, embedding_model: 'text-embedding-3-small' })]);
      expect(await cli('assistant', 'update', '--assistant', created.id as string, '--embedding-model', 'none')).toMatchObject({ embedding_model: null });
      expect(await cliFails(1, 'assistant', 'update', '--assistant', created.id as string, '--embedding-model', 'gpt-4o-mini')).toContain('gpt-4o-mini is a chat model');

      expect(await cli('workspace', 'set-embedding-model', '--workspace', workspaceId, '--model', 'text-embedding-3-large')).toEqual({
        workspace_id: workspaceId,
        embedding_model: 'text-embedding-3-large',
      });
      expect(await cliFails(1, 'workspace', 'set-embedding-model', '--workspace', workspaceId, '--model', 'nope')).toContain("no model 'nope'");
      expect(await cli('workspace', 'set-embedding-model', '--workspace', workspaceId, '--model', 'none')).toEqual({ workspace_id: workspaceId, embedding_model: null });
    });
  });

  /** Refusals that need no workspace of their own. */
  describe('refusals', () => {
    it.each(USAGE_CASES)('wrong usage %j exits 2 with the usage text on stderr', async (args, message) => {
      const stderr = await cliFails(2, ...args);
      expect(stderr).toMatch(message);
      expect(stderr).toMatch(/Usage: npm run cli -- <command>/);
    });

    it.each(BAD_ID_CASES)('a bad id in %j exits 1 with a clear message', async (args, message) => {
      expect((await cliFails(1, ...args)).trim()).toBe(message);
    });

    it.each(REFUSED_CASES)('%j exits 1 with the reason', async (args, message) => {
      expect((await cliFails(1, ...args)).trim()).toBe(message);
    });
  });

  describe('configuration and database problems: exit 1', () => {
    it('reports an invalid DATABASE_URL before touching anything', async () => {
      const result = await runCliInProcess(['key', 'revoke', '--key', MISSING], {
        DATABASE_URL: 'mysql://nope',
        LOG_LEVEL: 'error',
      });
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toMatch(/Invalid configuration:\n {2}- DATABASE_URL must be a URL starting with postgres:\/\//);
    });

    it('fails fast when the database does not answer', async () => {
      const port = await freePort();
      const result = await runCliInProcess(['key', 'revoke', '--key', MISSING], {
        DATABASE_URL: `postgres://nobody:nothing@127.0.0.1:${port}/nowhere`,
        LOG_LEVEL: 'error',
      });
      expect(result).toMatchObject({ code: 1, stdout: '' });
      expect(result.stderr).toMatch(/ECONNREFUSED/);
      expect(result.durationMs).toBeLessThan(15_000);
    });

    it('refuses a catalog with a key pasted into api_key_env: one message, no key, no stack (the server and the CLI)', async () => {
      const pasted = 'sk-proj-abcdef0123456789ABCDEFGHIJ0123456789';
      const file = path.join(await mkdtemp(path.join(tmpdir(), 'acs-catalog-')), 'models.json');
      const model = { id: 'gpt-4o-mini', provider: 'openai', context_length: 128000, input_price: 15000, output_price: 60000 };
      await writeFile(file, JSON.stringify({ models: [{ ...model, deployments: [{ label: 'eu', provider: 'openai', api_key_env: pasted }] }] }));
      const catalogEnv = { DATABASE_URL: t.databaseUrl, MODEL_CATALOG_FILE: file, LOG_LEVEL: 'error' };
      const server = await runNode([MAIN_JS], { ...catalogEnv, PORT: String(await freePort()), HOST: '127.0.0.1' });
      const cliRun = await runCliInProcess(['key', 'revoke', '--key', MISSING], catalogEnv);
      for (const [who, result] of [['server', server], ['cli', cliRun]] as const) {
        const printed = result.stdout + result.stderr;
        expect({ who, code: result.code }).toEqual({ who, code: 1 });
        expect(printed).toContain('deployments[0] ("eu").api_key_env must name an environment variable (letters, digits and _), not hold a key');
        for (const part of [pasted, pasted.slice(8, 20), pasted.slice(-12)]) expect(printed).not.toContain(part);
        expect(printed).not.toMatch(/\n\s+at /);
      }
    });
  });

  /** The compiled CLI as an operator runs it: a process of its own, its exit code, its bare stdout. */
  describe('as a process (dist/src/cli.js)', () => {
    it('prints one line of JSON, nothing on stderr, and exits 0; the key works on the running app', async () => {
      const args = ['workspace', 'create', '--name', 'Smoke', '--tier', 'pro', '--balance', '2500'];
      const result = await runCli(args, env);
      if (result.code !== 0 || result.stderr !== '' || !/^\{.*\}\n$/.test(result.stdout)) {
        throw new Error(`Expected exit 0, one line of JSON and nothing on stderr.\n${describeResult(args, result)}`);
      }
      const created = JSON.parse(result.stdout) as Record<string, string>;
      expect(created).toMatchObject({ workspace_id: expect.stringMatching(UUID), tier: 'pro' });
      const client = openAiClient(t.baseUrl, created.api_key);
      expect(await client.get('/wallet')).toMatchObject({ balanceMillicents: 2500 });
    });

    it('exits 1 with nothing on stdout and the reason on stderr', async () => {
      const args = ['key', 'create', '--workspace', MISSING];
      const result = await runCli(args, env);
      expect({ code: result.code, signal: result.signal, stdout: result.stdout }).toEqual({ code: 1, signal: null, stdout: '' });
      expect(result.stderr).toBe(`No workspace with id ${MISSING}.\n`);
    });
  });
});
