import { createParamDecorator, ExecutionContext, SetMetadata } from '@nestjs/common';
import type { ApiRequest, Principal } from '../http/request-context';

export const IS_PUBLIC = 'acs:public';

/** Opts a route out of API-key authentication and rate limiting (health, docs, dashboard). */
export const Public = (): MethodDecorator & ClassDecorator => SetMetadata(IS_PUBLIC, true);

/** The authenticated caller of a `/v1` route. */
export const CurrentPrincipal = createParamDecorator((_: unknown, context: ExecutionContext): Principal => {
  const principal = context.switchToHttp().getRequest<ApiRequest>().principal;
  if (!principal) throw new Error('CurrentPrincipal used on a route without authentication');
  return principal;
});
