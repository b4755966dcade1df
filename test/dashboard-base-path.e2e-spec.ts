/**
 * BASE_PATH: the service hosted under a sub-path (`/acs`). Every link, form action and
 * asset of the pages starts with it, redirects stay under it, the session cookie is
 * scoped to it, and the API answers both with the prefix (a proxy that keeps it) and
 * without (a proxy that strips it).
 */
import type { Browser } from 'playwright-core';
import { SESSION_COOKIE } from '../src/dashboard/dashboard.setup';
import { MailService } from '../src/mail/mail.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium } from './support/browser';
import { startTestApp, testConfig, TestApp } from './support/test-app';

const BASE = '/acs';

interface PageResponse {
  status: number;
  headers: Headers;
  body: string;
  location: string | null;
  setCookies: string[];
}

/** A minimal browser: a cookie jar, forms, no redirects followed. */
class PageClient {
  private readonly jar = new Map<string, string>();

  constructor(private readonly baseUrl: string) {}

  async request(method: string, path: string, form?: Record<string, string>): Promise<PageResponse> {
    const headers: Record<string, string> = { accept: 'text/html' };
    if (this.jar.size > 0) headers.cookie = [...this.jar].map(([name, value]) => `${name}=${value}`).join('; ');
    if (form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const body = form ? new URLSearchParams(form).toString() : undefined;
    const res = await fetch(this.baseUrl + path, { method, headers, redirect: 'manual', body });
    const setCookies = res.headers.getSetCookie();
    for (const line of setCookies) {
      const pair = line.split(';')[0];
      const name = pair.slice(0, pair.indexOf('='));
      const value = pair.slice(pair.indexOf('=') + 1);
      if (value === '' || /expires=thu, 01 jan 1970/i.test(line)) this.jar.delete(name);
      else this.jar.set(name, value);
    }
    return { status: res.status, headers: res.headers, body: await res.text(), location: res.headers.get('location'), setCookies };
  }

  get(path: string): Promise<PageResponse> {
    return this.request('GET', path);
  }

  post(path: string, form: Record<string, string>): Promise<PageResponse> {
    return this.request('POST', path, form);
  }
}

function csrfOf(html: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(html);
  if (!match) throw new Error('no CSRF token in the page');
  return match[1];
}

/** Every URL-valued attribute of a page: href, src, action, and htmx's hx-get/hx-post/... */
function urlsOf(html: string): string[] {
  return [...html.matchAll(/\s(?:href|src|action|hx-(?:get|post|put|patch|delete))="([^"]*)"/g)].map((match) => match[1]);
}

/**
 * URLs of a page that do not stay under the base path (in-page anchors aside; absolute
 * links to this service's own address count by their path).
 */
function outsideBase(html: string, origin: string): string[] {
  return urlsOf(html).filter((url) => {
    if (url.startsWith('#')) return false;
    const path = url.startsWith(`${origin}/`) ? url.slice(origin.length) : url;
    return path !== BASE && !path.startsWith(`${BASE}/`) && !path.startsWith(`${BASE}?`);
  });
}

describe('dashboard under BASE_PATH=/acs', () => {
  let t: TestApp;

  beforeAll(async () => {
    t = await startTestApp({ config: { dashboard: { ...testConfig().dashboard, basePath: BASE } } });
  });
  afterAll(() => t?.close());

  it('serves the sign-in page under the prefix, every link, form and asset under it too', async () => {
    const client = new PageClient(t.baseUrl);
    const res = await client.get(`${BASE}/login`);
    expect(res.status).toBe(200);
    const urls = urlsOf(res.body);
    expect(urls.length).toBeGreaterThan(5);
    expect(urls).toEqual(expect.arrayContaining([`${BASE}/login`, `${BASE}/signup`, `${BASE}/password/forgot`]));
    expect(outsideBase(res.body, t.baseUrl)).toEqual([]);
    // The cookie belongs to the sub-path only.
    const cookie = res.setCookies.find((line) => line.startsWith(`${SESSION_COOKIE}=`));
    expect(cookie).toMatch(/;\s*Path=\/acs(;|$)/i);
  });

  it('serves every asset a page names under the prefix, with the right content type', async () => {
    const page = await new PageClient(t.baseUrl).get(`${BASE}/login`);
    const assets = urlsOf(page.body).filter((url) => url.startsWith(`${BASE}/assets/`));
    const expected: Record<string, RegExp> = {
      'pico.min.css': /^text\/css/,
      'dashboard.css': /^text\/css/,
      'htmx.min.js': /^(application|text)\/javascript/,
      'dashboard.js': /^(application|text)\/javascript/,
      'favicon.svg': /^image\/svg\+xml/,
    };
    expect(assets.map((url) => url.slice(`${BASE}/assets/`.length).split('?')[0]).sort()).toEqual(Object.keys(expected).sort());
    for (const url of assets) {
      const res = await fetch(t.baseUrl + url);
      const name = url.slice(`${BASE}/assets/`.length).split('?')[0];
      expect({ url, status: res.status }).toEqual({ url, status: 200 });
      expect(res.headers.get('content-type')).toMatch(expected[name]);
      expect((await res.arrayBuffer()).byteLength).toBeGreaterThan(100);
    }
  });

  it('keeps sign-up, the pages after it, sign-in redirects and sign-out under the prefix', async () => {
    const client = new PageClient(t.baseUrl);
    const email = `base-${Date.now()}@example.com`;
    const form = await client.get(`${BASE}/signup`);
    expect(form.status).toBe(200);
    expect(outsideBase(form.body, t.baseUrl)).toEqual([]);
    const res = await client.post(`${BASE}/signup`, { _csrf: csrfOf(form.body), name: 'Base Path', email, password: 'sub paths are fine' });
    expect(res.status).toBe(303);
    expect(res.location).toMatch(/^\/acs\/w\/[0-9a-f-]{36}$/);
    const overview = await client.get(res.location!);
    expect(overview.status).toBe(200);
    expect(outsideBase(overview.body, t.baseUrl)).toEqual([]);
    // The link shown (and mailed) for verification is under the prefix too.
    const link = t.app.get(MailService).logged.filter((m) => m.to === email).at(-1)!.link!;
    expect(new URL(link).pathname).toMatch(/^\/acs\/verify-email\//);
    expect(overview.body).toContain(link);
    const account = await client.get(`${BASE}/account`);
    expect(account.status).toBe(200);
    expect(outsideBase(account.body, t.baseUrl)).toEqual([]);

    const home = await client.get(`${BASE}/`);
    expect(home.location).toBe(res.location);
    const verified = await client.get(new URL(link).pathname);
    expect(verified.location).toBe(`${BASE}/`);

    const signOut = await client.post(`${BASE}/logout`, { _csrf: csrfOf(account.body) });
    expect(signOut.status).toBe(303);
    expect(signOut.location).toBe(`${BASE}/login?signed_out=1`);
    expect(signOut.setCookies.find((line) => line.startsWith(`${SESSION_COOKIE}=`))).toMatch(/Path=\/acs(;|$)/i);

    const stranger = new PageClient(t.baseUrl);
    const bounced = await stranger.get(`${BASE}/account`);
    expect(bounced.status).toBe(303);
    expect(bounced.location).toBe(`${BASE}/login?next=%2Faccount`);
    const signIn = await stranger.get(bounced.location!);
    expect(outsideBase(signIn.body, t.baseUrl)).toEqual([]);
    const back = await stranger.post(`${BASE}/login?next=%2Faccount`, { _csrf: csrfOf(signIn.body), email, password: 'sub paths are fine' });
    expect(back.location).toBe(`${BASE}/account`);
  });

  it('answers pages in the layout under the prefix when they are errors', async () => {
    const res = await new PageClient(t.baseUrl).get(`${BASE}/no/such/page`);
    expect(res.status).toBe(404);
    expect(res.body).toContain('class="container site-header"');
    expect(outsideBase(res.body, t.baseUrl)).toEqual([]);
  });

  it('still works when the proxy strips the prefix: pages without it, links with it', async () => {
    const res = await new PageClient(t.baseUrl).get('/login');
    expect(res.status).toBe(200);
    expect(outsideBase(res.body, t.baseUrl)).toEqual([]);
  });

  it('answers the API under /v1 and under /acs/v1', async () => {
    const workspace = await t.createWorkspace();
    for (const prefix of ['', BASE]) {
      const res = await fetch(`${t.baseUrl}${prefix}/v1/models`, { headers: { authorization: `Bearer ${workspace.apiKey}` } });
      expect({ prefix, status: res.status }).toEqual({ prefix, status: 200 });
      expect(res.headers.get('content-type')).toMatch(/application\/json/);
      expect(((await res.json()) as { object: string }).object).toBe('list');
    }
    const unauthorized = await fetch(`${t.baseUrl}${BASE}/v1/models`);
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.headers.get('content-type')).toMatch(/application\/json/);
  });

  it('answers chat completions under /v1 and under /acs/v1 on the direct route (src/common/http/direct-route.ts)', async () => {
    const workspace = await t.createWorkspace();
    for (const prefix of ['', BASE]) {
      const res = await fetch(`${t.baseUrl}${prefix}/v1/chat/completions?trace=1`, {
        method: 'POST',
        headers: { authorization: `Bearer ${workspace.apiKey}`, 'content-type': 'application/json' },
        body: JSON.stringify({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hello' }], max_tokens: 16 }),
      });
      expect({ prefix, status: res.status }).toEqual({ prefix, status: 200 });
      // Express's res.json would have added an ETag: the direct route answered.
      expect({ prefix, etag: res.headers.get('etag') }).toEqual({ prefix, etag: null });
      expect(((await res.json()) as { object: string }).object).toBe('chat.completion');
    }
  });

  describeWithBrowser('in a browser', () => {
    let browser: Browser;

    beforeAll(async () => {
      browser = await launchChromium();
    });
    afterAll(() => browser?.close());

    it('loads the sign-in page under the prefix with its stylesheets and scripts', async () => {
      const context = await browser.newContext({ baseURL: t.baseUrl, viewport: { width: 1280, height: 800 } });
      try {
        const page = await context.newPage();
        const problems = collectConsoleErrors(page);
        const failed: string[] = [];
        page.on('response', (response) => {
          if (response.status() >= 400) failed.push(`${response.status()} ${response.url()}`);
        });
        const stylesheets: string[] = [];
        page.on('requestfinished', (request) => {
          if (request.resourceType() === 'stylesheet') stylesheets.push(new URL(request.url()).pathname);
        });
        expect((await page.goto(`${BASE}/login`))?.status()).toBe(200);
        await page.waitForLoadState('load');
        expect(stylesheets.sort()).toEqual([`${BASE}/assets/dashboard.css`, `${BASE}/assets/pico.min.css`]);
        // dashboard.css applied (the skip link is off screen until focused), pico applied (system font, not the default serif).
        // (Expressions as strings: this project compiles without the DOM library.)
        expect(await page.evaluate("getComputedStyle(document.querySelector('a.skip-link')).left")).toBe('-9999px');
        expect(await page.evaluate('getComputedStyle(document.body).fontFamily')).toMatch(/system-ui/);
        // Scripts ran: htmx is there.
        await page.waitForFunction("'htmx' in window");
        expect(failed).toEqual([]);
        expect(problems).toEqual([]);
        await expectAccessible(page);
      } finally {
        await context.close();
      }
    });
  });
});
