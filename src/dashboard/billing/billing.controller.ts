import { Body, Get, Post, Query, Req, Res } from '@nestjs/common';
import type { Response } from 'express';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { PAYMENTS_SETUP_HINT } from '../../payments/payment-provider';
import { AutoTopupSettingsService } from '../../wallet/auto-topup-settings.service';
import { TRANSACTION_TYPES } from '../../wallet/entities/wallet-transaction.entity';
import { LedgerQueryService } from '../../wallet/ledger-query.service';
import { TopupCheckoutService } from '../../wallet/topup-checkout.service';
import { WalletService } from '../../wallet/wallet.service';
import { sendCsv } from '../csv';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import { formatDateTime, formatMillicents } from '../format';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formErrors } from '../sessions';
import { dollarsField, parseDollars } from '../../common/dollars';
import { LedgerQuery, queryString, readLedgerQuery, TOPUP_PRESETS_DOLLARS } from './billing-form';

interface Form {
  [field: string]: string | undefined;
}

/** The auto top-up form's fields, each with its own place for a message. */
const AUTO_TOPUP_FIELDS = ['enabled', 'threshold', 'amount', 'monthly_cap'];

/** Ledger rows per page. */
const LEDGER_PAGE_SIZE = 25;

/**
 * Billing: the wallet's balance, its ledger (the rows of /v1/wallet/transactions, filtered
 * by type and days, with a CSV download), manual top-ups through the payment provider's
 * checkout, and auto top-up (settings, the saved card, the attempts). Everyone in the
 * workspace sees it; only admins and owners change anything.
 */
@DashboardController('w/:workspaceId/billing')
export class BillingController {
  constructor(
    private readonly pages: PagesService,
    private readonly wallet: WalletService,
    private readonly ledger: LedgerQueryService,
    private readonly autoTopup: AutoTopupSettingsService,
    private readonly checkout: TopupCheckoutService,
  ) {}

  @Get()
  @RequireRole('member')
  async show(@Req() req: PageRequest, @Res() res: Response, @Query() query: Partial<LedgerQuery>): Promise<void> {
    await this.renderPage(req, res, ledgerQueryOf(query));
  }

  @Get('ledger.csv')
  @RequireRole('member')
  async ledgerCsv(@Req() req: PageRequest, @Res() res: Response, @Query() query: Partial<LedgerQuery>): Promise<void> {
    const read = readLedgerQuery({ ...ledgerQueryOf(query), after: '' });
    if (!read.ok) return this.renderPage(req, res, ledgerQueryOf(query), {}, 400);
    await sendCsv(
      res,
      `ledger-${req.member!.id}.csv`,
      ['id', 'created_at', 'type', 'amount_millicents', 'balance_after_millicents', 'description'],
      this.ledger.all(req.member!.id, read.filter),
      (row) => [row.id, row.createdAt.toISOString(), row.type, row.amountMillicents, row.balanceAfterMillicents, row.description],
    );
  }

  /** A manual top-up: to the provider's checkout, or (simulated) credited at once. */
  @Post('topup')
  @RequireRole('admin')
  async topup(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const workspaceId = req.member!.id;
    if (!this.checkout.providerName) return this.refuseWithoutPayments(req, res, 'topup');
    const typed = form.custom_amount?.trim() ? form.custom_amount : form.preset;
    const amount = parseDollars(typed);
    if (amount === null) {
      return this.renderPage(req, res, emptyLedgerQuery(), { topup: { amount: 'Give an amount in dollars, such as 25 or 25.50.' } }, 400, form);
    }
    let start;
    try {
      start = await this.checkout.startTopup(workspaceId, amount, this.returnUrls(req, 'topup/return'));
    } catch (error) {
      return this.renderPage(req, res, emptyLedgerQuery(), { topup: onFields(formErrors(error), ['amount']) }, 400, form);
    }
    if (start.kind === 'redirect') return this.toProvider(req, res, start.url, 'Paying for credit', 'Continue to payment');
    return this.pages.redirect(req, res, `/w/${workspaceId}/billing/topup/return?session_id=${encodeURIComponent(start.sessionId)}`);
  }

  /** Where the provider sends the person back: credited, or pending until the provider's webhook arrives. */
  @Get('topup/return')
  @RequireRole('member')
  async topupReturn(@Req() req: PageRequest, @Res() res: Response, @Query('session_id') sessionId: string | undefined): Promise<void> {
    await this.pages.render(req, res, 'billing-topup-return', await this.topupStatus(req, sessionId));
  }

  /** The status block of the return page, polled by htmx while the payment is pending. */
  @Get('topup/status')
  @RequireRole('member')
  async topupStatusFragment(@Req() req: PageRequest, @Res() res: Response, @Query('session_id') sessionId: string | undefined): Promise<void> {
    const html = await this.pages.fragment('partials/billing-topup-status', { base: req.basePath ?? '', member: req.member, ...(await this.topupStatus(req, sessionId)) });
    res.status(200).type('html').setHeader('Cache-Control', 'no-store').send(html);
  }

  @Post('auto-topup')
  @RequireRole('admin')
  async saveAutoTopup(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const workspaceId = req.member!.id;
    if (!this.autoTopup.providerName) return this.refuseWithoutPayments(req, res, 'autoTopup');
    const errors: Record<string, string> = {};
    const threshold = parseDollars(form.threshold);
    const amount = parseDollars(form.amount);
    const cap = form.monthly_cap?.trim() ? parseDollars(form.monthly_cap) : null;
    if (threshold === null) errors.threshold = 'Give the threshold in dollars, such as 5 or 5.50.';
    if (amount === null) errors.amount = 'Give the amount in dollars, such as 20.';
    if (form.monthly_cap?.trim() && cap === null) errors.monthly_cap = 'Give the monthly cap in dollars, or leave it empty for the default cap.';
    if (Object.keys(errors).length > 0) return this.renderPage(req, res, emptyLedgerQuery(), { autoTopup: errors }, 400, form);
    try {
      await this.autoTopup.configure({
        workspaceId,
        enabled: form.enabled === 'on',
        thresholdMillicents: threshold!,
        amountMillicents: amount!,
        monthlyCapMillicents: cap,
      });
    } catch (error) {
      return this.renderPage(req, res, emptyLedgerQuery(), { autoTopup: onFields(formErrors(error), AUTO_TOPUP_FIELDS) }, 400, form);
    }
    const text = form.enabled === 'on' ? 'Auto top-up is on.' : 'Auto top-up settings saved; it is off.';
    return this.pages.redirect(req, res, `/w/${workspaceId}/billing#auto-topup-heading`, { kind: 'success', text });
  }

  /** Saves a card for auto top-up: the provider's checkout in setup mode (simulated: at once). */
  @Post('card')
  @RequireRole('admin')
  async saveCard(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const workspaceId = req.member!.id;
    let start;
    try {
      start = await this.checkout.startCardSetup(workspaceId, this.returnUrls(req, 'card/return'));
    } catch (error) {
      return this.renderPage(req, res, emptyLedgerQuery(), { autoTopup: onFields(formErrors(error), AUTO_TOPUP_FIELDS) }, 400);
    }
    if (start.kind === 'redirect') return this.toProvider(req, res, start.url, 'Saving a card', 'Continue to save a card');
    return this.pages.redirect(req, res, `/w/${workspaceId}/billing#auto-topup-heading`, {
      kind: 'success',
      text: 'A card is saved for auto top-up (simulated: no real card is involved).',
    });
  }

  /** Back from saving a card: the provider's webhook saves it, which may take a moment. */
  @Get('card/return')
  @RequireRole('member')
  async cardReturn(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    const saved = (await this.autoTopup.summary(req.member!.id))?.paymentMethodSaved ?? false;
    return this.pages.redirect(req, res, `/w/${req.member!.id}/billing#auto-topup-heading`, {
      kind: saved ? 'success' : 'info',
      text: saved
        ? 'Your card is saved for auto top-up.'
        : 'Your card is being saved: it shows here as soon as the payment provider confirms it (reload in a moment).',
    });
  }

  /**
   * A POST of a form the page does not offer without payments (sent anyway): refused, with
   * the page saying why, and nothing credited or saved.
   */
  private refuseWithoutPayments(req: PageRequest, res: Response, form: 'topup' | 'autoTopup'): Promise<void> {
    return this.renderPage(req, res, emptyLedgerQuery(), { [form]: { form: `Payments are not configured on this service. ${PAYMENTS_SETUP_HINT}` } }, 400);
  }

  private async topupStatus(req: PageRequest, sessionId: string | undefined) {
    const valid = typeof sessionId === 'string' && /^[\w-]{1,255}$/.test(sessionId);
    const credit = valid ? await this.checkout.creditOf(req.member!.id, sessionId) : null;
    return {
      sessionId: valid ? sessionId : null,
      credited: credit ? { amount: formatMillicents(credit.amountMillicents), balanceAfter: formatMillicents(credit.balanceAfterMillicents), at: formatDateTime(credit.createdAt) } : null,
    };
  }

  private returnUrls(req: PageRequest, path: string) {
    const billing = this.pages.absoluteUrl(req, `/w/${req.member!.id}/billing`);
    return { successUrl: `${billing}/${path}?session_id={CHECKOUT_SESSION_ID}`, cancelUrl: `${billing}?checkout=canceled` };
  }

  /**
   * To the provider's hosted checkout. Not a redirect: the CSP's form-action 'self' keeps a
   * form's answer from sending the browser to another site, so the answer is a page whose
   * link billing.js follows at once (and a person without script clicks).
   */
  private async toProvider(req: PageRequest, res: Response, url: string, heading: string, label: string): Promise<void> {
    await this.pages.render(req, res, 'billing-checkout', { url, heading, label, host: hostOf(url) });
  }

  private async renderPage(
    req: PageRequest,
    res: Response,
    query: LedgerQuery,
    errors: { topup?: Record<string, string>; autoTopup?: Record<string, string> } = {},
    status = 200,
    form: Form = {},
  ): Promise<void> {
    const workspaceId = req.member!.id;
    const read = readLedgerQuery(query);
    const ledgerErrors = read.ok ? {} : read.errors;
    let page = { data: [] as Awaited<ReturnType<LedgerQueryService['page']>>['data'], has_more: false, next_cursor: null as string | null };
    if (read.ok) {
      try {
        page = await this.ledger.page(workspaceId, read.filter, { limit: LEDGER_PAGE_SIZE, startingAfter: read.startingAfter });
      } catch (error) {
        Object.assign(ledgerErrors, { after: formErrors(error).starting_after ?? 'That page link is broken.' });
      }
    }
    const [balance, autoTopup, attempts] = await Promise.all([
      this.wallet.balance(workspaceId),
      this.autoTopup.summary(workspaceId),
      this.ledger.recentAttempts(workspaceId, 10),
    ]);
    const filters = { type: query.type, from: query.from, to: query.to };
    const filtered = Boolean(query.type || query.from || query.to || query.after);
    const limits = this.checkout.limits;
    const bounds = this.autoTopup.bounds;
    await this.pages.render(
      req,
      res,
      'billing',
      {
        canManage: roleAtLeast(req.member!.role, 'admin'),
        provider: this.checkout.providerName,
        canceled: req.query.checkout === 'canceled',
        money: {
          balance: formatMillicents(balance.balanceMillicents),
          reserved: formatMillicents(balance.reservedMillicents),
          available: formatMillicents(balance.availableMillicents),
        },
        topup: {
          presets: TOPUP_PRESETS_DOLLARS,
          min: dollarsField(limits.minimumMillicents),
          max: dollarsField(limits.maximumMillicents),
          minText: formatMillicents(limits.minimumMillicents),
          maxText: formatMillicents(limits.maximumMillicents),
          amount: form.custom_amount ?? '',
          errors: errors.topup ?? {},
        },
        autoTopup: {
          configured: autoTopup !== null,
          // What is saved, for the summary; `enabled` is the form's, which a refused form keeps.
          storedEnabled: autoTopup?.enabled ?? false,
          enabled: form.threshold !== undefined ? form.enabled === 'on' : (autoTopup?.enabled ?? false),
          threshold: form.threshold ?? dollarsField(autoTopup?.thresholdMillicents),
          amount: form.threshold !== undefined ? (form.amount ?? '') : dollarsField(autoTopup?.amountMillicents),
          // Empty while the default applies, so that it follows the operator's default.
          monthlyCap: form.monthly_cap ?? (autoTopup?.monthlyCapIsDefault ? '' : dollarsField(autoTopup?.monthlyCapMillicents)),
          bounds: {
            amountMax: formatMillicents(bounds.amountMaxMillicents),
            defaultCap: formatMillicents(bounds.defaultMonthlyCapMillicents),
            defaultCapField: dollarsField(bounds.defaultMonthlyCapMillicents),
            capMax: formatMillicents(bounds.monthlyCapMaxMillicents),
            perHour: bounds.maxPerHour,
          },
          monthToDate: formatMillicents(autoTopup?.monthToDateMillicents ?? 0),
          cardSaved: autoTopup?.paymentMethodSaved ?? false,
          summary: autoTopup
            ? {
                threshold: formatMillicents(autoTopup.thresholdMillicents),
                amount: formatMillicents(autoTopup.amountMillicents),
                cap: `${formatMillicents(autoTopup.monthlyCapMillicents)}${autoTopup.monthlyCapIsDefault ? ' (the default)' : ''}`,
              }
            : null,
          errors: errors.autoTopup ?? {},
        },
        attempts: attempts.map((attempt) => ({
          at: formatDateTime(attempt.createdAt),
          amount: formatMillicents(attempt.amountMillicents),
          status: attempt.status.replace('_', ' '),
          tries: attempt.tries,
          reason: attempt.lastFailureReason,
          nextRetry: attempt.nextRetryAt ? formatDateTime(attempt.nextRetryAt) : null,
        })),
        ledger: {
          types: TRANSACTION_TYPES,
          query,
          errors: ledgerErrors,
          filtered,
          rows: page.data.map((row) => ({
            id: row.id,
            at: formatDateTime(row.createdAt),
            type: row.type,
            amount: formatMillicents(row.amountMillicents),
            credit: row.amountMillicents > 0,
            balanceAfter: formatMillicents(row.balanceAfterMillicents),
            description: row.description,
          })),
          nextHref: page.has_more ? `/w/${workspaceId}/billing${queryString({ ...filters, after: page.next_cursor ?? undefined })}#ledger-heading` : null,
          firstHref: query.after ? `/w/${workspaceId}/billing${queryString(filters)}#ledger-heading` : null,
          csvHref: `/w/${workspaceId}/billing/ledger.csv${queryString(filters)}`,
        },
      },
      status === 200 && Object.keys(ledgerErrors).length > 0 ? 400 : status,
    );
  }
}

/** Query parameters arrive as strings, arrays (a repeated name) or not at all: only single strings count. */
function ledgerQueryOf(query: Partial<Record<keyof LedgerQuery, unknown>>): LedgerQuery {
  const text = (value: unknown) => (typeof value === 'string' ? value.trim() : '');
  return { type: text(query.type), from: text(query.from), to: text(query.to), after: text(query.after) };
}

function emptyLedgerQuery(): LedgerQuery {
  return { type: '', from: '', to: '', after: '' };
}

function hostOf(url: string): string | null {
  try {
    return new URL(url).host;
  } catch {
    return null;
  }
}

/**
 * A service's error shown where the form can show it: at its field when the form has one,
 * else above the form (the card a Stripe payment needs is no field of the form, for one).
 */
function onFields(errors: Record<string, string>, fields: string[]): Record<string, string> {
  return Object.fromEntries(
    Object.entries(errors).map(([param, message]) =>
      // The service names the CLI's options; the page's way to a card is its button.
      PAYMENT_METHOD_PARAMS.includes(param)
        ? ['form', 'Save a card first (the button above): auto top-up charges the saved card.']
        : [fields.includes(param) ? param : 'form', message],
    ),
  );
}

const PAYMENT_METHOD_PARAMS = ['stripe_customer', 'stripe_payment_method'];
