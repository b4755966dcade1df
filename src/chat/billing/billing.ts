import { Injectable, Logger } from '@nestjs/common';
import { ApiError } from '../../common/errors/api-error';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { ConversationsService } from '../../conversations/conversations.service';
import { UsageService } from '../../usage/usage.service';
import { WalletService } from '../../wallet/wallet.service';
import { BillingIncidents, BillingPorts, BillingSession, Estimate } from './billing-session';
import { refusedUsageRecord, UsageSubject } from './usage-record';

/**
 * Opens the billing session of each chat request, and records the requests refused before
 * any money was held (by the chat service, or by a guard: see ChatRefusalFilter).
 */
@Injectable()
export class Billing implements BillingPorts {
  private readonly logger = new Logger('Chat');
  readonly incidents: BillingIncidents = { conversation_turn_not_stored: 0, usage_record_not_stored: 0, settlement_failed: 0 };
  readonly holdTtlMs: number;

  constructor(
    @InjectConfig() config: AppConfig,
    readonly wallet: WalletService,
    readonly usage: UsageService,
    readonly conversations: ConversationsService,
  ) {
    this.holdTtlMs = config.holdTtlMs;
  }

  /** Holds the estimate (or refuses with 402): the session then owns the hold until it settles. */
  open(estimate: Estimate): Promise<BillingSession> {
    return BillingSession.open(this, estimate);
  }

  /** A request refused before any money was held: recorded, never charged. Never throws. */
  async recordRefused(subject: UsageSubject, latencyMs: number, error: unknown): Promise<void> {
    const code = error instanceof ApiError ? error.code : 'internal_error';
    await this.usage
      .insert(refusedUsageRecord(subject, latencyMs, code))
      .catch((recordError) => this.logger.error(`Could not record refused request ${subject.requestId}: ${String(recordError)}`));
  }
}
