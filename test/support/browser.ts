/**
 * Support for browser tests: the system's Chromium driven by playwright-core, and axe-core
 * for accessibility. No browser is ever downloaded: the tests use Debian's /usr/bin/chromium
 * (or CHROMIUM_PATH), whose major version playwright-core ~1.64 expects.
 */
import AxeBuilder from '@axe-core/playwright';
import { execFile } from 'node:child_process';
import { accessSync, constants, statSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import * as path from 'node:path';
import { chromium, type Browser, type BrowserContext, type LaunchOptions, type Page } from 'playwright-core';

/** One axe rule's violation (axe-core's `Result`, reached through @axe-core/playwright, our direct dependency). */
export type AxeResult = Awaited<ReturnType<AxeBuilder['analyze']>>['violations'][number];

export interface ChromiumLocation {
  /** `CHROMIUM_PATH`, else `/usr/bin/chromium`. */
  path: string;
  /** The path is a file this process may execute. */
  available: boolean;
  /** Why it is not available, for messages. */
  reason?: string;
}

export function chromiumPath(): ChromiumLocation {
  const file = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
  try {
    if (!statSync(file).isFile()) return { path: file, available: false, reason: `${file} is not a file` };
    accessSync(file, constants.X_OK);
    return { path: file, available: true };
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    const reason = code === 'ENOENT' ? `${file} does not exist` : `${file} is not executable (${code ?? String(error)})`;
    return { path: file, available: false, reason };
  }
}

/** Flags for a quiet, deterministic headless run in a container (root, small /dev/shm, no network chatter). */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
  '--no-first-run',
  '--disable-dev-shm-usage',
];

let versionsLogged = false;

/** `chromium --version` on stdout; Debian's wrapper script prints a harmless shell warning on stderr. */
function chromiumVersion(executable: string): Promise<string> {
  return new Promise((resolve) => {
    execFile(executable, ['--version'], { timeout: 10_000 }, (error, stdout) => {
      const version = String(stdout).trim();
      resolve(version || `unknown (${error ? error.message : 'no output'})`);
    });
  });
}

function playwrightCoreVersion(): string {
  try {
    return (require('playwright-core/package.json') as { version: string }).version;
  } catch {
    return 'unknown';
  }
}

/**
 * Headless Chromium from the system. The first launch in a test file (jest gives each file
 * its own modules) logs the browser's and playwright-core's versions, for reading CI logs.
 */
export async function launchChromium(options: LaunchOptions = {}): Promise<Browser> {
  const location = chromiumPath();
  if (!location.available) {
    throw new Error(`chromium is not available: ${location.reason} (apt-get install -y chromium, or set CHROMIUM_PATH)`);
  }
  if (!versionsLogged) {
    versionsLogged = true;
    console.log(`browser tests: ${await chromiumVersion(location.path)} (${location.path}), playwright-core ${playwrightCoreVersion()}`);
  }
  return chromium.launch({
    ...options,
    executablePath: location.path,
    headless: true,
    args: [...CHROMIUM_ARGS, ...(options.args ?? [])],
  });
}

function isCi(): boolean {
  return /^(true|1)$/i.test(process.env.CI ?? '');
}

/**
 * A `describe` for suites that need Chromium. Without it, the suite fails under CI=true
 * (a missing browser must not pass for a green run) and is skipped loudly elsewhere.
 */
export function describeWithBrowser(name: string, fn: () => void): void {
  const location = chromiumPath();
  if (location.available) {
    describe(name, fn);
    return;
  }
  if (isCi()) {
    describe(name, () => {
      it('has chromium', () => {
        throw new Error(`chromium is required under CI=true: apt-get install -y chromium (${location.reason})`);
      });
    });
    return;
  }
  console.warn(
    `SKIPPED browser suite "${name}": ${location.reason}. ` +
      'Install it (apt-get install -y chromium) or set CHROMIUM_PATH; under CI=true this suite fails instead.',
  );
  describe.skip(name, fn);
}

/** The WCAG 2.0/2.1 A and AA rules. */
export const AXE_TAGS = ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'];

const FAILING_IMPACTS = new Set(['serious', 'critical']);

function truncate(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/** Readable lines for axe violations: rule, impact, help, and the first few offending nodes. */
export function formatViolations(violations: AxeResult[], nodesPerRule = 3): string {
  return violations
    .map((violation) => {
      const lines = [`- ${violation.id} [${violation.impact ?? 'no impact'}]: ${violation.help} (${violation.helpUrl})`];
      for (const node of violation.nodes.slice(0, nodesPerRule)) {
        const target = node.target.map((part) => (Array.isArray(part) ? part.join(' >>> ') : String(part))).join(' ');
        lines.push(`    ${target}: ${truncate(node.html, 200)}`);
      }
      if (violation.nodes.length > nodesPerRule) lines.push(`    … and ${violation.nodes.length - nodesPerRule} more`);
      return lines.join('\n');
    })
    .join('\n');
}

/**
 * Runs axe (WCAG 2.0/2.1 A and AA) on the page. Throws when any violation is serious or
 * critical; returns the minor and moderate ones, for the caller to log or ignore.
 * The page must come from a context (`newContext(...).newPage()`): axe refuses `browser.newPage()`.
 */
export async function expectAccessible(page: Page, context?: string): Promise<AxeResult[]> {
  const results = await new AxeBuilder({ page }).withTags(AXE_TAGS).analyze();
  const failing = results.violations.filter((violation) => FAILING_IMPACTS.has(violation.impact ?? ''));
  if (failing.length > 0) {
    const where = context ?? truncate(page.url(), 120);
    throw new Error(
      `${failing.length} serious or critical accessibility violation(s) on ${where}:\n${formatViolations(failing)}`,
    );
  }
  return results.violations.filter((violation) => !FAILING_IMPACTS.has(violation.impact ?? ''));
}

/** A fresh context (cookies, storage) whose relative URLs resolve against the app under test. */
export function newContext(browser: Browser, baseUrl: string): Promise<BrowserContext> {
  return browser.newContext({ baseURL: baseUrl, viewport: { width: 1280, height: 800 }, locale: 'en-US' });
}

export interface PageProblem {
  kind: 'console-error' | 'page-error' | 'csp-violation';
  text: string;
  /** `url:line:column` of a console message, when Chromium gives one. */
  location?: string;
}

/**
 * Records, from now on, the page's console errors, uncaught exceptions and CSP violations
 * (Chromium reports those on the console, with "Content Security Policy" in the text).
 * The array fills as the page runs: `expect(problems).toEqual([])` once the page settled.
 */
export function collectConsoleErrors(page: Page): PageProblem[] {
  const problems: PageProblem[] = [];
  page.on('console', (message) => {
    const text = message.text();
    const { url, lineNumber, columnNumber } = message.location();
    const location = url ? `${url}:${lineNumber}:${columnNumber}` : undefined;
    if (text.includes('Content Security Policy')) problems.push({ kind: 'csp-violation', text, location });
    else if (message.type() === 'error') problems.push({ kind: 'console-error', text, location });
  });
  page.on('pageerror', (error) => {
    problems.push({ kind: 'page-error', text: error.stack ?? `${error.name}: ${error.message}` });
  });
  return problems;
}

/** A full-page PNG at `file` (directories created); returns the absolute path. */
export async function screenshot(page: Page, file: string): Promise<string> {
  const absolute = path.resolve(file);
  await mkdir(path.dirname(absolute), { recursive: true });
  await page.screenshot({ path: absolute, fullPage: true, type: 'png' });
  return absolute;
}
