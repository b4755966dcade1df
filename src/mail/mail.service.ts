import { Injectable, Logger, OnApplicationShutdown } from '@nestjs/common';
import { createTransport, Transporter } from 'nodemailer';
import { InjectConfig } from '../config/config.module';
import type { AppConfig } from '../config/app-config';

export interface MailMessage {
  to: string;
  subject: string;
  /** Plain text; the link, when there is one, is part of it too. */
  text: string;
  /** The action link of the message (verification, reset, invitation, sign-in). */
  link?: string;
}

/**
 * How a message went out: by SMTP; (without SMTP_URL) into the log only; or not at all (SMTP
 * is configured but refused it: the log has the failure and a masked link, never the link).
 */
export type MailDelivery = 'smtp' | 'log' | 'failed';

/** Messages logged instead of sent, newest last: what the tests and an operator's tools read. */
const LOGGED_KEPT = 100;

/** How much of a link's secret a log line keeps: enough to match a complaint, far too little to use. */
const MASKED_SECRET_CHARS = 8;

/**
 * Sends mail through SMTP_URL. Without it (a laptop, a self-hosted install with no mail
 * server) every message goes to the log instead, and the caller is told so, so the page
 * can show the person the link they would have received. With it, the log is not a way
 * links travel: nothing of a link but its first characters is ever written there.
 */
@Injectable()
export class MailService implements OnApplicationShutdown {
  private readonly logger = new Logger('Mail');
  private readonly transport: Transporter | null;
  readonly logged: MailMessage[] = [];

  constructor(@InjectConfig() private readonly config: AppConfig) {
    this.transport = config.dashboard.smtpUrl ? createTransport(config.dashboard.smtpUrl) : null;
  }

  get configured(): boolean {
    return this.transport !== null;
  }

  async send(message: MailMessage): Promise<MailDelivery> {
    if (this.transport) {
      try {
        await this.transport.sendMail({ from: this.config.dashboard.mailFrom, to: message.to, subject: message.subject, text: message.text });
        return 'smtp';
      } catch (error) {
        // Logs are read by more people than the mailbox's owner: the link stays out of them.
        const link = message.link ? ` (link ${maskLink(message.link)})` : '';
        this.logger.error(`Could not send "${message.subject}" to ${message.to}${link}: ${String(error)}`);
        return 'failed';
      }
    }
    this.logger.log(`Mail to ${message.to} (SMTP_URL is not set): ${message.subject}${message.link ? `: ${message.link}` : ''}`);
    this.logged.push(message);
    if (this.logged.length > LOGGED_KEPT) this.logged.shift();
    return 'log';
  }

  onApplicationShutdown(): void {
    this.transport?.close();
  }
}

/** A link with its last path segment (the secret) cut to its first characters: `.../password/reset/AbCdEfGh…`. */
export function maskLink(link: string): string {
  return link.replace(/[^/]+$/, (secret) => `${secret.slice(0, MASKED_SECRET_CHARS)}…`);
}
