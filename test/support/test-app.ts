import { PendingSettlements } from '../../src/common/settlements/pending-settlements';
import type { NestExpressApplication } from '@nestjs/platform-express';
import OpenAI from 'openai';
import type { AddressInfo } from 'node:net';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { getDataSourceToken } from '@nestjs/typeorm';
import type { DataSource } from 'typeorm';
import { createApp } from '../../src/app.factory';
import { AppConfig, loadConfig } from '../../src/config/app-config';
import type { ServerToolClass } from '../../src/tools/server-tool';
import { WorkspacesService } from '../../src/workspaces/workspaces.service';
import { withServerTools } from './extra-server-tools';
import { waitUntil } from './processes';
import { createTestDatabase } from './test-database';
import { nothingHeld } from './wallet-invariants';

/** Well past WALLET_LEASE_IDLE_MS (500 ms) and the lease sweep, on a loaded machine. */
const QUIET_LIMIT_MS = 10_000;

export interface TestApp {
  app: NestExpressApplication;
  /** `http://127.0.0.1:<port>` */
  baseUrl: string;
  databaseUrl: string;
  config: AppConfig;
  createWorkspace(options?: { tier?: string; balanceMillicents?: number; name?: string }): Promise<TestWorkspace>;
  /**
   * Resolves once the settlements of the requests answered so far have committed: a chat
   * request is answered once its settlement is journaled (SETTLEMENT_DURABILITY=journal), a
   * moment before it commits. The API's own reads wait for this; a test that reads the
   * database directly waits for it first.
   */
  settled(workspaceId: string): Promise<void>;
  /**
   * Resolves once the workspace has nothing in flight: its settlements committed, and its
   * budget lease given back (WALLET_LEASE_IDLE_MS after its last request), so that nothing is
   * reserved and no hold is left. Throws if it still holds money after QUIET_LIMIT_MS. For
   * tests that check the wallet's invariants after their requests ended.
   */
  quiet(workspaceId: string): Promise<void>;
  close(): Promise<void>;
}

export interface TestWorkspace {
  id: string;
  apiKey: string;
  apiKeyId: string;
  /** The official OpenAI SDK pointed at the service, as a user would configure it. */
  client: OpenAI;
}

/** What a test may set: any field, and only the upstream providers it talks to. */
export type TestConfigOverrides = Partial<Omit<AppConfig, 'providers'>> & { providers?: Partial<AppConfig['providers']> };

/**
 * The service's defaults, minus anything read from the real environment: settlements are
 * journaled before the answer and committed a moment later (SETTLEMENT_DURABILITY=journal),
 * and a budget lease keeps its spare for WALLET_LEASE_IDLE_MS after its last request. A test
 * that reads the database directly waits for `settled` (or `TestApp.quiet`) first; one about
 * another setting passes it here.
 */
export function testConfig(overrides: TestConfigOverrides = {}): AppConfig {
  const defaults = loadConfig({ LOG_LEVEL: 'error' });
  return { ...defaults, ...overrides, providers: { ...defaults.providers, ...overrides.providers } };
}

/**
 * The whole application, wired by the same factory as production, on a fresh database
 * and a free loopback port.
 */
export async function startTestApp(
  options: {
    config?: TestConfigOverrides;
    databaseUrl?: string;
    /** Server tool classes registered after the built-in ones, for tests of the tool registry. */
    serverTools?: ServerToolClass[];
  } = {},
): Promise<TestApp> {
  const databaseUrl = options.databaseUrl ?? (await createTestDatabase());
  // Its own DATA_DIR (the settlement journal, the session secret), gone with it; one the test passes is the test's.
  const ownDataDir = options.config?.dataDir ? null : await mkdtemp(path.join(tmpdir(), 'acs-test-app-'));
  const config = testConfig({ ...options.config, ...(ownDataDir && { dataDir: ownDataDir }) });
  const create = options.serverTools ? withServerTools(options.serverTools) : undefined;
  const removeDataDir = async () => {
    if (ownDataDir) await rm(ownDataDir, { recursive: true, force: true });
  };
  let app: NestExpressApplication;
  try {
    app = await createApp(config, databaseUrl, { logger: false, create });
    await app.listen(0, '127.0.0.1');
  } catch (error) {
    await removeDataDir();
    throw error;
  }
  const { port } = app.getHttpServer().address() as AddressInfo;
  const baseUrl = `http://127.0.0.1:${port}`;
  return {
    app,
    baseUrl,
    databaseUrl,
    config,
    createWorkspace: async (workspace = {}) => {
      const created = await app.get(WorkspacesService).create({
        name: workspace.name ?? 'Test workspace',
        tier: workspace.tier ?? 'pro',
        balanceMillicents: workspace.balanceMillicents ?? 1_000_000,
      });
      return {
        id: created.workspace.id,
        apiKey: created.apiKey,
        apiKeyId: created.apiKeyId,
        client: openAiClient(baseUrl, created.apiKey),
      };
    },
    settled: (workspaceId) => app.get(PendingSettlements).written(workspaceId),
    quiet: async (workspaceId) => {
      await app.get(PendingSettlements).written(workspaceId);
      const db = app.get<DataSource>(getDataSourceToken());
      if (!(await waitUntil(() => nothingHeld(db, workspaceId), QUIET_LIMIT_MS))) {
        throw new Error(`Workspace ${workspaceId} still holds money ${QUIET_LIMIT_MS} ms after its settlements committed`);
      }
    },
    close: async () => {
      try {
        await app.close();
      } finally {
        await removeDataDir();
      }
    },
  };
}

export function openAiClient(baseUrl: string, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });
}
