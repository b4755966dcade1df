import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { User } from '../accounts/entities/user.entity';
import { WalletModule } from '../wallet/wallet.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { AuditLogStore } from './audit-log-store';
import { ConsoleWorkspacesStore } from './console-workspaces-store';
import { OperatorConsoleService } from './operator-console.service';
import { OperatorsStore } from './operators-store';
import { PlatformFiguresStore } from './platform-figures-store';
import { OperatorsService } from './operators.service';

/**
 * The service operator's view of every workspace (docs/dashboard.md, "Operator console"):
 * who is an operator, the figures across workspaces, and the audited actions (tier, credit
 * or debit, suspension). Its pages are in dashboard/operator; the CLI grants the role.
 */
@Module({
  imports: [TypeOrmModule.forFeature([User]), WorkspacesModule, WalletModule],
  providers: [OperatorsService, OperatorConsoleService, OperatorsStore, AuditLogStore, ConsoleWorkspacesStore, PlatformFiguresStore],
  exports: [OperatorsService, OperatorConsoleService],
})
export class OperatorModule {}
