import 'reflect-metadata';
import { Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { randomUUID } from 'node:crypto';
import { readFile, stat } from 'node:fs/promises';
import * as path from 'node:path';
import { parseArgs } from 'node:util';
import { AssistantsModule } from './assistants/assistants.module';
import { MAX_FILE_BYTES } from './assistants/documents/document-limits';
import { DocumentEmbeddings } from './assistants/documents/document-embeddings';
import { DocumentsModule } from './assistants/documents/documents.module';
import { documentView, DocumentsService, fileTooLarge } from './assistants/documents/documents.service';
import { AssistantFields, AssistantsService } from './assistants/assistants.service';
import { Assistant, ServerToolType } from './assistants/entities/assistant.entity';
import { ApiError } from './common/errors/api-error';
import { redactSecrets, registerSecrets } from './common/secrets';
import { ConfigError, configuredSecrets, loadConfig, type AppConfig } from './config/app-config';
import { ConfigModule } from './config/config.module';
import { openDatabase } from './database/database';
import { dataSourceOptions, runMigrations } from './database/data-source';
import { EmbeddedPostgresError } from './database/embedded-postgres';
import { ModelsModule } from './models/models.module';
import { loadCatalogFile } from './models/model-catalog';
import { ModelsService } from './models/models.service';
import { OperatorModule } from './operator/operator.module';
import { OperatorsService } from './operator/operators.service';
import { PaymentsModule } from './payments/payments.module';
import { ProvidersModule } from './providers/providers.module';
import { ProvidersService } from './providers/providers.service';
import { reportedHealth } from './providers/routing/deployment-health-reporter';
import { UsagePartitions } from './usage/usage-partitions';
import { UsageRetention } from './usage/usage-retention';
import { UsageModule } from './usage/usage.module';
import { AutoTopupSettingsService, autoTopupSettingsJson } from './wallet/auto-topup-settings.service';
import { WalletService } from './wallet/wallet.service';
import { WalletModule } from './wallet/wallet.module';
import { ApiKeysService } from './workspaces/api-keys.service';
import { assertKnownAssistants, type KeyLimits, type KeyLimitsChange } from './workspaces/key-limits';
import { assertUuid } from './common/validation/uuid';
import { WorkspacesModule } from './workspaces/workspaces.module';
import { WorkspacesService } from './workspaces/workspaces.service';

const USAGE = `Usage: npm run cli -- <command> [options]

  workspace create --name <n> [--tier free|hobby|pro|team|enterprise] [--balance <millicents>]
  workspace set-tier --workspace <id> --tier <t> [--rpm <n>]      (--rpm: enterprise only; -1 = no limit)
  workspace set-embedding-model --workspace <id> --model <embedding model id>|none
      (the dense leg of file_search for its assistants that name none; none: lexical-only)
  key create --workspace <id> [--name <label>] [--expires <ISO 8601 date, e.g. 2026-12-31 or 2026-12-31T18:00:00Z>]
      [the limits of key limits]
  key limits --key <id> [--spend-limit <millicents>|none] [--period none|daily|weekly|monthly (UTC)]
      [--models <id,id>|all] [--assistants <slug,slug>|all] [--rpm <n>|none] [--ips <cidr,cidr>|any]
      (sets those given; prints the key's limits)
  key revoke --key <id>
  wallet topup  --workspace <id> --amount <millicents> [--description <text>] [--idempotency-key <k>]
  wallet adjust --workspace <id> --amount <signed millicents> [--description <text>] [--idempotency-key <k>]
  wallet auto-topup --workspace <id> --enabled true|false [--threshold <millicents>] [--amount <millicents>]
      [--monthly-cap <millicents>|none (the default cap)] [--stripe-customer <cus_...>] [--stripe-payment-method <pm_...>]
  assistant create --workspace <id> --name <n> --model <model id> [--slug <s>] [--system-prompt <text>]
      [--temperature <t>] [--max-tokens <n>] [--tools web_search,file_search] [--max-tool-iterations <n>]
      [--description <text>] [--chunk-max-tokens <100-4096, default 800>] [--chunk-overlap-tokens <at most half, default 400>]
      [--embedding-model <embedding model id>|none (the workspace's)]
  assistant list --workspace <id>
  assistant update --assistant <id> [the fields of create]
  assistant delete --assistant <id>
  document add --assistant <id> --file <path>        (.txt .md .html .htm .pdf .docx; progress on stderr)
  document list --assistant <id>
  document remove --document <id>
  document reindex --assistant <id>   (splits its documents again with its chunk settings, from their stored text)
  operator grant  --email <e>       (the account sees the operator console: every workspace, audited actions)
  operator revoke --email <e>       (an email also in OPERATOR_EMAILS stays an operator until removed from it)
  deployments        (every upstream deployment of the catalog: its settings, and its state, errors and
                      latency as the running replicas reported them in the last 30 s)

Each command prints one JSON object. It uses DATABASE_URL, or the embedded database in
DATA_DIR (the running server's, if it is up).`;

/** Wrong usage: exit code 2, as command-line tools do. */
class UsageError extends Error {}

type Options = Record<string, string | undefined>;
type Command = (app: INestApplicationContext, options: Options, io: CliIo) => Promise<object>;

/**
 * Where a run reads its configuration and writes its output. The process's own by default;
 * tests pass their own to run commands in-process, without booting a Node process per case.
 */
export interface CliIo {
  stdout: (text: string) => void;
  stderr: (text: string) => void;
  /** The variables configuration is read from (src/config/app-config.ts). */
  env: NodeJS.ProcessEnv;
}

const PROCESS_IO: CliIo = {
  stdout: (text) => process.stdout.write(text),
  stderr: (text) => process.stderr.write(text),
  env: process.env,
};

const COMMANDS: Record<string, Command> = {
  'workspace create': async (app, o) => {
    const created = await app.get(WorkspacesService).create({
      name: required(o, 'name'),
      tier: o.tier,
      balanceMillicents: o.balance === undefined ? undefined : integer(o, 'balance'),
    });
    return {
      workspace_id: created.workspace.id,
      api_key: created.apiKey,
      api_key_id: created.apiKeyId,
      tier: created.workspace.tier,
    };
  },
  'workspace set-tier': async (app, o) => {
    const workspace = await app
      .get(WorkspacesService)
      .setTier(required(o, 'workspace'), required(o, 'tier'), o.rpm === undefined ? undefined : integer(o, 'rpm'));
    return { workspace_id: workspace.id, tier: workspace.tier, custom_rate_limit_rpm: workspace.customRateLimitRpm };
  },
  'workspace set-embedding-model': async (app, o) => {
    const model = required(o, 'model');
    const workspace = await app.get(DocumentEmbeddings).setWorkspaceModel(required(o, 'workspace'), model === 'none' ? null : model);
    return { workspace_id: workspace.id, embedding_model: workspace.embeddingModel };
  },
  'key create': async (app, o) => {
    const expiresAt = o.expires === undefined ? undefined : isoDate(o, 'expires');
    const workspaceId = required(o, 'workspace');
    const limits = keyLimitsChange(o);
    await assertWorkspaceAssistants(app, workspaceId, limits);
    const key = await app.get(ApiKeysService).create(workspaceId, { name: o.name, expiresAt, limits });
    return { id: key.id, api_key: key.apiKey, ...(key.expiresAt ? { expires_at: key.expiresAt.toISOString() } : {}) };
  },
  'key limits': async (app, o) => {
    const keyId = required(o, 'key');
    const change = keyLimitsChange(o);
    if (change.allowedAssistants) {
      assertUuid(keyId, 'key');
      await assertWorkspaceAssistants(app, (await app.get(ApiKeysService).describe(keyId)).workspaceId, change);
    }
    const { id, limits } = await app.get(ApiKeysService).setLimits(keyId, change);
    return { id, ...keyLimitsJson(limits) };
  },
  'key revoke': async (app, o) => app.get(ApiKeysService).revoke(required(o, 'key')),
  'assistant create': async (app, o) => {
    const assistant = await app.get(AssistantsService).create(required(o, 'workspace'), assistantFields(o));
    return { id: assistant.id, slug: assistant.slug };
  },
  'assistant list': async (app, o) => ({
    data: (await app.get(AssistantsService).list(required(o, 'workspace'))).map(describeAssistant),
  }),
  'assistant update': async (app, o) =>
    describeAssistant(await app.get(AssistantsService).update(required(o, 'assistant'), assistantFields(o))),
  'assistant delete': async (app, o) => app.get(AssistantsService).delete(required(o, 'assistant')),
  'document add': (app, o, io) => addDocument(app, o, io),
  'document list': async (app, o) => {
    const documents = app.get(DocumentsService);
    const assistant = await documents.getAssistant(required(o, 'assistant'));
    return { data: (await documents.list(assistant.id)).map(documentView) };
  },
  'document reindex': async (app, o) => app.get(DocumentsService).reindex(required(o, 'assistant')),
  'document remove': async (app, o) => {
    const documents = app.get(DocumentsService);
    const document = await documents.get(required(o, 'document'));
    return documents.remove(document.workspaceId, document.id);
  },
  deployments: (app) => listDeployments(app),
  'usage partitions': async (app) => {
    // The days from yesterday to a week ahead are made first (as every replica does at start).
    await app.get(UsagePartitions).ensureAround(new Date());
    return { data: await app.get(UsagePartitions).list() };
  },
  'usage purge': async (app) => {
    const result = await app.get(UsageRetention).purgeExpired();
    return { ran: result.ran, cutoff: result.cutoff.toISOString(), dropped_partitions: result.droppedPartitions, deleted: result.deleted };
  },
  'operator grant': (app, o) => app.get(OperatorsService).grant(required(o, 'email')),
  'operator revoke': (app, o) => app.get(OperatorsService).revoke(required(o, 'email')),
  'wallet topup': (app, o) => moveMoney(app, o, 'topup'),
  'wallet adjust': (app, o) => moveMoney(app, o, 'adjustment'),
  'wallet auto-topup': async (app, o) => {
    const autoTopup = app.get(AutoTopupSettingsService);
    const settings = await autoTopup.configure({
      workspaceId: required(o, 'workspace'),
      enabled: boolean(o, 'enabled'),
      thresholdMillicents: o.threshold === undefined ? undefined : integer(o, 'threshold'),
      amountMillicents: o.amount === undefined ? undefined : integer(o, 'amount'),
      monthlyCapMillicents:
        o['monthly-cap'] === undefined ? undefined : o['monthly-cap'] === 'none' ? null : integer(o, 'monthly-cap'),
      customerRef: o['stripe-customer'],
      paymentMethodRef: o['stripe-payment-method'],
    });
    return autoTopupSettingsJson(settings, autoTopup.providerName);
  },
};

/**
 * The catalog's deployments (as this process's configuration builds them: MODEL_CATALOG_FILE
 * and the provider keys), each with the health the servers' replicas wrote in the last 30 s
 * (DeploymentHealthReporter): the worst state of the replicas, their last minute's attempts
 * and failures summed, and the largest of their median latencies. "unknown" when no replica
 * reported it. The key's source is shown, never the key.
 */
async function listDeployments(app: INestApplicationContext): Promise<object> {
  const router = app.get(ProvidersService).router;
  const health = await reportedHealth(app.get(getDataSourceToken()));
  const deployments = app.get(ModelsService).list().flatMap((model) => router.of(model));
  return {
    deployments: deployments.map((d) => {
      const h = health.get(d.id);
      return {
        id: d.id,
        model: d.model.id,
        label: d.label,
        provider: d.served.provider,
        region: d.region ?? null,
        weight: d.weight,
        rpm: d.rpm ?? null,
        tpm: d.tpm ?? null,
        key_source: d.keySource,
        state: h?.state ?? 'unknown',
        cooldown_until: h?.cooldownUntil?.toISOString() ?? null,
        in_flight: h?.inFlight ?? 0,
        requests: h?.requests ?? 0,
        errors: h?.errors ?? 0,
        error_rate: h && h.requests > 0 ? h.errors / h.requests : null,
        p50_ms: h?.p50Ms ?? null,
        replicas: h?.replicas ?? 0,
      };
    }),
  };
}

/** The key limits among the options (`none`, `all` and `any` clear one). */
function keyLimitsChange(o: Options): KeyLimitsChange {
  const list = (name: string, everything: string) => (o[name] === undefined ? undefined : o[name] === everything ? null : o[name]!.split(','));
  const change: KeyLimitsChange = {
    spendLimitMillicents: o['spend-limit'] === undefined ? undefined : o['spend-limit'] === 'none' ? null : integer(o, 'spend-limit'),
    spendLimitPeriod: o.period as KeyLimitsChange['spendLimitPeriod'],
    allowedModels: list('models', 'all'),
    allowedAssistants: list('assistants', 'all'),
    rateLimitRpm: o.rpm === undefined ? undefined : o.rpm === 'none' ? null : integer(o, 'rpm'),
    allowedIps: list('ips', 'any'),
  };
  return Object.fromEntries(Object.entries(change).filter(([, value]) => value !== undefined)) as KeyLimitsChange;
}

/** `--assistants` names assistants of the key's workspace, as the dashboard's checkboxes do (a typo is refused, not stored). */
async function assertWorkspaceAssistants(app: INestApplicationContext, workspaceId: string, change: KeyLimitsChange): Promise<void> {
  if (!change.allowedAssistants) return;
  const slugs = change.allowedAssistants.map((slug) => slug.trim()).filter(Boolean);
  // The shape first: an impossible slug is told as such, without a look at the workspace.
  assertKnownAssistants(slugs, null);
  assertKnownAssistants(slugs, (await app.get(AssistantsService).list(workspaceId)).map((assistant) => assistant.slug));
}

function keyLimitsJson(limits: KeyLimits): object {
  return {
    spend_limit_millicents: limits.spendLimitMillicents,
    spend_limit_period: limits.spendLimitPeriod,
    allowed_models: limits.allowedModels,
    allowed_assistants: limits.allowedAssistants,
    rate_limit_rpm: limits.rateLimitRpm,
    allowed_ips: limits.allowedIps,
  };
}

async function moveMoney(app: INestApplicationContext, o: Options, type: 'topup' | 'adjustment'): Promise<object> {
  const row = await app.get(WalletService).credit({
    workspaceId: required(o, 'workspace'),
    amountMillicents: integer(o, 'amount'),
    type,
    description: o.description,
    // Scoped to the workspace, so two workspaces' scripts cannot collide on a key.
    idempotencyKey: `cli:${required(o, 'workspace')}:${o['idempotency-key'] ?? randomUUID()}`,
  });
  return {
    transaction_id: row.id,
    type: row.type,
    amount_millicents: row.amountMillicents,
    balance_after_millicents: row.balanceAfterMillicents,
  };
}

function assistantFields(o: Options): AssistantFields {
  return {
    name: o.name,
    slug: o.slug,
    description: o.description,
    systemPrompt: o['system-prompt'],
    model: o.model,
    embeddingModel: o['embedding-model'] === undefined ? undefined : o['embedding-model'] === 'none' ? null : o['embedding-model'],
    temperature: o.temperature === undefined ? undefined : decimal(o, 'temperature'),
    maxTokens: o['max-tokens'] === undefined ? undefined : integer(o, 'max-tokens'),
    tools: o.tools === undefined ? undefined : (o.tools.split(',').map((tool) => tool.trim()).filter(Boolean) as ServerToolType[]),
    maxToolIterations: o['max-tool-iterations'] === undefined ? undefined : integer(o, 'max-tool-iterations'),
    chunkMaxTokens: o['chunk-max-tokens'] === undefined ? undefined : integer(o, 'chunk-max-tokens'),
    chunkOverlapTokens: o['chunk-overlap-tokens'] === undefined ? undefined : integer(o, 'chunk-overlap-tokens'),
  };
}

function describeAssistant(a: Assistant) {
  return {
    id: a.id,
    workspace_id: a.workspaceId,
    name: a.name,
    slug: a.slug,
    description: a.description,
    system_prompt: a.systemPrompt,
    model: a.model,
    embedding_model: a.embeddingModel,
    temperature: a.temperature,
    max_tokens: a.maxTokens,
    tools: a.tools,
    max_tool_iterations: a.maxToolIterations,
    chunk_max_tokens: a.chunkMaxTokens,
    chunk_overlap_tokens: a.chunkOverlapTokens,
    created_at: a.createdAt.toISOString(),
    updated_at: a.updatedAt.toISOString(),
  };
}

function decimal(options: Options, name: string): number {
  const raw = required(options, name);
  const value = Number(raw);
  if (!/^-?\d+(\.\d+)?$/.test(raw) || !Number.isFinite(value)) throw new UsageError(`--${name} must be a number (got "${raw}")`);
  return value;
}

/** An ISO 8601 date (midnight UTC) or date and time (local time unless it has a zone), on the calendar. */
function isoDate(options: Options, name: string): Date {
  const raw = required(options, name);
  const match = /^(\d{4})-(\d{2})-(\d{2})(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d{1,3})?)?(?:Z|[+-]\d{2}:\d{2})?)?$/.exec(raw);
  const value = new Date(raw);
  const [year, month, day] = (match ?? []).slice(1).map(Number);
  const day0 = new Date(Date.UTC(year, month - 1, day));
  if (
    !match ||
    Number.isNaN(value.getTime()) ||
    day0.getUTCFullYear() !== year ||
    day0.getUTCMonth() !== month - 1 ||
    day0.getUTCDate() !== day
  ) {
    throw new UsageError(`--${name} must be an ISO 8601 date such as 2026-12-31 or 2026-12-31T18:00:00Z (got "${raw}")`);
  }
  return value;
}

function required(options: Options, name: string): string {
  const value = options[name];
  if (value === undefined || value === '') throw new UsageError(`--${name} is required`);
  return value;
}

function integer(options: Options, name: string): number {
  const raw = required(options, name);
  const value = Number(raw);
  if (!/^-?\d+$/.test(raw) || !Number.isSafeInteger(value)) throw new UsageError(`--${name} must be a whole number (got "${raw}")`);
  return value;
}

function boolean(options: Options, name: string): boolean {
  const raw = required(options, name);
  if (raw !== 'true' && raw !== 'false') throw new UsageError(`--${name} must be true or false (got "${raw}")`);
  return raw === 'true';
}

/**
 * Ingests a file into an assistant's documents. A file over the size limit is refused before
 * it is read. Progress goes to stderr, and only once ingestion has taken a second: stdout
 * carries nothing but the JSON result.
 */
async function addDocument(app: INestApplicationContext, o: Options, io: CliIo): Promise<object> {
  const documents = app.get(DocumentsService);
  const assistant = await documents.getAssistant(required(o, 'assistant'));
  const file = required(o, 'file');
  const fileName = path.basename(file);
  const size = await stat(file).then(
    (stats) => stats.size,
    (error: NodeJS.ErrnoException) => {
      throw ApiError.badRequest(`Cannot read ${file}: ${error.code === 'ENOENT' ? 'no such file' : error.message}.`, 'file');
    },
  );
  if (size > MAX_FILE_BYTES) throw fileTooLarge(fileName, size);
  const started = Date.now();
  let printed = 0;
  const document = await documents.add({
    workspaceId: assistant.workspaceId,
    assistantId: assistant.id,
    fileName,
    data: await readFile(file),
    onProgress: (progress) => {
      const now = Date.now();
      if (now - started < 1_000 || (now - printed < 1_000 && progress.stage !== 'stored')) return;
      printed = now;
      io.stderr(`${progress.message} (${((now - started) / 1000).toFixed(1)} s)\n`);
    },
  });
  return { id: document.id, name: document.name, chunks: document.chunkCount, size_bytes: document.sizeBytes };
}

/** Only what the commands need: no HTTP, no rate limiting, no controllers' routes. */
function cliModule(config: AppConfig, databaseUrl: string) {
  @Module({
    imports: [
      ConfigModule.forRoot(config),
      TypeOrmModule.forRoot({ ...dataSourceOptions(databaseUrl), logging: ['error'] }),
      WorkspacesModule,
      WalletModule,
      AssistantsModule,
      DocumentsModule,
      PaymentsModule,
      ModelsModule,
      OperatorModule,
      UsageModule,
      // The router's deployments, without DeploymentHealthModule: the CLI writes no health of its own.
      ProvidersModule,
    ],
  })
  class CliModule {}
  return CliModule;
}

/** `--amount -500` would read as an unknown flag `-5...`; joined into `--amount=-500` it is a value. */
function joinNegativeNumbers(argv: string[]): string[] {
  const joined: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith('--') && !argv[i].includes('=') && /^-\d/.test(argv[i + 1] ?? '')) {
      joined.push(`${argv[i]}=${argv[++i]}`);
    } else {
      joined.push(argv[i]);
    }
  }
  return joined;
}

/**
 * Runs one command line and answers its exit code: 0 with one JSON object on stdout; 1 with
 * the reason on stderr; 2 for wrong usage, with the usage text. It never exits the process,
 * so tests can call it in-process; `node dist/src/cli.js` exits with what it answers.
 */
export async function main(argv: string[], io: CliIo = PROCESS_IO): Promise<number> {
  try {
    return await run(argv, io);
  } catch (error) {
    if (error instanceof UsageError || (error as { code?: string }).code?.startsWith('ERR_PARSE_ARGS')) {
      io.stderr(`${(error as Error).message}\n\n${USAGE}\n`);
      return 2;
    }
    const message =
      error instanceof ApiError || error instanceof ConfigError || error instanceof EmbeddedPostgresError
        ? error.message
        : `Unexpected error: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`;
    // A stack or a driver's message may carry a configured secret (the CLI's stdout, which prints new keys, is not touched).
    io.stderr(`${redactSecrets(message)}\n`);
    return 1;
  }
}

async function run(argv: string[], io: CliIo): Promise<number> {
  const { positionals, values } = parseArgs({
    args: joinNegativeNumbers(argv),
    allowPositionals: true,
    strict: true,
    options: Object.fromEntries(
      [
        'name',
        'tier',
        'balance',
        'workspace',
        'rpm',
        'key',
        'amount',
        'description',
        'idempotency-key',
        'assistant',
        'model',
        'slug',
        'system-prompt',
        'temperature',
        'max-tokens',
        'tools',
        'max-tool-iterations',
        'chunk-max-tokens',
        'chunk-overlap-tokens',
        'embedding-model',
        'file',
        'document',
        'enabled',
        'threshold',
        'monthly-cap',
        'stripe-customer',
        'stripe-payment-method',
        'expires',
        'email',
        'spend-limit',
        'period',
        'models',
        'assistants',
        'ips',
      ].map((name) => [
        name,
        { type: 'string' as const },
      ]),
    ),
  });
  // `deployments` is the one command of a single word.
  const words = positionals[0] === 'deployments' ? 1 : 2;
  const commandName = positionals.slice(0, words).join(' ');
  const command = COMMANDS[commandName];
  if (!command || positionals.length !== words) throw new UsageError(commandName ? `Unknown command "${commandName}"` : 'No command given');

  const config = loadConfig(io.env);
  registerSecrets(configuredSecrets(config));
  // Before the database and Nest, as in main.ts: a bad catalog is told in one message, without a stack.
  if (config.modelCatalogFile) loadCatalogFile(config.modelCatalogFile);
  const database = await openDatabase(config);
  let app: INestApplicationContext | undefined;
  try {
    await runMigrations(database.url);
    // abortOnError: false, so a module that fails to start is reported below as any other
    // error (and the embedded database stopped) instead of Nest exiting the process itself.
    app = await NestFactory.createApplicationContext(cliModule(config, database.url), {
      logger: ['error'],
      abortOnError: false,
    });
    const result = await command(app, values as Options, io);
    io.stdout(`${JSON.stringify(result)}\n`);
    return 0;
  } finally {
    await app?.close();
    await database.stop();
  }
}

if (require.main === module) {
  void main(process.argv.slice(2)).then((code) => process.exit(code));
}
