import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { User } from '../accounts/entities/user.entity';
import { WalletModule } from '../wallet/wallet.module';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { OperatorConsoleService } from './operator-console.service';
import { OperatorsService } from './operators.service';

/**
 * The service operator's view of every workspace (docs/dashboard.md, "Operator console"):
 * who is an operator, the figures across workspaces, and the audited actions (tier, credit
 * or debit, suspension). Its pages are in dashboard/operator; the CLI grants the role.
 */
@Module({
  imports: [TypeOrmModule.forFeature([User]), WorkspacesModule, WalletModule],
  providers: [OperatorsService, OperatorConsoleService],
  exports: [OperatorsService, OperatorConsoleService],
})
export class OperatorModule {}
