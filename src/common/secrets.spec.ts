import { redactSecrets, registerSecrets, urlPassword } from './secrets';

describe('redactSecrets', () => {
  it("masks the shapes of providers' keys wherever they appear", () => {
    const text = [
      `openai sk-proj-${'a'.repeat(40)}`,
      `anthropic sk-ant-api03-${'b'.repeat(40)}`,
      `google AIza${'C'.repeat(35)}`,
      `stripe sk_live_${'d'.repeat(24)} rk_test_${'e'.repeat(24)} whsec_${'f'.repeat(32)}`,
      'header Authorization: Bearer tok.en-value',
      'url postgres://acs:s3cret@db/acs',
    ].join('\n');
    const masked = redactSecrets(text);
    for (const part of ['aaaaaaaa', 'bbbbbbbb', 'CCCCCCCC', 'dddddddd', 'eeeeeeee', 'ffffffff', 'tok.en-value', 's3cret']) {
      expect(masked).not.toContain(part);
    }
    expect(masked).toContain('Bearer [redacted]');
    expect(masked).toContain('postgres://acs:[redacted]@db/acs');
  });

  it('masks registered values whole, longest first, and ignores values too short to be secrets', () => {
    registerSecrets(['plain-secret-value-1', 'plain-secret-value-12345', undefined, '', 'abc']);
    expect(redactSecrets('a plain-secret-value-12345 and plain-secret-value-1.')).toBe('a [redacted] and [redacted].');
    expect(redactSecrets('abc stays')).toBe('abc stays');
  });

  it('reads the password of a URL, decoded', () => {
    expect(urlPassword('redis://:p%40ss-word@cache:6379')).toBe('p@ss-word');
    expect(urlPassword('smtp://mail.example')).toBeUndefined();
    expect(urlPassword(undefined)).toBeUndefined();
  });
});
