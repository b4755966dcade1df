import { loadConfig } from './config/app-config';
import { exposureWarning, listensOnLoopbackOnly } from './exposure-warning';

describe('the start-up warning about a service open to strangers at the operator’s expense', () => {
  const exposed = { OPENAI_API_KEY: 'sk-real', LOG_LEVEL: 'error' };
  const warning = (env: Record<string, string>) => exposureWarning(loadConfig({ ...exposed, ...env }));

  it('warns outside production with a real key, beyond loopback (the default HOST) and open sign-up, naming the risk and the fixes', () => {
    const text = warning({});
    expect(text).toMatch(/Anyone who can reach this service can sign up and spend on your provider account/);
    expect(text).toMatch(/listens on 0\.0\.0\.0/);
    expect(text).toMatch(/OPENAI_API_KEY/);
    expect(text).toMatch(/HOST=127\.0\.0\.1.*SIGNUP=invite.*NODE_ENV=production/);
    expect(text).not.toMatch(/SIMULATED/);
    expect(warning({ ANTHROPIC_API_KEY: 'sk-ant', HOST: '192.168.1.20' })).toMatch(/listens on 192\.168\.1\.20 .*OPENAI_API_KEY, ANTHROPIC_API_KEY/);
  });

  it('says so when payments are simulated on top of it', () => {
    expect(warning({ PAYMENT_PROVIDER: 'simulated' })).toMatch(/Payments are SIMULATED \(PAYMENT_PROVIDER=simulated\): they can add credit for free/);
  });

  it('is silent when any one condition does not hold', () => {
    expect(exposureWarning(loadConfig({ LOG_LEVEL: 'error' }))).toBeNull();
    expect(warning({ HOST: '127.0.0.1' })).toBeNull();
    expect(warning({ HOST: 'localhost' })).toBeNull();
    expect(warning({ HOST: '::1' })).toBeNull();
    expect(warning({ SIGNUP: 'invite' })).toBeNull();
    expect(warning({ SIGNUP: 'closed' })).toBeNull();
    expect(warning({ NODE_ENV: 'production', DATABASE_URL: 'postgres://acs@db/acs' })).toBeNull();
    // Production with open sign-up chosen explicitly is the operator's informed choice, not a default to warn about.
    expect(warning({ NODE_ENV: 'production', DATABASE_URL: 'postgres://acs@db/acs', SIGNUP: 'open' })).toBeNull();
  });

  it('knows loopback from the rest', () => {
    for (const host of ['127.0.0.1', '127.1.2.3', 'localhost', 'LOCALHOST', '::1', '[::1]']) expect(listensOnLoopbackOnly(host)).toBe(true);
    for (const host of ['0.0.0.0', '::', '10.0.0.5', 'example.com', '127.0.0.1.example.com']) expect(listensOnLoopbackOnly(host)).toBe(false);
  });
});
