import { applyDecorators, Controller, SetMetadata, UseGuards } from '@nestjs/common';
import { ApiExcludeController } from '@nestjs/swagger';
import { Public } from '../common/auth/auth.decorators';
import type { Role } from '../accounts/entities/membership.entity';
import { DashboardGuard } from './dashboard.guard';
import { PAGE_ACCESS, PageAccess } from './page-access';

/** A controller of dashboard pages: no API key, no API rate limit, the dashboard's guard and CSRF check. */
export function DashboardController(path = ''): ClassDecorator {
  return applyDecorators(Controller(path), Public(), ApiExcludeController(), UseGuards(DashboardGuard));
}

/** Anyone may open it; a signed-in person is still recognised. */
export const PublicPage = (): MethodDecorator => SetMetadata(PAGE_ACCESS, 'public' satisfies PageAccess);

/** Any signed-in person. */
export const SignedIn = (): MethodDecorator => SetMetadata(PAGE_ACCESS, 'signed-in' satisfies PageAccess);

/** A member of the `:workspaceId` workspace with at least this role (owner > admin > member). */
export const RequireRole = (role: Role): MethodDecorator => SetMetadata(PAGE_ACCESS, role satisfies PageAccess);

/** An operator only (OPERATOR_EMAILS or `cli operator grant`, email verified); anyone else, signed in or not, gets a 404. */
export const OperatorOnly = (): MethodDecorator => SetMetadata(PAGE_ACCESS, 'operator' satisfies PageAccess);
