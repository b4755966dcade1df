import { BeforeApplicationShutdown, Injectable, Logger, OnApplicationBootstrap, Optional } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import * as path from 'node:path';
import { DataSource } from 'typeorm';
import { usageErrorCode } from '../common/errors/usage-error-code';
import { errorKind, RepeatedLog } from '../common/logging/repeated-log';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { ConversationTurns } from '../conversations/conversation-turns';
import { UsageService } from '../usage/usage.service';
import { toDecimalString } from '../wallet/cost';
import { WalletService } from '../wallet/wallet.service';
import { MetricsService } from '../metrics/metrics.service';
import { BillingIncidents, BillingPorts, BillingSession, Estimate } from './billing-session';
import { PendingSettlements } from '../common/settlements/pending-settlements';
import { KeyBudgets } from './key-budgets';
import { KeyHoldsStore } from './key-holds-store';
import { SettlementJournal } from './settlement-journal';
import { SettlementWriter } from './settlement-writer';
import { tracing } from '../telemetry/tracing';
import { refusedUsageRecord, UsageSubject } from './usage-record';

/** How often a running process looks for the journals of processes that died (see SettlementJournal). */
const ORPHANS_INTERVAL_MS = 10_000;

/**
 * Opens the billing session of each chat request, writes their settlements (many to a
 * transaction: SettlementWriter), and records the requests refused before any money was
 * held (by the chat service, or by a guard: see ChatRefusalFilter).
 */
@Injectable()
export class Billing implements BillingPorts, OnApplicationBootstrap, BeforeApplicationShutdown {
  private readonly logger = new Logger('Chat');
  private readonly failures = new RepeatedLog((message) => this.logger.error(message));
  readonly incidents: BillingIncidents = { conversation_turn_not_stored: 0, usage_record_not_stored: 0, settlement_failed: 0 };
  readonly holdTtlMs: number;
  readonly settlements: SettlementWriter;
  readonly keyBudgets: KeyBudgets;
  /** Refusals already recorded by the chat service, which the refusal filter must not record again. */
  private readonly recordedRefusals = new WeakSet<object>();
  private orphansTimer?: NodeJS.Timeout;
  private writingOrphans: Promise<void> | null = null;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    @InjectDataSource() private readonly dataSource: DataSource,
    readonly wallet: WalletService,
    private readonly usage: UsageService,
    conversations: ConversationTurns,
    /** Reads of balances and usage wait for the settlements answered for (SETTLEMENT_DURABILITY=journal). */
    pending: PendingSettlements,
    /** Records settlements and incidents (acs_settlements_total, ...); optional for unit tests. */
    @Optional() metrics?: MetricsService,
  ) {
    this.holdTtlMs = config.holdTtlMs;
    this.keyBudgets = new KeyBudgets(new KeyHoldsStore(() => dataSource.manager));
    this.settlements = new SettlementWriter({
      wallet,
      usage,
      conversations,
      incident: (kind, requestId, error) => {
        this.incidents[kind] += 1;
        this.logger.error(`${kind} for request ${requestId} (${this.incidents[kind]} so far); the charge stands: ${String(error)}`);
      },
      committed: metrics && ((records) => records.forEach((record) => metrics.settled(record))),
      writtenOff: ({ requestId, order }, { writtenOffMillicents }) =>
        this.logger.warn(
          `Request ${requestId} cost ${writtenOffMillicents} millicents more than workspace ${order.charge.workspaceId} could cover; charged what it had.`,
        ),
      // Once per interval with a count: a full disk or a database outage fails every request alike.
      journalFailed: ({ requestId }, error) =>
        this.failures.report(
          `journal:${errorKind(error)}`,
          `Could not journal the settlement of request ${requestId}; it waits for its commit instead: ${String(error)}`,
        ),
      retrying: ({ requestId }, error, delayMs) =>
        this.failures.report(
          `settlement:${errorKind(error)}`,
          `Could not write the settlement of request ${requestId}; trying again in ${delayMs} ms: ${String(error)}`,
        ),
      // Each on its own line: an operator reconciles these one by one.
      unwritten: ({ requestId, order: { hold, charge } }, journaled, error) =>
        journaled
          ? this.logger.warn(`The settlement of request ${requestId} was not written by the stop (${String(error)}); it is in the settlement journal, for the next start.`)
          : this.logger.error(
              `Settlement not written: request ${requestId}, workspace ${charge.workspaceId}, key ${hold.id}, cost ${toDecimalString(charge.costMicros)} millicents (${charge.description}) reached its client and could be neither written nor journaled at the stop; charge it by hand: ${String(error)}`,
            ),
    });
    pending.waitWith((workspaceId) => this.settlements.flushed(workspaceId));
    metrics?.gauge('acs_billing_incidents', 'Writes that failed beside a charge, or settlements that failed, since start, by kind', ['kind'], (gauge) => {
      for (const [kind, count] of Object.entries(this.incidents)) gauge.set({ kind }, count);
    });
  }

  /** Holds the estimate (or refuses with 402): the session then owns the hold until it settles. */
  open(estimate: Estimate): Promise<BillingSession> {
    return tracing.admission('hold', () => BillingSession.open(this, estimate));
  }

  /** A request refused before any money was held: recorded, never charged. Never throws. */
  async recordRefused(subject: UsageSubject, latencyMs: number, error: unknown): Promise<void> {
    const code = usageErrorCode(error);
    if (typeof error === 'object' && error !== null) this.recordedRefusals.add(error);
    const recorded = this.usage
      .insert(refusedUsageRecord(subject, latencyMs, code))
      .catch((recordError) =>
        this.failures.report(`refusal:${errorKind(recordError)}`, `Could not record refused request ${subject.requestId}: ${String(recordError)}`),
      );
    // A database that cannot be reached would hold the refusal up for its whole bound again: the record is written if it comes back in time.
    if (code !== 'database_unavailable') await recorded;
  }

  /** Whether `recordRefused` has recorded this error's request already. */
  isRecorded(error: unknown): boolean {
    return typeof error === 'object' && error !== null && this.recordedRefusals.has(error);
  }

  /**
   * With SETTLEMENT_DURABILITY=journal, opens the journal of this database. In either mode,
   * what processes that died left in it is written now (before this one serves), and looked
   * for again every few seconds (another process on this DATA_DIR may die meanwhile).
   */
  async onApplicationBootstrap(): Promise<void> {
    const dir = path.join(this.config.dataDir, 'settlement-journal', await this.databaseIdentity());
    const journal = new SettlementJournal(dir);
    // Also with `commit`: what the stop cannot write is left here, and the next start writes it (writeOrphans).
    this.settlements.lastResortIn(journal);
    if (this.config.settlementDurability === 'journal') {
      try {
        SettlementJournal.check(dir);
        this.settlements.journalTo(journal);
      } catch (error) {
        this.logger.error(
          `SETTLEMENT_DURABILITY=journal needs a writable DATA_DIR (${String(error)}): each chat request waits for its settlement's commit instead (SETTLEMENT_DURABILITY=commit).`,
        );
      }
    }
    // Also with `commit`: a journal left by an earlier run in `journal` mode is written.
    if (!existsSync(dir)) return;
    await this.writeOrphans(journal);
    this.orphansTimer = setInterval(() => void this.writeOrphans(journal), ORPHANS_INTERVAL_MS).unref();
  }

  /** Settlements still being written finish before the database closes; what cannot stays in the journal. */
  async beforeApplicationShutdown(): Promise<void> {
    clearInterval(this.orphansTimer);
    await this.writingOrphans;
    await this.settlements.close();
  }

  private writeOrphans(journal: SettlementJournal): Promise<void> {
    return (this.writingOrphans ??= this.settlements
      .writeOrphans(journal)
      .then(
        (written) => {
          if (written > 0) this.logger.warn(`Wrote ${written} settlements that processes which died before had answered for.`);
        },
        (error) => this.logger.error(`Could not write the settlements of processes that died; trying again later: ${String(error)}`),
      )
      .finally(() => (this.writingOrphans = null)));
  }

  /**
   * Names the database the settlements are for, so that a journal is only ever written to
   * the database it came from (test databases, say, may share a DATA_DIR): its cluster's
   * system identifier where the role may read it, else its server address, and its name.
   */
  private async databaseIdentity(): Promise<string> {
    const [cluster] = (await this.dataSource
      .query(`SELECT system_identifier::text AS id FROM pg_control_system()`)
      .catch(() => this.dataSource.query(`SELECT coalesce(host(inet_server_addr()), 'local') || ':' || coalesce(inet_server_port(), 0) AS id`))) as {
      id: string;
    }[];
    const [{ name }] = (await this.dataSource.query(`SELECT current_database() AS name`)) as { name: string }[];
    return createHash('sha256').update(`${cluster.id}/${name}`).digest('hex').slice(0, 16);
  }
}
