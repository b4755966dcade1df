import { CanActivate, ExecutionContext, ForbiddenException, Injectable, NotFoundException, UnauthorizedException } from '@nestjs/common';
import { Reflector } from '@nestjs/core';
import { AccountsService } from '../accounts/accounts.service';
import { isRole, roleAtLeast } from '../accounts/entities/membership.entity';
import { MembersService } from '../accounts/members.service';
import { OperatorsService } from '../operator/operators.service';
import { csrf } from './dashboard.setup';
import { PAGE_ACCESS, PageAccess } from './page-access';
import type { PageRequest } from './page-request';

/** Thrown when a page needs a signed-in person and the session has none (or has ended). */
export class SignInRequired extends UnauthorizedException {
  constructor() {
    super('Sign in to continue.');
  }
}

/** A state-changing request without the session's CSRF token. */
export class CsrfTokenInvalid extends ForbiddenException {
  constructor() {
    super('This form has expired. Reload the page and try again.');
  }
}

const SAFE_METHODS = new Set(['GET', 'HEAD', 'OPTIONS']);

/**
 * On every dashboard handler: checks the CSRF token of every state-changing request,
 * recognises the signed-in person (a session older than their last password change is
 * over), and enforces the handler's access: public, signed in, operator, or a role in the
 * route's workspace. Someone who is not a member gets a 404, exactly as for a workspace that
 * does not exist; a member without the role gets a 403.
 */
@Injectable()
export class DashboardGuard implements CanActivate {
  constructor(
    private readonly reflector: Reflector,
    private readonly accounts: AccountsService,
    private readonly members: MembersService,
    private readonly operators: OperatorsService,
  ) {}

  async canActivate(context: ExecutionContext): Promise<boolean> {
    const req = context.switchToHttp().getRequest<PageRequest>();
    const access = this.reflector.get<PageAccess | undefined>(PAGE_ACCESS, context.getHandler());
    if (!access) throw new Error(`${context.getClass().name}.${context.getHandler().name} declares no page access`);

    if (access === 'operator') {
      // Before the CSRF check: to anyone but an operator the console does not exist, whatever they send.
      req.user = (await this.signedInUser(req)) ?? undefined;
      if (!req.user || !this.operators.isOperator(req.user)) throw new NotFoundException();
      if (!SAFE_METHODS.has(req.method) && !csrf.isRequestValid(req)) throw new CsrfTokenInvalid();
      return true;
    }
    // An upload's token is in its body: read, and checked, only once the person may upload.
    const tokenInBody = req.readCsrfTokenFromBody;
    if (!SAFE_METHODS.has(req.method) && !tokenInBody && !csrf.isRequestValid(req)) throw new CsrfTokenInvalid();

    req.user = (await this.signedInUser(req)) ?? undefined;
    if (access !== 'public') await this.checkAccess(req, access);
    if (tokenInBody) {
      await tokenInBody();
      if (!csrf.isRequestValid(req)) throw new CsrfTokenInvalid();
    }
    return true;
  }

  /** Signed in, and for a role, a member of the route's workspace with it. */
  private async checkAccess(req: PageRequest, access: Exclude<PageAccess, 'public' | 'operator'>): Promise<void> {
    if (!req.user) throw new SignInRequired();
    if (access === 'signed-in') return;
    const workspaceId = req.params.workspaceId;
    if (typeof workspaceId !== 'string') throw new Error('A role is required on a route without :workspaceId');
    const member = await this.members.membership(req.user.id, workspaceId);
    if (!member) throw new NotFoundException();
    req.member = member;
    if (isRole(access) && !roleAtLeast(member.role, access)) {
      throw new ForbiddenException(`This needs the ${access} role; yours is ${member.role}.`);
    }
  }

  private async signedInUser(req: PageRequest) {
    const session = req.session;
    if (!session?.userId) return null;
    const user = await this.accounts.findById(session.userId);
    if (!user || (session.authenticatedAt ?? 0) < user.sessionsValidFrom.getTime()) {
      // Deleted, or a password change since: this session is over.
      delete session.userId;
      delete session.authenticatedAt;
      return null;
    }
    return user;
  }
}
