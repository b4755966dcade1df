import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { PendingSettlementsModule } from '../common/settlements/pending-settlements';
import { MetricsModule } from '../metrics/metrics.module';
import { PaymentsModule } from '../payments/payments.module';
import { AutoTopupAttempts } from './auto-topup-attempts';
import { AutoTopupRetryJob } from './auto-topup-retry.job';
import { AutoTopupScheduler } from './auto-topup-scheduler';
import { AutoTopupSettingsService } from './auto-topup-settings.service';
import { AutoTopupAttempt } from './entities/auto-topup-attempt.entity';
import { AutoTopupSettings } from './entities/auto-topup-settings.entity';
import { WalletHold } from './entities/wallet-hold.entity';
import { WalletTransaction } from './entities/wallet-transaction.entity';
import { Wallet } from './entities/wallet.entity';
import { HoldSweeper } from './hold-sweeper';
import { LedgerQueryService } from './ledger-query.service';
import { TopupCheckoutService } from './topup-checkout.service';
import { WalletController } from './wallet.controller';
import { WalletLeases } from './wallet-leases';
import { WalletMetrics } from './wallet-metrics';
import { WalletService } from './wallet.service';

/**
 * The wallet's tables, its ledger and holds, and its auto top-up, which pays through the
 * payment providers of PaymentsModule and starts itself after each committed charge.
 */
@Module({
  imports: [
    TypeOrmModule.forFeature([Wallet, WalletTransaction, WalletHold, AutoTopupSettings, AutoTopupAttempt]),
    PaymentsModule,
    MetricsModule,
    // Balances, ledgers and lease recalls wait for the settlements this process answered for.
    PendingSettlementsModule,
  ],
  controllers: [WalletController],
  providers: [
    WalletService,
    WalletLeases,
    WalletMetrics,
    HoldSweeper,
    AutoTopupSettingsService,
    AutoTopupAttempts,
    AutoTopupScheduler,
    AutoTopupRetryJob,
    LedgerQueryService,
    TopupCheckoutService,
  ],
  exports: [WalletService, AutoTopupSettingsService, AutoTopupAttempts, AutoTopupScheduler, LedgerQueryService, TopupCheckoutService],
})
export class WalletModule {}
