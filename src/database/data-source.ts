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

/** The one data source definition, shared by the app, the operator CLI, migrations and tests. */
export function dataSourceOptions(url: string): DataSourceOptions {
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
    // A database host that drops packets must fail a request (503) within seconds, not hang it.
    extra: { max: 20, application_name: 'assistant-chat-service', connectionTimeoutMillis: 10_000 },
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
