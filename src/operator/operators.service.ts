import { Injectable } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Repository } from 'typeorm';
import { normalizeEmail } from '../accounts/accounts.service';
import { User } from '../accounts/entities/user.entity';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { writeAuditEntry } from './audit-log';

/** Who the CLI names as the operator of its own actions in the audit log. */
const CLI_ACTOR = 'cli';

/**
 * Who is an operator: an account marked by `cli operator grant`, or one whose email is in
 * OPERATOR_EMAILS. Operators see every workspace in the operator console; nobody else
 * learns it exists (its pages answer 404).
 */
@Injectable()
export class OperatorsService {
  constructor(
    @InjectRepository(User) private readonly users: Repository<User>,
    @InjectConfig() private readonly config: AppConfig,
  ) {}

  isOperator(user: Pick<User, 'email' | 'isOperator'>): boolean {
    return user.isOperator || this.config.dashboard.operatorEmails.includes(user.email);
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
    return this.users.manager.transaction(async (manager) => {
      const [user] = (await manager.query(`SELECT id, is_operator FROM users WHERE email = $1 FOR UPDATE`, [email])) as {
        id: string;
        is_operator: boolean;
      }[];
      if (!user) {
        throw ApiError.notFound(`No account with the email ${email}: the person signs up (or is invited) first.`, 'user_not_found');
      }
      if (user.is_operator !== isOperator) {
        await manager.query(`UPDATE users SET is_operator = $2, updated_at = now() WHERE id = $1`, [user.id, isOperator]);
        await writeAuditEntry(manager, {
          operator: { id: null, email: CLI_ACTOR },
          action: isOperator ? 'operator_grant' : 'operator_revoke',
          workspaceId: null,
          before: { email, is_operator: user.is_operator },
          after: { email, is_operator: isOperator },
          reason: null,
        });
      }
      const listed = this.config.dashboard.operatorEmails.includes(email);
      return { email, is_operator: isOperator || listed, also_in_operator_emails: listed };
    });
  }
}
