import { Body, Get, NotFoundException, Param, Post, Req, Res } from '@nestjs/common';
import { isUUID } from 'class-validator';
import type { Response } from 'express';
import { AccountsService } from '../../accounts/accounts.service';
import { ApiKeysService, KEY_NAME_MAX_LENGTH } from '../../workspaces/api-keys.service';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formatDateTime } from '../format';
import { formErrors } from '../sessions';
import { EXPIRY_CHOICES, keyRow, KeyFormValues, KeyLimitsFormValues, limitsFormValues, readKeyForm, readKeyLimitsForm } from './key-form';
import { FormFields, formList, formText } from '../form-fields';
import { KeySpendService } from '../../workspaces/key-spend';
import { assertKnownAssistants, SPEND_PERIODS } from '../../workspaces/key-limits';
import { ModelsService } from '../../models/models.service';
import { AssistantsService } from '../../assistants/assistants.service';
import { dollarsField, formatMillicents } from '../../common/dollars';


/**
 * Settings > API keys: everyone in the workspace sees the list; admins and owners create
 * and revoke. A new key's secret is in the answer to the POST that made it and nowhere
 * else (not in the session, not in a flash message, never in a later page).
 */
@DashboardController('w/:workspaceId/settings/keys')
export class KeysController {
  constructor(
    private readonly pages: PagesService,
    private readonly apiKeys: ApiKeysService,
    private readonly accounts: AccountsService,
    private readonly spend: KeySpendService,
    private readonly models: ModelsService,
    private readonly assistants: AssistantsService,
  ) {}

  @Get()
  @RequireRole('member')
  async list(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.renderList(req, res, { name: '', expires: 'never', expires_on: '' }, {});
  }

  @Post()
  @RequireRole('admin')
  async create(@Req() req: PageRequest, @Res() res: Response, @Body() form: FormFields): Promise<void> {
    const values: KeyFormValues = { name: formText(form, 'name'), expires: formText(form, 'expires') || 'never', expires_on: formText(form, 'expires_on') };
    const read = readKeyForm(values);
    if (!read.ok) return this.renderList(req, res, values, read.errors, 400);
    let created;
    try {
      created = await this.apiKeys.create(req.member!.id, { name: read.name, expiresAt: read.expiresAt, createdBy: req.user!.id });
    } catch (error) {
      const errors = formErrors(error);
      // The service names the field expires_at; the form's date is expires_on.
      if (errors.expires_at) errors.expires_on = errors.expires_at;
      return this.renderList(req, res, values, errors, 400);
    }
    await this.pages.render(
      req,
      res,
      'key-created',
      {
        name: read.name,
        apiKey: created.apiKey,
        expires: created.expiresAt ? formatDateTime(created.expiresAt) : null,
        apiBase: this.pages.absoluteUrl(req, '/v1'),
      },
      201,
    );
  }

  /** A plain form answers with a redirect; htmx (HX-Request) gets the key's new row, and the message beside it. */
  @Post(':keyId/revoke')
  @RequireRole('admin')
  async revoke(@Req() req: PageRequest, @Res() res: Response, @Param('keyId') keyId: string): Promise<void> {
    if (!isUUID(keyId)) throw new NotFoundException();
    const workspaceId = req.member!.id;
    // Another workspace's key is "not found", exactly like an unknown id.
    await this.apiKeys.revoke(keyId, workspaceId);
    const key = (await this.apiKeys.list(workspaceId)).find((candidate) => candidate.id === keyId);
    if (!key) throw new NotFoundException();
    const label = key.name ? `"${key.name}" (${key.displayPrefix}…)` : `${key.displayPrefix}…`;
    const flash = { kind: 'success' as const, text: `The key ${label} is revoked: requests with it are refused within seconds.` };
    if (req.headers['hx-request'] !== 'true') return this.pages.redirect(req, res, `/w/${workspaceId}/settings/keys`, flash);

    const row = await this.pages.fragment('partials/key-row', {
      base: req.basePath ?? '',
      csrfToken: '',
      member: req.member,
      canManage: true,
      key: keyRow(key, await this.accounts.namesOf([key.createdBy]), await this.spend.of(workspaceId, [key.id])),
    });
    // The row first: in a <template>, a <div> after a <tr> is kept, one before it would drop the row.
    const message = await this.pages.fragment('partials/flash', { flash: [flash] });
    res
      .status(200)
      .type('html')
      .setHeader('Cache-Control', 'no-store')
      .send(`${row}<div id="flash-area" hx-swap-oob="true">${message}</div>`);
  }

  /** A key's limits: what it spent in the period, and the form that sets them (admins). */
  @Get(':keyId/limits')
  @RequireRole('admin')
  async limits(@Req() req: PageRequest, @Res() res: Response, @Param('keyId') keyId: string): Promise<void> {
    const key = await this.keyOf(req, keyId);
    await this.renderLimits(req, res, key, limitsFormValues(key.limits, dollarsField), {});
  }

  @Post(':keyId/limits')
  @RequireRole('admin')
  async setLimits(@Req() req: PageRequest, @Res() res: Response, @Param('keyId') keyId: string, @Body() form: FormFields): Promise<void> {
    const key = await this.keyOf(req, keyId);
    const values: KeyLimitsFormValues = {
      spend_limit: formText(form, 'spend_limit'),
      spend_limit_period: formText(form, 'spend_limit_period') || 'none',
      allowed_models: formList(form, 'allowed_models'),
      allowed_assistants: formList(form, 'allowed_assistants'),
      rate_limit_rpm: formText(form, 'rate_limit_rpm'),
      allowed_ips: formText(form, 'allowed_ips'),
    };
    const read = readKeyLimitsForm(values);
    if (!read.ok) return this.renderLimits(req, res, key, values, read.errors, 400);
    try {
      // The form offers the workspace's assistants: another slug is a hand-made post or a typo, refused.
      const slugs = (await this.assistants.list(req.member!.id)).map((assistant) => assistant.slug);
      assertKnownAssistants(read.change.allowedAssistants, slugs);
      await this.apiKeys.setLimits(key.id, read.change, req.member!.id);
    } catch (error) {
      return this.renderLimits(req, res, key, values, formErrors(error), 400);
    }
    const label = key.name ? `"${key.name}"` : key.displayPrefix;
    await this.pages.redirect(req, res, `/w/${req.member!.id}/settings/keys`, { kind: 'success', text: `The limits of the key ${label} are saved: they apply within seconds.` });
  }

  /** A key of the member's workspace; another workspace's is not found, like an unknown id. */
  private async keyOf(req: PageRequest, keyId: string) {
    if (!isUUID(keyId)) throw new NotFoundException();
    const key = (await this.apiKeys.list(req.member!.id)).find((candidate) => candidate.id === keyId);
    if (!key) throw new NotFoundException();
    return key;
  }

  private async renderLimits(
    req: PageRequest,
    res: Response,
    key: Awaited<ReturnType<KeysController['keyOf']>>,
    values: KeyLimitsFormValues,
    errors: Record<string, string>,
    status = 200,
  ): Promise<void> {
    const workspaceId = req.member!.id;
    const spent = (await this.spend.of(workspaceId, [key.id])).get(key.id);
    const assistants = await this.assistants.list(workspaceId);
    await this.pages.render(
      req,
      res,
      'key-limits',
      {
        key: { id: key.id, label: key.name ?? `${key.displayPrefix}…`, prefix: `${key.displayPrefix}…` },
        spent: spent && {
          period: formatMillicents(spent.period),
          held: formatMillicents(spent.held),
          today: formatMillicents(spent.today),
          month: formatMillicents(spent.month),
        },
        periodName: key.limits.spendLimitPeriod,
        values,
        errors,
        periods: SPEND_PERIODS,
        models: this.models.list().map((model) => model.id),
        assistants: assistants.map((assistant) => ({ slug: assistant.slug, name: assistant.name })),
      },
      status,
    );
  }

  private async renderList(
    req: PageRequest,
    res: Response,
    values: KeyFormValues,
    errors: Record<string, string>,
    status = 200,
  ): Promise<void> {
    const keys = await this.apiKeys.list(req.member!.id);
    const creators = await this.accounts.namesOf(keys.map((key) => key.createdBy));
    const spend = await this.spend.of(req.member!.id, keys.filter((key) => key.limits.spendLimitMillicents !== null).map((key) => key.id));
    await this.pages.render(
      req,
      res,
      'keys',
      {
        keys: keys.map((key) => keyRow(key, creators, spend)),
        canManage: roleAtLeast(req.member!.role, 'admin'),
        values,
        errors,
        expiryChoices: EXPIRY_CHOICES,
        nameMaxLength: KEY_NAME_MAX_LENGTH,
      },
      status,
    );
  }
}
