import { loadConfig } from '../config/app-config';
import { ApiError } from '../common/errors/api-error';
import { VISITOR_TOKEN, VISITOR_TOKEN_TTL_MS, VisitorTokens } from './visitor-tokens';

const SECRET = 'a-session-secret-of-at-least-32-characters';
const tokens = (secret = SECRET) => new VisitorTokens({ ...loadConfig({ LOG_LEVEL: 'error' }), sessionSecret: secret });

function refusal(run: () => unknown): { status: number; code: string } {
  try {
    run();
  } catch (error) {
    if (error instanceof ApiError) return { status: error.status, code: error.code };
    throw error;
  }
  throw new Error('not refused');
}

describe('visitor tokens', () => {
  const now = Date.UTC(2026, 10, 27, 12);

  it('stands for a new visitor, for the widget and the address that asked', () => {
    const issued = tokens().issue('widget-a', '203.0.113.7', undefined, now);
    expect(issued.token).toMatch(VISITOR_TOKEN);
    expect(issued.visitorId).toMatch(/^v_[0-9a-f]{32}$/);
    expect(issued.expiresAt.getTime()).toBe(Math.floor((now + VISITOR_TOKEN_TTL_MS) / 1000) * 1000);
    // The address is not readable from the token.
    expect(issued.token).not.toContain('203.0.113.7');
    expect(tokens().visitorOf(issued.token, 'widget-a', '203.0.113.7', now + 1_000)).toBe(issued.visitorId);
    expect(tokens().issue('widget-a', '203.0.113.7', undefined, now).visitorId).not.toBe(issued.visitorId);
  });

  it('refuses what is not a token with 400, and a token of another widget, address, secret, or past its expiry with 401', () => {
    const { token } = tokens().issue('widget-a', '203.0.113.7', undefined, now);
    for (const bad of [undefined, 42, '', `v_${'a'.repeat(32)}`, `${token}x`, token.replace('vt_', 'vx_')]) {
      expect(refusal(() => tokens().visitorOf(bad, 'widget-a', '203.0.113.7', now))).toEqual({ status: 400, code: 'invalid_visitor_id' });
    }
    const unauthorised = { status: 401, code: 'invalid_visitor_token' };
    expect(refusal(() => tokens().visitorOf(token, 'widget-b', '203.0.113.7', now))).toEqual(unauthorised);
    expect(refusal(() => tokens().visitorOf(token, 'widget-a', '203.0.113.8', now))).toEqual(unauthorised);
    expect(refusal(() => tokens(`${SECRET}-other`).visitorOf(token, 'widget-a', '203.0.113.7', now))).toEqual(unauthorised);
    expect(refusal(() => tokens().visitorOf(token, 'widget-a', '203.0.113.7', now + VISITOR_TOKEN_TTL_MS + 1_000))).toEqual(unauthorised);
    // Any part changed breaks the signature: a longer expiry, another visitor.
    const [visitor, expiry, tag, signature] = token.split('.');
    const later = `${visitor}.${(parseInt(expiry, 36) + 3_600).toString(36)}.${tag}.${signature}`;
    const other = `${visitor.slice(0, -1)}${visitor.endsWith('0') ? '1' : '0'}.${expiry}.${tag}.${signature}`;
    for (const forged of [later, other]) expect(refusal(() => tokens().visitorOf(forged, 'widget-a', '203.0.113.7', now))).toEqual(unauthorised);
  });

  it('renews a token of this widget from any address or age, keeping the visitor; nothing else', () => {
    const first = tokens().issue('widget-a', '203.0.113.7', undefined, now);
    expect(tokens().renewable(first.token, 'widget-a')).toBe(first.visitorId);
    const renewed = tokens().issue('widget-a', '198.51.100.1', tokens().renewable(first.token, 'widget-a')!, now + 30 * 86_400_000);
    expect(renewed.visitorId).toBe(first.visitorId);
    expect(tokens().visitorOf(renewed.token, 'widget-a', '198.51.100.1', now + 30 * 86_400_000)).toBe(first.visitorId);
    expect(tokens().renewable(first.token, 'widget-b')).toBeNull();
    expect(tokens().renewable(`v_${'a'.repeat(32)}`, 'widget-a')).toBeNull();
    expect(tokens(`${SECRET}-other`).renewable(first.token, 'widget-a')).toBeNull();
  });
});
