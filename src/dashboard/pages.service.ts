import { Injectable } from '@nestjs/common';
import { Eta } from 'eta';
import type { Response } from 'express';
import * as path from 'node:path';
import { MembersService } from '../accounts/members.service';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { MailService } from '../mail/mail.service';
import { OperatorsService } from '../operator/operators.service';
import { csrf } from './dashboard.setup';
import type { Flash, PageRequest } from './page-request';

/** Appended to asset URLs, so a new release is never served a cached old script. */
const ASSET_VERSION = String(Date.now().toString(36));

/**
 * Renders the dashboard's eta templates (escaping by default) inside the layout, with
 * what every page needs: base path, CSRF token, the person, their workspaces, flash messages.
 */
@Injectable()
export class PagesService {
  private readonly eta: Eta;

  constructor(
    @InjectConfig() private readonly config: AppConfig,
    private readonly members: MembersService,
    private readonly mail: MailService,
    private readonly operators: OperatorsService,
  ) {
    this.eta = new Eta({ views: path.join(__dirname, 'views'), cache: config.production, autoEscape: true });
  }

  async render(req: PageRequest, res: Response, template: string, data: Record<string, unknown> = {}, status = 200): Promise<void> {
    const html = await this.html(req, template, data);
    res.status(status).type('html').setHeader('Cache-Control', 'no-store').send(html);
  }

  async html(req: PageRequest, template: string, data: Record<string, unknown> = {}): Promise<string> {
    const flash = req.session?.flash ?? [];
    if (req.session?.flash) delete req.session.flash;
    const workspaces = req.user ? await this.members.workspacesOf(req.user.id) : [];
    return this.eta.renderAsync(`pages/${template}`, {
      base: req.basePath ?? '',
      asset: (name: string) => `${req.basePath ?? ''}/assets/${name}?v=${ASSET_VERSION}`,
      csrfToken: req.session ? csrf.generateToken(req) : '',
      path: req.path,
      user: req.user ?? null,
      // The layout's "Operator" entry: shown to operators only.
      operator: req.user ? this.operators.isOperator(req.user) : false,
      member: req.member ?? null,
      workspaces,
      flash,
      mailConfigured: this.mail.configured,
      signup: this.config.dashboard.signup,
      ...data,
    });
  }

  /** A piece of a page (a partial) for htmx to swap in. */
  async fragment(template: string, data: Record<string, unknown>): Promise<string> {
    return this.eta.renderAsync(template, data);
  }

  /**
   * Post/redirect/get: `to` is a path inside the dashboard (`/w/...`). The session is saved
   * before the redirect is sent: express-session would otherwise send the headers while its
   * save is still under way, and a browser that follows the `Location` at once (a loaded
   * database makes this likely) reads the session from before, losing the flash message.
   */
  async redirect(req: PageRequest, res: Response, to: string, flash?: Flash): Promise<void> {
    if (flash) this.flash(req, flash);
    if (req.session) await new Promise<void>((resolve, reject) => req.session.save((error) => (error ? reject(error) : resolve())));
    res.redirect(303, `${req.basePath ?? ''}${to}`);
  }

  flash(req: PageRequest, flash: Flash): void {
    if (!req.session) return;
    req.session.flash = [...(req.session.flash ?? []), flash];
  }

  /**
   * An absolute link for mail and for copying: PUBLIC_URL (the service's address, sub-path
   * included), else the address this request came to.
   */
  absoluteUrl(req: PageRequest, to: string): string {
    const publicUrl = this.config.dashboard.publicUrl;
    return publicUrl ? `${publicUrl}${to}` : `${req.protocol}://${req.get('host')}${req.basePath ?? ''}${to}`;
  }
}
