import { readFile, rm } from 'node:fs/promises';
import * as os from 'node:os';
import * as path from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import {
  collectConsoleErrors,
  describeWithBrowser,
  expectAccessible,
  launchChromium,
  newContext,
  screenshot,
} from './support/browser';
import { startTestApp, TestApp } from './support/test-app';

const dataUrl = (html: string) => `data:text/html,${encodeURIComponent(html)}`;
const PIXEL_GIF = 'data:image/gif;base64,R0lGODlhAQABAIAAAAAAAP///ywAAAAAAQABAAACAUwAOw==';

describeWithBrowser('browser test support (system chromium, playwright-core, axe)', () => {
  let t: TestApp;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    [t, browser] = await Promise.all([startTestApp(), launchChromium()]);
    context = await newContext(browser, t.baseUrl);
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });
  beforeEach(async () => {
    page = await context.newPage();
  });
  afterEach(() => page?.close());

  it('renders Swagger UI at /docs through the context base URL', async () => {
    const problems = collectConsoleErrors(page);
    const response = await page.goto('/docs');
    expect(response?.status()).toBe(200);
    expect(page.url()).toBe(`${t.baseUrl}/docs`);
    await expect(page.title()).resolves.toBe('Swagger UI');
    // Swagger UI draws the document's title with JavaScript: seeing it proves the scripts ran.
    const { info } = (await (await fetch(`${t.baseUrl}/docs/openapi.json`)).json()) as { info: { title: string } };
    const heading = page.getByRole('heading', { name: info.title });
    await heading.waitFor({ state: 'visible', timeout: 10_000 });
    expect(await heading.isVisible()).toBe(true);
    expect(problems).toEqual([]);
  });

  it('fails a page with a serious accessibility violation, naming the rule and the node', async () => {
    await page.goto(
      dataUrl(`<html lang="en"><head><title>t</title></head><body><main><img src="${PIXEL_GIF}"></main></body></html>`),
    );
    const failure = expectAccessible(page, 'the image page');
    await expect(failure).rejects.toThrow(/on the image page/);
    await expect(failure).rejects.toThrow(/image-alt \[critical\]/);
    await expect(failure).rejects.toThrow(/<img src="data:image\/gif/);
  });

  it('passes a page with proper markup', async () => {
    await page.goto(dataUrl('<html lang="en"><head><title>t</title></head><body><main><h1>Hi</h1></main></body></html>'));
    await expect(expectAccessible(page)).resolves.toEqual([]);
  });

  it('collects console errors, uncaught exceptions and CSP violations', async () => {
    const problems = collectConsoleErrors(page);
    await page.goto(
      dataUrl(
        `<html lang="en"><head><title>t</title>` +
          `<meta http-equiv="Content-Security-Policy" content="script-src 'nonce-ok'"></head><body>` +
          `<script nonce="ok">console.error('logged error'); console.warn('only a warning'); ` +
          `setTimeout(() => { throw new Error('thrown error'); });</script>` +
          `<script>window.blocked = true;</script></body></html>`,
      ),
    );
    // A round trip after the page's timer: every event it caused has reached us.
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 50)));
    expect(problems).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ kind: 'console-error', text: 'logged error' }),
        expect.objectContaining({ kind: 'page-error', text: expect.stringContaining('thrown error') }),
        expect.objectContaining({ kind: 'csp-violation', text: expect.stringContaining("script-src 'nonce-ok'") }),
      ]),
    );
    expect(problems.map((problem) => problem.text)).not.toContain('only a warning');
    expect(await page.evaluate(() => (globalThis as { blocked?: boolean }).blocked)).toBeUndefined();
  });

  it('writes a full-page PNG, creating its directory', async () => {
    const dir = path.join(os.tmpdir(), `browser-support-${process.pid}-${Date.now()}`);
    try {
      await page.setViewportSize({ width: 400, height: 300 });
      await page.goto(dataUrl('<html lang="en"><body style="margin:0"><div style="height:1200px">tall</div></body></html>'));
      const file = await screenshot(page, path.join(dir, 'nested', 'page.png'));
      const png = await readFile(file);
      expect(png.subarray(0, 8)).toEqual(Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]));
      // IHDR height: the whole page, not just the 300px viewport.
      expect(png.readUInt32BE(20)).toBeGreaterThanOrEqual(1200);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
