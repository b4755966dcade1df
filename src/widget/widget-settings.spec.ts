import { exactOrigin, MAX_DAILY_CAP_MILLICENTS, readWidgetSettings, WidgetSettingsInput, widgetSettingsInput } from './widget-settings';

const VALID: WidgetSettingsInput = {
  enabled: true,
  allowedOrigins: 'https://shop.example.com\nhttp://127.0.0.1:8080/',
  title: 'Help',
  greeting: 'Hi!',
  placeholder: 'Ask…',
  accentColor: '#1E66F5',
  theme: 'dark',
  position: 'bottom-left',
  dailyCap: '5',
  historyMessages: '6',
  maxAnswerTokens: '512',
  showSources: false,
};

describe('widget settings', () => {
  it('normalises exact origins as browsers send them in Origin', () => {
    expect(exactOrigin('https://Shop.Example.com')).toBe('https://shop.example.com');
    expect(exactOrigin('https://shop.example.com:443/')).toBe('https://shop.example.com');
    expect(exactOrigin('http://localhost:8080')).toBe('http://localhost:8080');
  });

  it('refuses anything that is not exactly an origin', () => {
    for (const entry of ['shop.example.com', 'https://shop.example.com/path', 'ftp://x.example', 'https://user@x.example', 'https://x.example?q', '*', 'null']) {
      expect(exactOrigin(entry)).toBeNull();
    }
  });

  it('accepts valid settings, lowercasing the colour and dropping duplicate origins', () => {
    const read = readWidgetSettings({ ...VALID, allowedOrigins: 'https://a.example, https://a.example/ http://127.0.0.1:8080' });
    expect(read).toEqual({
      ok: true,
      settings: expect.objectContaining({ allowedOrigins: ['https://a.example', 'http://127.0.0.1:8080'], accentColor: '#1e66f5', theme: 'dark', position: 'bottom-left' }),
    });
  });

  it('refuses enabling without an origin, and bad values with a message per field', () => {
    const read = readWidgetSettings({ ...VALID, allowedOrigins: '', title: ' ', accentColor: 'red', theme: 'pink', position: 'top' });
    expect(read.ok).toBe(false);
    if (read.ok) return;
    expect(Object.keys(read.errors).sort()).toEqual(['accentColor', 'allowedOrigins', 'position', 'theme', 'title']);
    expect(read.errors.allowedOrigins).toMatch(/before enabling/);
  });

  it('shows the sources only when its owner turns it on', () => {
    expect(readWidgetSettings(VALID)).toMatchObject({ ok: true, settings: { showSources: false } });
    expect(readWidgetSettings({ ...VALID, showSources: true })).toMatchObject({ ok: true, settings: { showSources: true } });
  });

  it('keeps a disabled widget without origins', () => {
    expect(readWidgetSettings({ ...VALID, enabled: false, allowedOrigins: '' }).ok).toBe(true);
  });

  it('reads the spending settings: a daily cap in dollars (stored in millicents) up to its bound, history and answer bounds', () => {
    const read = readWidgetSettings({ ...VALID, dailyCap: '$12.50', historyMessages: '0', maxAnswerTokens: '4,096' });
    expect(read).toEqual({ ok: true, settings: expect.objectContaining({ dailyCapMillicents: 1_250_000, historyMessages: 0, maxAnswerTokens: 4_096 }) });
    expect(readWidgetSettings({ ...VALID, dailyCap: '1000' })).toMatchObject({ ok: true, settings: { dailyCapMillicents: MAX_DAILY_CAP_MILLICENTS } });
    for (const [dailyCap, historyMessages, maxAnswerTokens] of [
      ['1000.01', '21', '4097'],
      ['0', '-1', '15'],
      ['', 'six', ''],
      ['5.123', '2.5', '512 tokens'],
    ]) {
      const refused = readWidgetSettings({ ...VALID, dailyCap, historyMessages, maxAnswerTokens });
      expect(refused.ok).toBe(false);
      if (refused.ok) continue;
      expect(Object.keys(refused.errors).sort()).toEqual(['dailyCapMillicents', 'historyMessages', 'maxAnswerTokens']);
    }
  });

  it('gives the form back the values it saved', () => {
    const read = readWidgetSettings(VALID);
    if (!read.ok) throw new Error('valid settings refused');
    expect(widgetSettingsInput(read.settings)).toMatchObject({ dailyCap: '5.00', historyMessages: '6', maxAnswerTokens: '512' });
    expect(readWidgetSettings(widgetSettingsInput(read.settings))).toEqual(read);
  });
});
