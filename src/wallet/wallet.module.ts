import { Module } from '@nestjs/common';
import { WalletController } from './wallet.controller';
import { HoldSweeper } from './hold-sweeper';
import { WalletService } from './wallet.service';

@Module({
  controllers: [WalletController],
  providers: [WalletService, HoldSweeper],
  exports: [WalletService],
})
export class WalletModule {}
