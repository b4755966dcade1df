import { Injectable } from '@nestjs/common';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import { ApiError } from '../common/errors/api-error';
import type { AppConfig } from '../config/app-config';
import { InjectConfig } from '../config/config.module';
import { sessionSecret } from '../config/session-secret';

/** How long a visitor token is accepted; then the widget asks for a new one (same visitor, same conversation). */
export const VISITOR_TOKEN_TTL_MS = 7 * 24 * 3_600_000;

/**
 * `vt_<visitor: 32 hex>.<expiry: unix seconds, base 36>.<address tag>.<signature>`: what the
 * service issues to a widget in a browser, and what every visitor request carries.
 */
export const VISITOR_TOKEN = /^vt_([0-9a-f]{32})\.([0-9a-z]{1,10})\.([A-Za-z0-9_-]{11})\.([A-Za-z0-9_-]{22})$/;

/** A token's parts once its signature is checked. */
interface SignedToken {
  visitorId: string;
  expiresAt: number;
  addressTag: string;
}

/**
 * Visitor ids issued by the service, so that a script cannot make up a new visitor for each
 * message: an HMAC (keyed from SESSION_SECRET, so every replica checks what any issued)
 * over the widget, the visitor, an expiry and a tag of the client address that asked for it.
 * Stateless: nothing is stored per visitor until they write.
 */
@Injectable()
export class VisitorTokens {
  private readonly key: Buffer;

  constructor(@InjectConfig() config: AppConfig) {
    // A key of its own, derived from the sessions' secret: a token can never pass for a session signature.
    this.key = createHmac('sha256', sessionSecret(config)).update('acs widget visitor tokens v1').digest();
  }

  /** A token for `address`; with `visitorId` (a renewal) the visitor keeps their id and conversation. */
  issue(widgetId: string, address: string, visitorId?: string, now = Date.now()): { token: string; visitorId: string; expiresAt: Date } {
    const hex = visitorId?.slice(2) ?? randomBytes(16).toString('hex');
    const expires = Math.floor((now + VISITOR_TOKEN_TTL_MS) / 1000);
    const body = `vt_${hex}.${expires.toString(36)}.${this.addressTag(widgetId, address)}`;
    return { token: `${body}.${this.sign(widgetId, body)}`, visitorId: `v_${hex}`, expiresAt: new Date(expires * 1000) };
  }

  /**
   * The visitor id of a token issued for this widget to this address and not expired.
   * @throws ApiError 400 `invalid_visitor_id` when it is not a token at all, 401 `invalid_visitor_token` otherwise.
   */
  visitorOf(token: unknown, widgetId: string, address: string, now = Date.now()): string {
    if (typeof token !== 'string' || !VISITOR_TOKEN.test(token)) {
      throw new ApiError('bad_request', 'visitor must be the visitor token this service issued (POST /widget/v1/:widgetId/visitors).', {
        param: 'visitor',
        code: 'invalid_visitor_id',
      });
    }
    const signed = this.signed(token, widgetId);
    if (!signed || signed.expiresAt * 1000 <= now || !same(signed.addressTag, this.addressTag(widgetId, address))) {
      throw new ApiError('authentication_error', 'Your chat session has expired. Please reload the page.', { param: 'visitor', code: 'invalid_visitor_token' });
    }
    return signed.visitorId;
  }

  /** The visitor id of a token this service issued for this widget, whatever its address or age (a renewal keeps it); else null. */
  renewable(token: unknown, widgetId: string): string | null {
    if (typeof token !== 'string' || !VISITOR_TOKEN.test(token)) return null;
    return this.signed(token, widgetId)?.visitorId ?? null;
  }

  private signed(token: string, widgetId: string): SignedToken | null {
    const [, hex, expires, addressTag, signature] = VISITOR_TOKEN.exec(token)!;
    const body = token.slice(0, token.lastIndexOf('.'));
    if (!same(signature, this.sign(widgetId, body))) return null;
    return { visitorId: `v_${hex}`, expiresAt: parseInt(expires, 36), addressTag };
  }

  private sign(widgetId: string, body: string): string {
    return createHmac('sha256', this.key).update(`${widgetId}\n${body}`).digest('base64url').slice(0, 22);
  }

  /** Says which address a token belongs to without writing the address into it. */
  private addressTag(widgetId: string, address: string): string {
    return createHmac('sha256', this.key).update(`address\n${widgetId}\n${address}`).digest('base64url').slice(0, 11);
  }
}

function same(a: string, b: string): boolean {
  return a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b));
}
