import { Body, Get, NotFoundException, Param, Post, Req, Res } from '@nestjs/common';
import { isUUID } from 'class-validator';
import type { Response } from 'express';
import { AccountsService } from '../../accounts/accounts.service';
import { ApiKeysService } from '../../workspaces/api-keys.service';
import { roleAtLeast } from '../../accounts/entities/membership.entity';
import { DashboardController, RequireRole } from '../dashboard.decorators';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';
import { formatDateTime } from '../format';
import { formErrors } from '../sessions';
import { EXPIRY_CHOICES, KEY_NAME_MAX_LENGTH, keyRow, KeyFormValues, readKeyForm } from './key-form';

interface Form {
  [field: string]: string | undefined;
}

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
  ) {}

  @Get()
  @RequireRole('member')
  async list(@Req() req: PageRequest, @Res() res: Response): Promise<void> {
    await this.renderList(req, res, { name: '', expires: 'never', expires_on: '' }, {});
  }

  @Post()
  @RequireRole('admin')
  async create(@Req() req: PageRequest, @Res() res: Response, @Body() form: Form): Promise<void> {
    const values: KeyFormValues = { name: form.name ?? '', expires: form.expires ?? 'never', expires_on: form.expires_on ?? '' };
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
      key: keyRow(key, await this.accounts.namesOf([key.createdBy])),
    });
    // The row first: in a <template>, a <div> after a <tr> is kept, one before it would drop the row.
    const message = await this.pages.fragment('partials/flash', { flash: [flash] });
    res
      .status(200)
      .type('html')
      .setHeader('Cache-Control', 'no-store')
      .send(`${row}<div id="flash-area" hx-swap-oob="true">${message}</div>`);
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
    await this.pages.render(
      req,
      res,
      'keys',
      {
        keys: keys.map((key) => keyRow(key, creators)),
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
