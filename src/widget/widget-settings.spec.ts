import { exactOrigin, readWidgetSettings, WidgetSettingsInput } from './widget-settings';

const VALID: WidgetSettingsInput = {
  enabled: true,
  allowedOrigins: 'https://shop.example.com\nhttp://127.0.0.1:8080/',
  title: 'Help',
  greeting: 'Hi!',
  placeholder: 'Ask…',
  accentColor: '#1E66F5',
  theme: 'dark',
  position: 'bottom-left',
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

  it('keeps a disabled widget without origins', () => {
    expect(readWidgetSettings({ ...VALID, enabled: false, allowedOrigins: '' }).ok).toBe(true);
  });
});
