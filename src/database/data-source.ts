import { DataSource, DataSourceOptions } from 'typeorm';
import { MIGRATIONS } from '../../migrations';
import { Invitation } from '../accounts/entities/invitation.entity';
import { Membership } from '../accounts/entities/membership.entity';
import { OneTimeToken } from '../accounts/entities/one-time-token.entity';
import { User } from '../accounts/entities/user.entity';
import { Assistant } from '../assistants/entities/assistant.entity';
import { DocumentChunk } from '../assistants/documents/entities/document-chunk.entity';
import { Document } from '../assistants/documents/entities/document.entity';
import { ConversationMessage } from '../conversations/entities/conversation-message.entity';
import { Conversation } from '../conversations/entities/conversation.entity';
import { ApiKey } from '../workspaces/entities/api-key.entity';
import { Workspace } from '../workspaces/entities/workspace.entity';
import { WidgetConversation } from '../widget/entities/widget-conversation.entity';
import { Widget } from '../widget/entities/widget.entity';
import { UsageRecord } from '../usage/entities/usage-record.entity';
import { NerfingRule } from '../limits/nerfing/entities/nerfing-rule.entity';
import { AutoTopupAttempt } from '../wallet/entities/auto-topup-attempt.entity';
import { AutoTopupSettings } from '../wallet/entities/auto-topup-settings.entity';
import { WalletHold } from '../wallet/entities/wallet-hold.entity';
import { WalletTransaction } from '../wallet/entities/wallet-transaction.entity';
import { Wallet } from '../wallet/entities/wallet.entity';
import { BoundedClient, type BoundedClientConfig } from './bounded-client';

export const ENTITIES = [
  Workspace,
  ApiKey,
  Wallet,
  WalletTransaction,
  WalletHold,
  AutoTopupSettings,
  AutoTopupAttempt,
  UsageRecord,
  Assistant,
  Document,
  DocumentChunk,
  Conversation,
  ConversationMessage,
  User,
  Membership,
  Invitation,
  OneTimeToken,
  Widget,
  WidgetConversation,
  NerfingRule,
];

/** How long the service's statements may wait on PostgreSQL (DATABASE_*_TIMEOUT_MS). */
export interface DatabaseBounds {
  statementTimeoutMs: number;
  answerTimeoutMs: number;
  connectTimeoutMs: number;
}

/** Getting a connection when no bounds are given (the CLI, migrations): an unreachable host still fails, not hangs. */
const DEFAULT_CONNECT_TIMEOUT_MS = 10_000;

/**
 * A transaction left open by a client that stopped talking (a process frozen mid-way) holds
 * its row locks; PostgreSQL ends it after this long, so the wallet rows it locked come back.
 */
const IDLE_IN_TRANSACTION_TIMEOUT_MS = 60_000;

/**
 * The pool's connection settings. With `bounds` (the service): every statement is cancelled
 * by PostgreSQL past the statement timeout, a lock waited for past the same, a server that
 * answers nothing has its connection dropped past the answer timeout, and a connection is
 * waited for (pool queue and connecting) at most the connect timeout: a request then gets a
 * 503. Without (the operator CLI, migrations, whose statements may legitimately be long):
 * only the connect timeout.
 */
function poolOptions(bounds?: DatabaseBounds): Record<string, unknown> {
  const common = { max: 20, application_name: 'assistant-chat-service', Client: BoundedClient };
  if (!bounds) return { ...common, connectionTimeoutMillis: DEFAULT_CONNECT_TIMEOUT_MS };
  return {
    ...common,
    connectionTimeoutMillis: bounds.connectTimeoutMs,
    statement_timeout: bounds.statementTimeoutMs,
    lock_timeout: bounds.statementTimeoutMs,
    idle_in_transaction_session_timeout: IDLE_IN_TRANSACTION_TIMEOUT_MS,
    answerTimeoutMillis: bounds.answerTimeoutMs,
  } satisfies BoundedClientConfig & Record<string, unknown>;
}

/**
 * The one data source definition, shared by the app, the operator CLI, migrations and tests.
 * The service passes its bounds (see `poolOptions`).
 */
export function dataSourceOptions(url: string, bounds?: DatabaseBounds): DataSourceOptions {
  return {
    type: 'postgres',
    url,
    entities: ENTITIES,
    migrations: MIGRATIONS,
    migrationsTableName: 'migrations',
    synchronize: false,
    migrationsRun: false,
    // Query errors surface as exceptions, logged once with their request id by the exception filter.
    logging: ['warn', 'migration'],
    // A database that does not answer must fail a request (503) within seconds, not hang it.
    extra: poolOptions(bounds),
  };
}

/** Any number for this lock key; it only has to be the same in every replica. */
const MIGRATION_LOCK_KEY = 4_242_001;

/**
 * Applies pending migrations under an advisory lock, so replicas starting together
 * migrate once and the others wait. Returns the names of the migrations applied.
 */
export async function runMigrations(url: string): Promise<string[]> {
  const dataSource = new DataSource({ ...dataSourceOptions(url), logging: ['error'] });
  await dataSource.initialize();
  const lock = dataSource.createQueryRunner();
  try {
    await lock.connect();
    await lock.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK_KEY]);
    const applied = await dataSource.runMigrations({ transaction: 'each' });
    return applied.map((migration) => migration.name);
  } finally {
    await lock.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK_KEY]).catch(() => undefined);
    await lock.release();
    await dataSource.destroy();
  }
}
