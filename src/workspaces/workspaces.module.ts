import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { LimitsModule } from '../limits/limits.module';
import { WalletModule } from '../wallet/wallet.module';
import { ApiKeyGuard } from './api-key.guard';
import { ApiKeysService } from './api-keys.service';
import { ApiKey } from './entities/api-key.entity';
import { Workspace } from './entities/workspace.entity';
import { WorkspacesService } from './workspaces.service';

@Module({
  imports: [TypeOrmModule.forFeature([Workspace, ApiKey]), WalletModule, LimitsModule],
  providers: [WorkspacesService, ApiKeysService, ApiKeyGuard],
  exports: [WorkspacesService, ApiKeysService, ApiKeyGuard],
})
export class WorkspacesModule {}
