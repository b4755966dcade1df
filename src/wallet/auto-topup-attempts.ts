import { Inject, Injectable, Logger, Optional } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { EntityManager, Repository } from 'typeorm';
import { queryRows } from '../common/database/query-rows';
import { MetricsService } from '../metrics/metrics.service';
import { PAYMENT_PROVIDER, PaymentOutcome, PaymentProvider, PaymentProviderName } from '../payments/payment-provider';
import { AutoTopupSettingsService } from './auto-topup-settings.service';
import { AutoTopupAttempt, AutoTopupStatus } from './entities/auto-topup-attempt.entity';
import { WalletService } from './wallet.service';

/** Payment requests per attempt, the first included. */
export const AUTO_TOPUP_MAX_TRIES = 4;
/** Retries wait 15 minutes, then 1 hour, then 4 hours. */
const RETRY_BASE_SECONDS = 15 * 60;
const RETRY_FACTOR = 4;
/** A payment still `processing` this long after its last step lost its process: it is resumed. */
const STUCK_AFTER_SECONDS = 10 * 60;
const RETRY_BATCH = 20;

/** How a top-up attempt ended (or where it stands), for logs, the CLI and tests. */
export type AttemptRow = Pick<
  AutoTopupAttempt,
  'id' | 'workspaceId' | 'status' | 'provider' | 'amountMillicents' | 'tries' | 'chargeSeq' | 'paymentId'
>;

interface RawAttempt {
  id: string;
  workspace_id: string;
  status: AutoTopupStatus;
  provider: PaymentProviderName;
  amount_millicents: string;
  tries: number;
  charge_seq: number;
  payment_id: string | null;
}

/**
 * The auto top-up attempt and its states: claimed (`processing`) by one conditional INSERT
 * when the balance is below the threshold (at most one open attempt per workspace, within
 * the monthly cap), paid through the payment provider, then
 * `succeeded` (credited as an `auto_topup` ledger row keyed by the payment id, so the
 * synchronous answer and the provider's webhook credit it once between them),
 * `retry_scheduled` with backoff after a failed payment, `failed` after the last try, or
 * `canceled` when a retry is no longer wanted. When the transitions run is
 * AutoTopupScheduler's.
 */
@Injectable()
export class AutoTopupAttempts {
  private readonly logger = new Logger('AutoTopup');

  constructor(
    @InjectRepository(AutoTopupAttempt) private readonly attempts: Repository<AutoTopupAttempt>,
    private readonly wallet: WalletService,
    private readonly settings: AutoTopupSettingsService,
    @Optional() @Inject(PAYMENT_PROVIDER) private readonly provider: PaymentProvider | null,
    /** Counts the outcomes (acs_auto_topups_total); optional for unit tests. */
    @Optional() private readonly metrics?: MetricsService,
  ) {}

  /** Auto top-up's statements run outside any caller's transaction. */
  private get manager(): EntityManager {
    return this.attempts.manager;
  }

  /**
   * Claims a top-up if the balance is below the threshold and none is open, and pays it.
   * Returns the attempt as it stands after the payment, or null when none was due.
   */
  async topUpIfNeeded(workspaceId: string): Promise<AttemptRow | null> {
    if (!this.provider) return null;
    const attempt = await this.claim(workspaceId, this.provider);
    if (!attempt) return null;
    this.logger.log(
      `Workspace ${workspaceId} is below its threshold: auto top-up ${attempt.id} of ${attempt.amountMillicents} millicents (${attempt.provider})`,
    );
    return this.pay(attempt);
  }

  /**
   * For the scheduled job (tests pass a later `at`; null is now): retries failed payments
   * whose time has come, cancels those no longer needed, and resumes payments whose process
   * died. Returns how many attempts it worked on.
   */
  async retryDue(at: Date | null): Promise<number> {
    const provider = this.provider;
    if (!provider) return 0;
    // Not charged: a retry that is no longer wanted (disabled, or the balance is back above
    // the threshold), and an attempt of a provider no longer configured, once it is idle.
    const canceled = await queryRows<{ id: string }>(
      this.manager,
      `UPDATE auto_topup_attempts a
          SET status = 'canceled', next_retry_at = NULL, completed_at = now(), updated_at = now()
         FROM auto_topup_settings s, wallets w
        WHERE s.workspace_id = a.workspace_id AND w.workspace_id = a.workspace_id
          AND ((a.status = 'retry_scheduled' AND a.next_retry_at <= coalesce($1::timestamptz, now())
                AND (NOT s.enabled OR w.balance_millicents >= s.threshold_millicents))
               OR (a.status IN ('processing', 'retry_scheduled') AND a.provider <> $2
                   AND a.updated_at <= coalesce($1::timestamptz, now()) - make_interval(secs => $3::double precision)))
        RETURNING a.id`,
      [at, provider.name, STUCK_AFTER_SECONDS],
    );
    for (const { id } of canceled) this.logger.log(`Auto top-up ${id} canceled: no longer needed, or its payment provider is gone`);

    const due = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts SET status = 'processing', tries = tries + 1, next_retry_at = NULL, updated_at = now()
        WHERE id IN (SELECT id FROM auto_topup_attempts
                      WHERE status = 'retry_scheduled' AND next_retry_at <= coalesce($1::timestamptz, now())
                        AND provider = $3
                      ORDER BY next_retry_at LIMIT $2 FOR UPDATE SKIP LOCKED)
        RETURNING *`,
      [at, RETRY_BATCH, provider.name],
    );
    // Resumed with the same charge_seq, hence the same idempotency key: a payment that did
    // reach the provider is answered again, not made twice.
    const stuck = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts SET updated_at = now()
        WHERE id IN (SELECT id FROM auto_topup_attempts
                      WHERE status = 'processing' AND provider = $4
                        AND updated_at <= coalesce($1::timestamptz, now()) - make_interval(secs => $2::double precision)
                      LIMIT $3 FOR UPDATE SKIP LOCKED)
        RETURNING *`,
      [at, STUCK_AFTER_SECONDS, RETRY_BATCH, provider.name],
    );
    for (const raw of due) {
      const attempt = toAttempt(raw);
      this.logger.log(`Retrying auto top-up ${attempt.id} (try ${attempt.tries} of ${AUTO_TOPUP_MAX_TRIES})`);
      await this.pay(attempt).catch((error: unknown) => this.logger.error(`Retry of ${attempt.id} failed: ${describe(error)}`));
    }
    for (const raw of stuck) {
      const attempt = toAttempt(raw);
      await this.resume(attempt).catch((error: unknown) => this.logger.error(`Resuming ${attempt.id} failed: ${describe(error)}`));
    }
    return canceled.length + due.length + stuck.length;
  }

  /**
   * The claim: one statement that inserts the attempt only if auto top-up is enabled, the
   * balance is below the threshold, the month's top-ups stay within the cap, fewer than
   * AUTO_TOPUP_MAX_PER_HOUR attempts were started or ended (a retry that paid late) in the
   * last hour, and no other attempt is
   * open (the partial unique index; a concurrent claim does nothing). Stored settings above
   * the operator's bounds are clamped here: the amount to the largest top-up, the threshold
   * below the amount, no cap or a larger one to the default or the largest.
   *
   * Locking the wallet row re-checks the balance against a top-up that committed meanwhile.
   * That is also why the counts cannot be outrun: this statement's snapshot may miss an
   * attempt whose claim committed while it waited for the lock, but such an attempt is
   * still open (the unique index refuses this one) until its credit, which needs this same
   * lock and leaves the balance above the threshold, below the amount.
   */
  private async claim(workspaceId: string, provider: PaymentProvider): Promise<AttemptRow | null> {
    const { amountMaxMillicents, defaultMonthlyCapMillicents, monthlyCapMaxMillicents, maxPerHour } = this.settings.bounds;
    const rows = await queryRows<RawAttempt>(
      this.manager,
      `INSERT INTO auto_topup_attempts (workspace_id, status, provider, amount_millicents)
       SELECT s.workspace_id, 'processing', $2, b.amount
         FROM auto_topup_settings s
         JOIN wallets w ON w.workspace_id = s.workspace_id
        CROSS JOIN LATERAL (SELECT least(round(s.amount_millicents / 1000.0)::bigint * 1000, $4::bigint) AS amount) b
        WHERE s.workspace_id = $1
          AND s.enabled
          AND w.balance_millicents < least(s.threshold_millicents, b.amount - 1)
          AND (NOT $3 OR (s.payment_customer_ref IS NOT NULL AND s.payment_method_ref IS NOT NULL))
          AND b.amount + (
                SELECT coalesce(sum(a.amount_millicents), 0) FROM auto_topup_attempts a
                 WHERE a.workspace_id = s.workspace_id
                   AND a.status IN ('processing', 'retry_scheduled', 'succeeded')
                   AND a.created_at >= date_trunc('month', now(), 'UTC')
              ) <= least(coalesce(s.monthly_cap_millicents, $5::bigint), $6::bigint)
          AND (SELECT count(*) FROM auto_topup_attempts a
                WHERE a.workspace_id = s.workspace_id
                  -- Retries end within hours of their attempt: a day bounds the scan.
                  AND a.created_at > now() - interval '1 day'
                  AND (a.created_at > now() - interval '1 hour' OR a.completed_at > now() - interval '1 hour')) < $7
          FOR UPDATE OF w
       ON CONFLICT (workspace_id) WHERE status IN ('processing', 'retry_scheduled') DO NOTHING
       RETURNING *`,
      [workspaceId, provider.name, provider.needsPaymentMethod, amountMaxMillicents, defaultMonthlyCapMillicents, monthlyCapMaxMillicents, maxPerHour],
    );
    return rows.length > 0 ? toAttempt(rows[0]) : null;
  }

  /** Sends the attempt's current payment request and records its outcome. */
  private async pay(attempt: AttemptRow): Promise<AttemptRow> {
    const provider = this.providerFor(attempt);
    const saved = await this.settings.paymentMethodOf(attempt.workspaceId);
    const outcome = await provider
      .charge({
        workspaceId: attempt.workspaceId,
        attemptId: attempt.id,
        chargeSeq: attempt.chargeSeq,
        // An attempt claimed before the bound was lowered is paid within it.
        amountCents: Math.min(attempt.amountMillicents, this.settings.bounds.amountMaxMillicents) / 1000,
        idempotencyKey: `auto_topup_${attempt.id}_${attempt.chargeSeq}`,
        customerRef: saved?.customerRef ?? null,
        paymentMethodRef: saved?.paymentMethodRef ?? null,
        description: 'Automatic top-up of the Assistant Chat Service wallet',
      })
      .catch((error: unknown): PaymentOutcome => ({
        status: 'failed',
        paymentId: null,
        code: 'internal_error',
        reason: describe(error),
        resend: false,
      }));
    return this.record(attempt, outcome);
  }

  /** A payment that lost its process: ask the provider where it stands, or send it again. */
  private async resume(attempt: AttemptRow): Promise<AttemptRow> {
    const provider = this.providerFor(attempt);
    if (attempt.paymentId && provider.retrieve) {
      const outcome = await provider.retrieve(attempt.paymentId);
      return outcome ? this.record(attempt, outcome) : attempt;
    }
    this.logger.warn(`Resuming auto top-up ${attempt.id}, left in processing`);
    return this.pay(attempt);
  }

  private async record(attempt: AttemptRow, outcome: PaymentOutcome): Promise<AttemptRow> {
    switch (outcome.status) {
      case 'succeeded':
        return this.credit(attempt, attempt.provider, outcome);
      case 'pending': {
        const rows = await queryRows<RawAttempt>(
          this.manager,
          `UPDATE auto_topup_attempts SET payment_id = $3, updated_at = now()
            WHERE id = $1 AND status = 'processing' AND charge_seq = $2 RETURNING *`,
          [attempt.id, attempt.chargeSeq, outcome.paymentId],
        );
        this.logger.log(`Auto top-up ${attempt.id}: payment ${outcome.paymentId} is pending; its webhook will settle it`);
        this.metrics?.autoTopups.inc({ outcome: 'pending' });
        return rows[0] ? toAttempt(rows[0]) : attempt;
      }
      case 'failed':
        return this.recordFailure(attempt, attempt.chargeSeq, outcome);
    }
  }

  /**
   * Credits a payment that succeeded: the ledger row is keyed by the payment id, so a
   * second report of the same payment (webhook, replay, retry) changes nothing.
   */
  async credit(
    attempt: AttemptRow,
    providerName: PaymentProviderName,
    outcome: Extract<PaymentOutcome, { status: 'succeeded' }>,
  ): Promise<AttemptRow> {
    const amountMillicents = outcome.amountCents * 1000;
    if (amountMillicents !== attempt.amountMillicents) {
      this.logger.warn(
        `Payment ${outcome.paymentId} was for ${amountMillicents} millicents, auto top-up ${attempt.id} for ${attempt.amountMillicents}: crediting what was paid`,
      );
    }
    const transaction = await this.wallet.credit({
      workspaceId: attempt.workspaceId,
      amountMillicents,
      type: 'auto_topup',
      description: this.describePayment(providerName, outcome.paymentId),
      idempotencyKey: `${providerName}:${outcome.paymentId}`,
    });
    const rows = await queryRows<RawAttempt>(
      this.manager,
      `UPDATE auto_topup_attempts
          SET status = 'succeeded', payment_id = $2, transaction_id = $3, next_retry_at = NULL,
              completed_at = now(), updated_at = now()
        WHERE id = $1 AND status <> 'succeeded'
        RETURNING *`,
      [attempt.id, outcome.paymentId, transaction.id],
    );
    if (rows[0]) {
      this.metrics?.autoTopups.inc({ outcome: 'succeeded' });
      this.logger.log(
        `Auto top-up ${attempt.id} credited ${amountMillicents} millicents to workspace ${attempt.workspaceId} (payment ${outcome.paymentId})`,
      );
      return toAttempt(rows[0]);
    }
    return (await this.attemptById(attempt.id)) ?? attempt;
  }

  /**
   * Records a failed payment of the attempt's request `chargeSeq` (a report about an older
   * request changes nothing): the retry is scheduled with exponential backoff, or the
   * attempt fails for good after the last try. The next try is a new payment request
   * (a new idempotency key), unless the provider asks to resend this one.
   */
  async recordFailure(
    attempt: AttemptRow,
    chargeSeq: number,
    outcome: Extract<PaymentOutcome, { status: 'failed' }>,
  ): Promise<AttemptRow> {
    const rows = await queryRows<RawAttempt & { next_retry_at: Date | null }>(
      this.manager,
      `UPDATE auto_topup_attempts SET
         status = CASE WHEN tries >= $3 THEN 'failed' ELSE 'retry_scheduled' END,
         next_retry_at = CASE WHEN tries >= $3 THEN NULL
                              ELSE now() + make_interval(secs => $4::double precision * power($5::double precision, tries - 1)) END,
         completed_at = CASE WHEN tries >= $3 THEN now() ELSE NULL END,
         charge_seq = charge_seq + CASE WHEN $6 THEN 0 ELSE 1 END,
         payment_id = coalesce($7, payment_id),
         last_failure_code = $8, last_failure_reason = $9, updated_at = now()
       WHERE id = $1 AND charge_seq = $2 AND status IN ('processing', 'retry_scheduled')
       RETURNING *`,
      [
        attempt.id,
        chargeSeq,
        AUTO_TOPUP_MAX_TRIES,
        RETRY_BASE_SECONDS,
        RETRY_FACTOR,
        outcome.resend,
        outcome.paymentId,
        outcome.code,
        outcome.reason.slice(0, 1000),
      ],
    );
    const updated = rows[0];
    if (!updated) return (await this.attemptById(attempt.id)) ?? attempt;
    this.metrics?.autoTopups.inc({ outcome: updated.status === 'failed' ? 'failed' : 'retry_scheduled' });
    this.logger.warn(
      `Auto top-up ${attempt.id} of workspace ${attempt.workspaceId}: payment failed (${outcome.code}: ${outcome.reason}); ` +
        (updated.status === 'failed'
          ? `giving up after ${updated.tries} tries`
          : `retry at ${new Date(updated.next_retry_at!).toISOString()}`),
    );
    return toAttempt(updated);
  }

  private async attemptById(id: string): Promise<AttemptRow | null> {
    return this.attempts.findOneBy({ id });
  }

  private providerFor(attempt: AttemptRow): PaymentProvider {
    if (!this.provider || this.provider.name !== attempt.provider) {
      throw new Error(`Auto top-up ${attempt.id} was made through ${attempt.provider}, which is not configured now`);
    }
    return this.provider;
  }

  private describePayment(providerName: PaymentProviderName, paymentId: string): string {
    return this.provider?.name === providerName ? this.provider.describe(paymentId) : `Automatic top-up (${providerName} payment ${paymentId})`;
  }
}

function toAttempt(raw: RawAttempt): AttemptRow {
  return {
    id: raw.id,
    workspaceId: raw.workspace_id,
    status: raw.status,
    provider: raw.provider,
    amountMillicents: Number(raw.amount_millicents),
    tries: raw.tries,
    chargeSeq: raw.charge_seq,
    paymentId: raw.payment_id,
  };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
