import type { User } from '../accounts/entities/user.entity';
import type { MemberWorkspace } from '../accounts/members.service';
import type { ApiRequest } from '../common/http/request-context';

/** A message shown once, on the next page the person sees. */
export interface Flash {
  kind: 'success' | 'error' | 'info';
  text: string;
  /** A link the message offers (a verification link when no mail server is set up). */
  link?: { href: string; label: string };
}

declare module 'express-session' {
  interface SessionData {
    userId: string;
    /** When this session signed in (ms); a password change after it ends the session. */
    authenticatedAt: number;
    flash: Flash[];
    /** The workspace the person looked at last, for `/`. */
    lastWorkspaceId: string;
  }
}

/** A dashboard request, after the session middleware and DashboardGuard. */
export interface PageRequest extends ApiRequest {
  /** BASE_PATH, '' at the root: every link and redirect starts with it. */
  basePath: string;
  /** The signed-in person, set by DashboardGuard. */
  user?: User;
  /** The workspace of a `/w/:workspaceId` route, with the person's role in it. */
  member?: MemberWorkspace;
  /**
   * Set on an upload whose CSRF token is in its body (UploadTokenReader): reads it into
   * `body._csrf`. DashboardGuard calls it once the person's access is established, so a
   * refused upload's body is not read at all.
   */
  readCsrfTokenFromBody?: () => Promise<void>;
}
