import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LimitsModule } from '../limits/limits.module';
import { ModelsModule } from '../models/models.module';
import { WalletModule } from '../wallet/wallet.module';
import { ApiKeyGuard } from './api-key.guard';
import { ApiKeysService } from './api-keys.service';
import { ApiKeysStore } from './api-keys-store';
import { ApiKey } from './entities/api-key.entity';
import { Workspace } from './entities/workspace.entity';
import { WorkspacesService } from './workspaces.service';
import { KeyController } from './key.controller';
import { KeySpendService } from './key-spend';
import { PendingSettlementsModule } from '../common/settlements/pending-settlements';

@Module({
  imports: [TypeOrmModule.forFeature([Workspace, ApiKey]), WalletModule, LimitsModule, ModelsModule, PendingSettlementsModule],
  controllers: [KeyController],
  providers: [WorkspacesService, ApiKeysService, ApiKeysStore, ApiKeyGuard, KeySpendService],
  exports: [WorkspacesService, ApiKeysService, ApiKeyGuard, KeySpendService],
})
export class WorkspacesModule {}
