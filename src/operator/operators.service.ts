import { Injectable } from '@nestjs/common';
import { normalizeEmail } from '../accounts/accounts.service';
import { User } from '../accounts/entities/user.entity';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { AuditLogStore } from './audit-log-store';
import { OperatorsStore } from './operators-store';

/** Who the CLI names as the operator of its own actions in the audit log. */
const CLI_ACTOR = 'cli';

/**
 * Who is an operator: an account with a verified email address, marked by `cli operator
 * grant` or whose email is in OPERATOR_EMAILS. Verified, because with open sign-up whoever
 * signs up first with a listed address would otherwise get the console without owning the
 * mailbox. Operators see every workspace in the operator console; nobody else learns it
 * exists (its pages answer 404).
 */
@Injectable()
export class OperatorsService {
  constructor(
    private readonly store: OperatorsStore,
    private readonly auditLog: AuditLogStore,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  isOperator(user: Pick<User, 'email' | 'isOperator' | 'emailVerifiedAt'>): boolean {
    if (user.emailVerifiedAt === null) return false;
    return user.isOperator || this.config.dashboard.operatorEmails.includes(user.email);
  }

  /**
   * For the start-up log: the OPERATOR_EMAILS addresses that are no operator yet, because
   * no account has them or its address is not verified; null when every one is an operator.
   */
  async unverifiedOperatorsWarning(): Promise<string | null> {
    const listed = this.config.dashboard.operatorEmails;
    if (listed.length === 0) return null;
    const verified = await this.store.verifiedAddresses(listed);
    const waiting = listed.flatMap((email) => {
      if (!verified.has(email)) return [`${email} (no account)`];
      return verified.get(email) ? [] : [`${email} (not verified)`];
    });
    if (waiting.length === 0) return null;
    return (
      `OPERATOR_EMAILS lists ${waiting.join(', ')}: an operator needs an account with a verified email address, ` +
      'so these get no operator console until they sign up (or are invited) and follow the verification link.'
    );
  }

  /** Marks the account with this email as an operator (again is no error); audited as done by the CLI. */
  grant(email: string): Promise<{ email: string; is_operator: boolean; also_in_operator_emails: boolean }> {
    return this.mark(email, true);
  }

  /**
   * Removes the mark. An email also listed in OPERATOR_EMAILS stays an operator until it is
   * taken out of the variable: the answer says so.
   */
  revoke(email: string): Promise<{ email: string; is_operator: boolean; also_in_operator_emails: boolean }> {
    return this.mark(email, false);
  }

  private async mark(rawEmail: string, isOperator: boolean) {
    const email = normalizeEmail(rawEmail);
    return this.store.transaction(async (manager) => {
      const user = await this.store.lockAccount(manager, email);
      if (!user) {
        throw ApiError.notFound(`No account with the email ${email}: the person signs up (or is invited) first.`, 'user_not_found');
      }
      if (isOperator && !user.verified) {
        throw ApiError.conflict(
          `The account ${email} has not verified its email address: it follows the link it was sent (or asks for a new one), then grant again.`,
          'email_not_verified',
        );
      }
      if (user.is_operator !== isOperator) {
        await this.store.setOperator(manager, user.id, isOperator);
        await this.auditLog.append(manager, {
          operator: { id: null, email: CLI_ACTOR },
          action: isOperator ? 'operator_grant' : 'operator_revoke',
          workspaceId: null,
          before: { email, is_operator: user.is_operator },
          after: { email, is_operator: isOperator },
          reason: null,
        });
      }
      const listed = this.config.dashboard.operatorEmails.includes(email);
      return { email, is_operator: (isOperator || listed) && user.verified, also_in_operator_emails: listed };
    });
  }
}
