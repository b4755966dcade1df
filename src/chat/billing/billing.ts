import { BeforeApplicationShutdown, Injectable, Logger, Optional } from '@nestjs/common';
import { ApiError } from '../../common/errors/api-error';
import type { AppConfig } from '../../config/app-config';
import { InjectConfig } from '../../config/config.module';
import { ConversationsService } from '../../conversations/conversations.service';
import { UsageService } from '../../usage/usage.service';
import { WalletService } from '../../wallet/wallet.service';
import { MetricsService } from '../../metrics/metrics.service';
import { BillingIncidents, BillingPorts, BillingSession, Estimate } from './billing-session';
import { SettlementWriter } from './settlement-writer';
import { refusedUsageRecord, UsageSubject } from './usage-record';

/**
 * Opens the billing session of each chat request, writes their settlements (many to a
 * transaction: SettlementWriter), and records the requests refused before any money was
 * held (by the chat service, or by a guard: see ChatRefusalFilter).
 */
@Injectable()
export class Billing implements BillingPorts, BeforeApplicationShutdown {
  private readonly logger = new Logger('Chat');
  readonly incidents: BillingIncidents = { conversation_turn_not_stored: 0, usage_record_not_stored: 0, settlement_failed: 0 };
  readonly holdTtlMs: number;
  readonly settlements: SettlementWriter;
  /** Refusals already recorded by the chat service, which the refusal filter must not record again. */
  private readonly recordedRefusals = new WeakSet<object>();

  constructor(
    @InjectConfig() config: AppConfig,
    readonly wallet: WalletService,
    private readonly usage: UsageService,
    conversations: ConversationsService,
    /** Records settlements and incidents (acs_settlements_total, ...); optional for unit tests. */
    @Optional() metrics?: MetricsService,
  ) {
    this.holdTtlMs = config.holdTtlMs;
    this.settlements = new SettlementWriter({
      wallet,
      usage,
      conversations,
      incident: (kind, requestId, error) => {
        this.incidents[kind] += 1;
        this.logger.error(`${kind} for request ${requestId} (${this.incidents[kind]} so far); the charge stands: ${String(error)}`);
      },
      committed: metrics && ((records) => records.forEach((record) => metrics.settled(record))),
    });
    metrics?.gauge('acs_billing_incidents', 'Writes that failed beside a charge, or settlements that failed, since start, by kind', ['kind'], (gauge) => {
      for (const [kind, count] of Object.entries(this.incidents)) gauge.set({ kind }, count);
    });
  }

  /** Holds the estimate (or refuses with 402): the session then owns the hold until it settles. */
  open(estimate: Estimate): Promise<BillingSession> {
    return BillingSession.open(this, estimate);
  }

  /** A request refused before any money was held: recorded, never charged. Never throws. */
  async recordRefused(subject: UsageSubject, latencyMs: number, error: unknown): Promise<void> {
    const code = error instanceof ApiError ? error.code : 'internal_error';
    if (typeof error === 'object' && error !== null) this.recordedRefusals.add(error);
    await this.usage
      .insert(refusedUsageRecord(subject, latencyMs, code))
      .catch((recordError) => this.logger.error(`Could not record refused request ${subject.requestId}: ${String(recordError)}`));
  }

  /** Whether `recordRefused` has recorded this error's request already. */
  isRecorded(error: unknown): boolean {
    return typeof error === 'object' && error !== null && this.recordedRefusals.has(error);
  }

  /** Settlements still being written finish before the database closes. */
  async beforeApplicationShutdown(): Promise<void> {
    await this.settlements.idle();
  }
}
