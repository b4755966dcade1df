import { DynamicModule, Module } from '@nestjs/common';
import { APP_FILTER, APP_GUARD, APP_INTERCEPTOR } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { AssistantsModule } from './assistants/assistants.module';
import { ChatModule } from './chat/chat.module';
import { ApiExceptionFilter } from './common/errors/api-exception.filter';
import { ConversationsModule } from './conversations/conversations.module';
import { DashboardModule } from './dashboard/dashboard.module';
import { EmbeddingsModule } from './embeddings/embeddings.module';
import { UnknownRouteModule } from './common/http/unknown-route.module';
import type { AppConfig } from './config/app-config';
import { ConfigModule } from './config/config.module';
import { dataSourceOptions } from './database/data-source';
import { HealthModule } from './health/health.module';
import { MetricsEndpointModule } from './metrics/metrics-endpoint.module';
import { MetricsModule } from './metrics/metrics.module';
import { IdempotencyInterceptor } from './idempotency/idempotency.interceptor';
import { IdempotencyModule } from './idempotency/idempotency.module';
import { LimitsModule } from './limits/limits.module';
import { MessagesModule } from './messages/messages.module';
import { WorkspaceThrottlerGuard } from './limits/workspace-throttler.guard';
import { ModelsApiModule } from './models/models-api.module';
import { PaymentsModule } from './payments/payments.module';
import { DeploymentHealthModule } from './providers/providers.module';
import { ResponsesModule } from './responses/responses.module';
import { UsageModule } from './usage/usage.module';
import { WalletModule } from './wallet/wallet.module';
import { WidgetModule } from './widget/widget.module';
import { ApiKeyGuard } from './workspaces/api-key.guard';
import { WorkspacesModule } from './workspaces/workspaces.module';

/**
 * The guards of every route, in order: authenticate, then count against the workspace's
 * rate. Nest runs them as global guards; the direct route of chat completions runs the same
 * list (app.factory.ts).
 */
export const API_GUARDS = [ApiKeyGuard, WorkspaceThrottlerGuard] as const;

/** The config carries the database URL: the caller (main, CLI, tests) decides which database. */
export interface AppModuleOptions {
  config: AppConfig;
  databaseUrl: string;
}

@Module({})
export class AppModule {
  static register({ config, databaseUrl }: AppModuleOptions): DynamicModule {
    return {
      module: AppModule,
      imports: [
        ConfigModule.forRoot(config),
        TypeOrmModule.forRoot(dataSourceOptions(databaseUrl, config.database)),
        ScheduleModule.forRoot(),
        MetricsModule,
        HealthModule,
        MetricsEndpointModule,
        WorkspacesModule,
        LimitsModule,
        IdempotencyModule,
        ModelsApiModule.register(AssistantsModule),
        WalletModule,
        ChatModule,
        DeploymentHealthModule,
        ResponsesModule,
        MessagesModule,
        EmbeddingsModule,
        UsageModule,
        ConversationsModule,
        PaymentsModule,
        DashboardModule,
        WidgetModule,
        // Last, so that its catch-all route does not shadow the routes of the modules above.
        UnknownRouteModule,
      ],
      providers: [
        ...API_GUARDS.map((guard) => ({ provide: APP_GUARD, useExisting: guard })),
        // Acts only on routes marked @Idempotent().
        { provide: APP_INTERCEPTOR, useExisting: IdempotencyInterceptor },
        { provide: APP_FILTER, useClass: ApiExceptionFilter },
      ],
    };
  }
}
