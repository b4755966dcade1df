import { Injectable } from '@nestjs/common';
import { MailService } from '../../mail/mail.service';
import type { PageRequest } from '../page-request';
import { PagesService } from '../pages.service';

/**
 * Sends an email verification link. Without a mail server the person sees the link on
 * the next page: they typed the address themselves, so nothing leaks. With one, the link
 * only ever goes to the mailbox (also when sending fails): a verified address is what lets
 * an account accept an invitation, so it must mean the mailbox was read.
 */
@Injectable()
export class VerificationMail {
  constructor(
    private readonly mail: MailService,
    private readonly pages: PagesService,
  ) {}

  async send(req: PageRequest, email: string, token: string): Promise<void> {
    const link = this.pages.absoluteUrl(req, `/verify-email/${token}`);
    const delivery = await this.mail.send({
      to: email,
      subject: 'Verify your email address',
      text: `Welcome to the Assistant Chat Service. Open this link to verify your email address:\n\n${link}`,
      link,
    });
    this.pages.flash(
      req,
      delivery === 'smtp'
        ? { kind: 'info', text: `We sent a verification link to ${email}.` }
        : delivery === 'failed'
          ? { kind: 'info', text: `We could not send the verification link to ${email} just now. Ask for a new one on your account page later.` }
          : {
              kind: 'info',
              text: 'No mail server is configured, so here is the verification link we would have mailed:',
              link: { href: link, label: 'Verify my email address' },
            },
    );
  }
}
