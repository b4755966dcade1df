import { PendingSettlements } from '../../src/common/settlements/pending-settlements';
import type { NestExpressApplication } from '@nestjs/platform-express';
import OpenAI from 'openai';
import type { AddressInfo } from 'node:net';
import { createApp } from '../../src/app.factory';
import { AppConfig, loadConfig } from '../../src/config/app-config';
import type { ServerToolClass } from '../../src/tools/server-tool';
import { WorkspacesService } from '../../src/workspaces/workspaces.service';
import { withServerTools } from './extra-server-tools';
import { createTestDatabase } from './test-database';

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

/** Defaults as on a developer's machine, minus anything read from the real environment. */
export function testConfig(overrides: TestConfigOverrides = {}): AppConfig {
  // Budget leases go back as soon as nothing is in flight, so that a test sees `reserved`
  // back at 0 when its request is answered (test/wallet-leases covers the idle delay).
  // Requests are answered once their settlement has committed, so that a test may read the
  // database as soon as it has its answer; the default, answering once the settlement is
  // journaled, is what test/settlement-journal covers (and every spawned service process runs).
  const defaults = { ...loadConfig({ LOG_LEVEL: 'error' }), walletLeaseIdleMs: 0, settlementDurability: 'commit' as const };
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
  const config = testConfig(options.config);
  const create = options.serverTools ? withServerTools(options.serverTools) : undefined;
  const app = await createApp(config, databaseUrl, { logger: false, create });
  await app.listen(0, '127.0.0.1');
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
    close: () => app.close(),
  };
}

export function openAiClient(baseUrl: string, apiKey: string): OpenAI {
  return new OpenAI({ baseURL: `${baseUrl}/v1`, apiKey, maxRetries: 0, timeout: 10_000 });
}
