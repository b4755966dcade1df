import { Injectable, Logger } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { setTimeout as sleep } from 'node:timers/promises';
import { DataSource } from 'typeorm';
import type { SpendingReservation } from '../billing/billing-session';
import type { SpendingGate } from '../chat/chat.service';
import { ApiError } from '../common/errors/api-error';
import { formatMillicents } from '../common/dollars';
import { MailService } from '../mail/mail.service';
import { ceilMillicents } from '../wallet/cost';
import type { Widget } from './entities/widget.entity';

/** The owner is told once a day when a widget's spending reaches this share of its cap (and banners show from it). */
export const ALERT_SHARE_PERCENT = 80;

/** What the settings page and the overview show of a widget's day. */
export interface WidgetDay {
  spentMillicents: number;
  /** What messages in flight may still cost. */
  reservedMillicents: number;
  capMillicents: number;
  /** Messages refused today because the cap was reached. */
  refused: number;
  /** The cap is reached: visitors are told the chat rests until tomorrow. */
  capReached: boolean;
  /** Spending is at ALERT_SHARE_PERCENT of the cap or more. */
  nearCap: boolean;
}

/**
 * A settlement the database did not take is tried again after this, doubling up to
 * SETTLE_RETRY_MAX_MS, SETTLE_TRIES times in all (about ten minutes): a blip must not leave the
 * reservation counting, and the widget resting, for the rest of the day.
 */
export const SETTLE_RETRY = { minMs: 1_000, maxMs: 60_000, tries: 16 };

/** The wording a visitor gets once the widget's day is spent. */
export const RESTING_MESSAGE = 'This chat is resting for today. Please try again tomorrow.';

/**
 * Each widget's daily spending cap (a UTC day). A message is admitted by one conditional
 * statement that reserves its first model call's most expensive outcome (`spent + reserved +
 * amount <= cap`); before each further iteration of a tool loop the reservation is raised the
 * same way to cover the tools about to run and the next call, or the loop ends there (see
 * BillingSession.holdNextIteration). So no number of concurrent messages or replicas can
 * reserve more than the cap. Its settlement then moves the whole reservation to `spent` at the
 * exact cost. A reservation of a process that died is never settled: it keeps counting until
 * the day ends (the cap errs on the safe side).
 */
@Injectable()
export class WidgetSpendingService {
  private readonly logger = new Logger('Widget');
  /** SETTLE_RETRY; tests shorten it. */
  settleRetry = SETTLE_RETRY;

  constructor(
    @InjectDataSource() private readonly db: DataSource,
    private readonly mail: MailService,
  ) {}

  /** The chat service's gate for one widget's messages. */
  gateFor(widget: Widget): SpendingGate {
    return { admit: (firstCallMillicents) => this.admit(widget, firstCallMillicents) };
  }

  /**
   * Reserves `firstCallMillicents` of today's cap, or refuses with 402 `widget_daily_cap` (the
   * visitor's wording). The reservation is raised by `cover` and settled once.
   */
  async admit(widget: Widget, firstCallMillicents: number, now = new Date()): Promise<SpendingReservation> {
    const day = utcDay(now);
    let reserved = Math.max(1, Math.ceil(firstCallMillicents));
    const admitted = (await this.db.query(
      `INSERT INTO widget_spending AS s (widget_id, day, reserved_millicents, messages)
         SELECT $1::uuid, $2::date, $3::bigint, 1 WHERE $3::bigint <= $4::bigint
       ON CONFLICT (widget_id, day) DO UPDATE
         SET reserved_millicents = s.reserved_millicents + EXCLUDED.reserved_millicents, messages = s.messages + 1
         WHERE s.spent_millicents + s.reserved_millicents + EXCLUDED.reserved_millicents <= $4::bigint
       RETURNING 1`,
      [widget.id, day, reserved, widget.dailyCapMillicents],
    )) as unknown[];
    if (admitted.length === 0) {
      await this.db
        .query(
          `INSERT INTO widget_spending AS s (widget_id, day, refused) VALUES ($1, $2::date, 1)
           ON CONFLICT (widget_id, day) DO UPDATE SET refused = s.refused + 1`,
          [widget.id, day],
        )
        .then(() => this.alertIfNear(widget, day))
        .catch((error) => this.logger.warn(`Could not count a refused message of widget ${widget.publicId}: ${String(error)}`));
      throw new ApiError('insufficient_balance', RESTING_MESSAGE, { code: 'widget_daily_cap' });
    }
    let settled = false;
    return {
      // On the day the message was admitted, where its reservation is; never called once settled (the loop has ended).
      cover: async (totalMillicents) => {
        const extra = Math.ceil(totalMillicents) - reserved;
        if (extra <= 0) return true;
        const raised = (await this.db.query(
          `UPDATE widget_spending SET reserved_millicents = reserved_millicents + $3
            WHERE widget_id = $1 AND day = $2::date AND spent_millicents + reserved_millicents + $3 <= $4::bigint
            RETURNING 1`,
          [widget.id, day, extra, widget.dailyCapMillicents],
        )) as [unknown[], number];
        if (raised[0].length === 0) return false;
        reserved += extra;
        return true;
      },
      // Runs inside the billing session's settlement: it must never throw (settle catches all its own failures).
      settled: (chargedMicros) => {
        if (settled) return;
        settled = true;
        void this.settle(widget, day, reserved, chargedMicros).catch((error) => this.logger.error(`Settling a message of widget ${widget.publicId} failed: ${String(error)}`));
      },
    };
  }

  /** Today's spending of a widget (nothing yet: zeros). */
  async today(widget: Widget, now = new Date()): Promise<WidgetDay> {
    const [row] = (await this.db.query(
      `SELECT spent_millicents::float8 AS spent, reserved_millicents::float8 AS reserved, refused FROM widget_spending WHERE widget_id = $1 AND day = $2::date`,
      [widget.id, utcDay(now)],
    )) as { spent: number; reserved: number; refused: number }[];
    const spent = row?.spent ?? 0;
    const reserved = row?.reserved ?? 0;
    const cap = widget.dailyCapMillicents;
    return {
      spentMillicents: spent,
      reservedMillicents: reserved,
      capMillicents: cap,
      refused: row?.refused ?? 0,
      capReached: (row?.refused ?? 0) > 0 || spent >= cap,
      nearCap: spent * 100 >= cap * ALERT_SHARE_PERCENT,
    };
  }

  /** The workspace's widgets whose spending today reached ALERT_SHARE_PERCENT of their cap (or had a message refused for it): the overview's banner. */
  async nearCapToday(workspaceId: string, now = new Date()): Promise<{ assistantId: string; title: string; spentMillicents: number; capMillicents: number; capReached: boolean }[]> {
    const rows = (await this.db.query(
      `SELECT w.assistant_id, w.title, s.spent_millicents::float8 AS spent, w.daily_cap_millicents::float8 AS cap, s.refused
         FROM widget_spending s JOIN widgets w ON w.id = s.widget_id
        WHERE w.workspace_id = $1 AND s.day = $2::date AND (s.spent_millicents * 100 >= w.daily_cap_millicents * $3 OR s.refused > 0)
        ORDER BY w.title`,
      [workspaceId, utcDay(now), ALERT_SHARE_PERCENT],
    )) as { assistant_id: string; title: string; spent: number; cap: number; refused: number }[];
    return rows.map((row) => ({
      assistantId: row.assistant_id,
      title: row.title,
      spentMillicents: row.spent,
      capMillicents: row.cap,
      capReached: row.refused > 0 || row.spent >= row.cap,
    }));
  }

  /**
   * The message's reservation becomes its exact cost, on the day it was admitted. Tried again
   * with backoff (unref'd timers) while the database is away; after SETTLE_RETRY.tries the
   * reservation keeps counting until the day ends (the cap errs on the safe side).
   */
  private async settle(widget: Widget, day: string, reserved: number, chargedMicros: bigint): Promise<void> {
    const charged = chargedMicros > 0n ? ceilMillicents(chargedMicros) : 0;
    const { minMs, maxMs, tries } = this.settleRetry;
    for (let attempt = 1; ; attempt++) {
      try {
        await this.db.query(
          `UPDATE widget_spending SET reserved_millicents = greatest(reserved_millicents - $3, 0), spent_millicents = spent_millicents + $4
            WHERE widget_id = $1 AND day = $2::date`,
          [widget.id, day, reserved, charged],
        );
        if (attempt > 1) this.logger.log(`Settled a message of widget ${widget.publicId} in its daily spending after ${attempt - 1} failed attempt(s)`);
        break;
      } catch (error) {
        if (attempt >= tries) {
          this.logger.error(
            `Could not settle a message of widget ${widget.publicId} in its daily spending (${charged} millicents) after ${attempt} attempts; ` +
              `its reservation of ${reserved} millicents counts until the day ends: ${String(error)}`,
          );
          return;
        }
        if (attempt === 1) this.logger.warn(`Could not settle a message of widget ${widget.publicId} in its daily spending yet; trying again: ${String(error)}`);
        await sleep(Math.min(minMs * 2 ** (attempt - 1), maxMs), undefined, { ref: false });
      }
    }
    if (charged === 0) return;
    try {
      await this.alertIfNear(widget, day);
    } catch (error) {
      this.logger.warn(`Could not alert the owners of widget ${widget.publicId} about its daily spending: ${String(error)}`);
    }
  }

  /**
   * Mails the workspace's owners and admins when the day's spending reaches ALERT_SHARE_PERCENT
   * of the cap, or a message was refused for it: at most once per widget and day (the
   * conditional update decides, whichever process gets there first).
   */
  private async alertIfNear(widget: Widget, day: string): Promise<void> {
    const [alert] = (await this.db.query(
      `UPDATE widget_spending SET alerted_at = now()
        WHERE widget_id = $1 AND day = $2::date AND alerted_at IS NULL AND (spent_millicents * 100 >= $3::bigint * $4 OR refused > 0)
        RETURNING spent_millicents::float8 AS spent`,
      [widget.id, day, widget.dailyCapMillicents, ALERT_SHARE_PERCENT],
    )) as [{ spent: number }[], number];
    const spent = alert?.[0]?.spent;
    if (spent === undefined) return;
    const people = (await this.db.query(
      `SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND m.role IN ('owner', 'admin') ORDER BY u.email`,
      [widget.workspaceId],
    )) as { email: string }[];
    const cap = formatMillicents(widget.dailyCapMillicents);
    for (const { email } of people) {
      await this.mail.send({
        to: email,
        subject: `Chat widget "${widget.title}" has spent ${formatMillicents(spent)} of its ${cap} daily cap`,
        text:
          `The chat widget "${widget.title}" (${widget.publicId}) has spent ${formatMillicents(spent)} today (UTC), ` +
          `against a daily cap of ${cap}. At the cap, visitors are told the chat rests until tomorrow. ` +
          `If this is more than your visitors usually spend, a script may be driving the widget: check its conversations, ` +
          `and lower the cap or turn the widget off in its settings.`,
      });
    }
  }
}

/** `YYYY-MM-DD` of a moment, in UTC. */
export function utcDay(now: Date): string {
  return now.toISOString().slice(0, 10);
}

