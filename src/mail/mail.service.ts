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

/** How a message went out: by SMTP, or (without SMTP_URL) into the log only. */
export type MailDelivery = 'smtp' | 'log';

/** Messages logged instead of sent, newest last: what the tests and an operator's tools read. */
const LOGGED_KEPT = 100;

/**
 * Sends mail through SMTP_URL. Without it (a laptop, a self-hosted install with no mail
 * server) every message goes to the log instead, and the caller is told so, so the page
 * can show the person the link they would have received.
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
        // The person still gets on: the message is logged, as without a mail server.
        this.logger.error(`Could not send "${message.subject}" to ${message.to}: ${String(error)}; logging it instead`);
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
