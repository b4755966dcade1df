import { Injectable, Logger } from '@nestjs/common';
import { Interval } from '@nestjs/schedule';
import { WalletService } from './wallet.service';

/** Every 30 seconds, gives back the money of holds whose request never settled (a crashed process). */
@Injectable()
export class HoldSweeper {
  private readonly logger = new Logger('HoldSweeper');

  constructor(private readonly wallet: WalletService) {}

  @Interval(30_000)
  async sweep(): Promise<void> {
    try {
      const released = await this.wallet.releaseExpiredHolds();
      if (released > 0) this.logger.warn(`Released ${released} expired hold(s)`);
    } catch (error) {
      this.logger.error(`Sweeping expired holds failed: ${String(error)}`);
    }
  }
}
