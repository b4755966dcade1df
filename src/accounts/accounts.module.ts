import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { WorkspacesModule } from '../workspaces/workspaces.module';
import { AccountsService } from './accounts.service';
import { AccountsStore } from './accounts-store';
import { Invitation } from './entities/invitation.entity';
import { Membership } from './entities/membership.entity';
import { OneTimeToken } from './entities/one-time-token.entity';
import { User } from './entities/user.entity';
import { MembersService } from './members.service';
import { MembersStore } from './members-store';

/** People who use the dashboard, their credentials, and their memberships in workspaces. */
@Module({
  imports: [TypeOrmModule.forFeature([User, Membership, Invitation, OneTimeToken]), WorkspacesModule],
  providers: [AccountsService, AccountsStore, MembersService, MembersStore],
  exports: [AccountsService, MembersService],
})
export class AccountsModule {}
