import type { Role } from '../accounts/entities/membership.entity';

/** Metadata key of a handler's access rule, read by DashboardGuard. */
export const PAGE_ACCESS = 'acs:page-access';

/**
 * Who may use a handler: anyone (`public`), any signed-in person (`signed-in`), a member
 * of the route's workspace with at least a role, or an operator (`operator`: the console,
 * 404 to anyone else). Every dashboard handler declares one; a test checks that none is missing.
 */
export type PageAccess = 'public' | 'signed-in' | 'operator' | Role;
