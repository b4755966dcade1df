/**
 * The dashboard's security promises, checked over HTTP against the whole application:
 * CSRF on every state-changing route (enumerated from the controllers, not sampled),
 * cookie flags, session fixation, logout and password change ending sessions, login
 * throttling, expired sessions, open redirects, no secret in any page or log, error pages
 * that leak nothing, sign-up modes, and email verification.
 */
import { LoggerService, RequestMethod } from '@nestjs/common';
import { GUARDS_METADATA, METHOD_METADATA, PATH_METADATA } from '@nestjs/common/constants';
import { ModulesContainer } from '@nestjs/core';
import { randomBytes, randomUUID } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { MembersService } from '../src/accounts/members.service';
import { THROTTLE_LIMITS } from '../src/dashboard/login-throttle';
import { PAGE_ACCESS } from '../src/dashboard/page-access';
import { DashboardGuard } from '../src/dashboard/dashboard.guard';
import { SESSION_COOKIE } from '../src/dashboard/dashboard.setup';
import { MailService } from '../src/mail/mail.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { startTestApp, testConfig, TestApp } from './support/test-app';

// ---------------------------------------------------------------------------------------
// A small cookie-jar client: what a browser does with cookies, forms and redirects.

interface PageResponse {
  status: number;
  headers: Headers;
  body: string;
  location: string | null;
  setCookies: string[];
}

/** A random address per client (the app trusts X-Forwarded-For from loopback), so per-address limits stay apart. */
function randomAddress(): string {
  return `10.${1 + (randomBytes(1)[0] % 250)}.${randomBytes(1)[0]}.${1 + (randomBytes(1)[0] % 250)}`;
}

class PageClient {
  readonly jar = new Map<string, string>();

  constructor(
    readonly baseUrl: string,
    readonly address = randomAddress(),
  ) {}

  get cookie(): string | undefined {
    return this.jar.get(SESSION_COOKIE);
  }

  /** The session id inside the signed cookie (`s:<id>.<signature>`). */
  get sessionId(): string | undefined {
    return sessionIdOf(this.cookie);
  }

  async request(
    method: string,
    path: string,
    options: { form?: Record<string, string>; headers?: Record<string, string>; body?: string } = {},
  ): Promise<PageResponse> {
    const headers: Record<string, string> = {
      accept: 'text/html,application/xhtml+xml',
      'x-forwarded-for': this.address,
      ...options.headers,
    };
    if (this.jar.size > 0) headers.cookie = [...this.jar].map(([name, value]) => `${name}=${value}`).join('; ');
    if (options.form) headers['content-type'] = 'application/x-www-form-urlencoded';
    const res = await fetch(this.baseUrl + path, {
      method,
      headers,
      redirect: 'manual',
      body: options.form ? new URLSearchParams(options.form).toString() : options.body,
    });
    const setCookies = res.headers.getSetCookie();
    for (const line of setCookies) {
      const [pair, ...attributes] = line.split(';').map((part) => part.trim());
      const name = pair.slice(0, pair.indexOf('='));
      const value = pair.slice(pair.indexOf('=') + 1);
      const expired =
        attributes.some((a) => /^expires=/i.test(a) && Date.parse(a.slice(8)) <= Date.now()) ||
        attributes.some((a) => /^max-age=0$/i.test(a));
      if (expired || value === '') this.jar.delete(name);
      else this.jar.set(name, value);
    }
    return { status: res.status, headers: res.headers, body: await res.text(), location: res.headers.get('location'), setCookies };
  }

  get(path: string, headers?: Record<string, string>): Promise<PageResponse> {
    return this.request('GET', path, { headers });
  }

  post(path: string, form: Record<string, string>, headers?: Record<string, string>): Promise<PageResponse> {
    return this.request('POST', path, { form, headers });
  }

  /** Opens `pagePath` for its form's CSRF token, then posts `fields` with it to `action` (default: the same path). */
  async submit(pagePath: string, fields: Record<string, string>, action = pagePath): Promise<PageResponse> {
    const page = await this.get(pagePath);
    return this.post(action, { _csrf: csrfOf(page.body), ...fields });
  }

  /** A CSRF token of this session, from any page that has a form. */
  async csrfToken(pagePath = '/login'): Promise<string> {
    return csrfOf((await this.get(pagePath)).body);
  }
}

function sessionIdOf(cookie: string | undefined): string | undefined {
  if (!cookie) return undefined;
  const decoded = decodeURIComponent(cookie);
  return decoded.startsWith('s:') ? decoded.slice(2, decoded.lastIndexOf('.')) : undefined;
}

function csrfOf(html: string): string {
  const match = /name="_csrf" value="([^"]+)"/.exec(html);
  if (!match) throw new Error(`no CSRF token in the page:\n${html.slice(0, 500)}`);
  return match[1];
}

/** The text of the page's form error (`partials/errors`) or first flash message. */
function alertOf(html: string): string | undefined {
  return /<div class="flash error" role="alert">\s*(?:<span>)?([^<]*)/.exec(html)?.[1]?.trim();
}

let emailCounter = 0;
function newEmail(tag = 'person'): string {
  return `${tag}-${Date.now().toString(36)}-${++emailCounter}@example.com`;
}

const PASSWORD = 'correct horse battery staple';

interface Person {
  client: PageClient;
  email: string;
  password: string;
  workspaceId: string | null;
  userId: string;
}

/** Signs up through the page, as a person does; the client is signed in afterwards. */
async function signUp(
  t: TestApp,
  options: { email?: string; password?: string; name?: string; invitation?: string } = {},
): Promise<Person> {
  const client = new PageClient(t.baseUrl);
  const email = options.email ?? newEmail();
  const password = options.password ?? PASSWORD;
  const page = await client.get(options.invitation ? `/signup?invitation=${options.invitation}` : '/signup');
  expect(page.status).toBe(200);
  const res = await client.post('/signup', {
    _csrf: csrfOf(page.body),
    name: options.name ?? 'Ada Lovelace',
    email,
    password,
    ...(options.invitation ? { invitation: options.invitation } : {}),
  });
  expect(res.status).toBe(303);
  const workspaceId = /\/w\/([0-9a-f-]{36})$/.exec(res.location ?? '')?.[1] ?? null;
  const user = await t.app.get(AccountsService).findByEmail(email);
  return { client, email, password, workspaceId, userId: user!.id };
}

async function signIn(client: PageClient, email: string, password: string, next?: string): Promise<PageResponse> {
  const query = next === undefined ? '' : `?next=${encodeURIComponent(next)}`;
  const page = await client.get(`/login${query}`);
  return client.post(`/login${query}`, { _csrf: csrfOf(page.body), email, password });
}

// ---------------------------------------------------------------------------------------
// The dashboard's routes, read from the controllers that carry DashboardGuard.

interface DashboardRoute {
  controller: string;
  handler: string;
  method: string;
  path: string;
  access: string | undefined;
}

function dashboardRoutes(t: TestApp): DashboardRoute[] {
  const routes: DashboardRoute[] = [];
  const seen = new Set<unknown>();
  for (const module of t.app.get(ModulesContainer).values()) {
    for (const wrapper of module.controllers.values()) {
      const type = wrapper.metatype as (new (...args: never[]) => unknown) | null;
      if (!type || seen.has(type)) continue;
      seen.add(type);
      const guards: unknown[] = Reflect.getMetadata(GUARDS_METADATA, type) ?? [];
      if (!guards.includes(DashboardGuard)) continue;
      const bases = asArray(Reflect.getMetadata(PATH_METADATA, type));
      const prototype = type.prototype as Record<string, unknown>;
      for (const name of Object.getOwnPropertyNames(prototype)) {
        const handler = prototype[name];
        if (name === 'constructor' || typeof handler !== 'function') continue;
        const method: RequestMethod | undefined = Reflect.getMetadata(METHOD_METADATA, handler);
        if (method === undefined) continue;
        for (const base of bases) {
          for (const sub of asArray(Reflect.getMetadata(PATH_METADATA, handler))) {
            routes.push({
              controller: type.name,
              handler: name,
              method: RequestMethod[method],
              path: joinPath(base, sub),
              access: Reflect.getMetadata(PAGE_ACCESS, handler),
            });
          }
        }
      }
    }
  }
  return routes;
}

function asArray(value: unknown): string[] {
  if (value === undefined) return [''];
  return (Array.isArray(value) ? value : [value]).map(String);
}

function joinPath(...parts: string[]): string {
  const joined = parts
    .map((part) => part.replace(/^\/+|\/+$/g, ''))
    .filter(Boolean)
    .join('/');
  return `/${joined}`;
}

const STATE_CHANGING = new Set(['POST', 'PUT', 'PATCH', 'DELETE', 'ALL']);

/** A route's path with its parameters replaced: `ids` by name, else a uuid for `...Id`, else a link-shaped token. */
function fillPath(path: string, ids: Record<string, string>, unknownParams?: Set<string>): string {
  return path
    .replace(/\{\*[A-Za-z]+\}/g, 'anything')
    .replace(/:([A-Za-z_]+)/g, (_, name: string) => {
      if (ids[name]) return ids[name];
      unknownParams?.add(name);
      return /id$/i.test(name) ? randomUUID() : randomBytes(32).toString('base64url');
    });
}

function methodForFetch(method: string): string {
  return method === 'ALL' ? 'POST' : method;
}

const CSRF_MESSAGE = 'This form has expired. Reload the page and try again.';

// ---------------------------------------------------------------------------------------

describe('dashboard security', () => {
  const sessionSecret = `test-session-secret-${randomBytes(24).toString('hex')}`;
  let t: TestApp;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp({ config: { sessionSecret } });
    db = t.app.get(DataSource);
  });
  afterAll(() => t?.close());

  describe('CSRF on every state-changing route', () => {
    let owner: Person;
    let routes: DashboardRoute[];
    let ids: Record<string, string>;

    beforeAll(async () => {
      routes = dashboardRoutes(t);
      owner = await signUp(t);
      const key = await t.app.get(ApiKeysService).create(owner.workspaceId!, { name: 'ci', createdBy: owner.userId });
      const invitation = await t.app.get(MembersService).invite(owner.workspaceId!, newEmail('invitee'), 'member', owner.userId);
      const memberInvite = await t.app.get(MembersService).invite(owner.workspaceId!, newEmail('member'), 'member', owner.userId);
      const member = await signUp(t, { email: memberInvite.email, invitation: memberInvite.token });
      const token = randomBytes(32).toString('base64url');
      ids = {
        workspaceId: owner.workspaceId!,
        keyId: key.id,
        apiKeyId: key.id,
        invitationId: invitation.id,
        userId: member.userId,
        memberId: member.userId,
        membershipId: member.userId,
        token,
      };
    });

    it('finds the dashboard routes, with sign-in, sign-up and sign-out among them', () => {
      const keys = routes.map((route) => `${route.method} ${route.path}`);
      expect(keys).toEqual(
        expect.arrayContaining([
          'GET /login',
          'POST /login',
          'GET /signup',
          'POST /signup',
          'POST /logout',
          'GET /account',
          'POST /account/password',
          'POST /password/forgot',
          'POST /password/reset/:token',
          'GET /w/:workspaceId',
        ]),
      );
      expect(routes.filter((route) => STATE_CHANGING.has(route.method)).length).toBeGreaterThanOrEqual(8);
      // For the log: what this run covered.
      console.log(`dashboard routes checked (${routes.length}): ${keys.sort().join(', ')}`);
    });

    it('declares a page access on every handler of every dashboard controller', () => {
      const missing = routes.filter((route) => !route.access).map((route) => `${route.controller}.${route.handler}`);
      expect(missing).toEqual([]);
      for (const route of routes) expect(['public', 'signed-in', 'operator', 'member', 'admin', 'owner']).toContain(route.access);
      // Routes that need a role carry the workspace they are about.
      const roleWithoutWorkspace = routes.filter(
        (route) => ['member', 'admin', 'owner'].includes(route.access!) && !route.path.includes(':workspaceId'),
      );
      expect(roleWithoutWorkspace).toEqual([]);
    });

    it('asks the roles of the issue: admin for keys (and part 2: assistants, documents, billing), owner for members and the workspace', () => {
      // Which role each kind of change needs (issue 9: members view and use; admins also manage keys,
      // assistants, documents and billing; owners also manage members and the workspace itself).
      const policy: [RegExp, string][] = [
        [/^\/w\/:workspaceId\/settings\/keys(\/|$)/, 'admin'],
        // Issue 14: nerfing rules (Settings > Limits) are changed by admins and owners.
        [/^\/w\/:workspaceId\/settings\/limits(\/|$)/, 'admin'],
        [/^\/w\/:workspaceId\/(assistants|documents|billing)(\/|$)/, 'admin'],
        [/^\/w\/:workspaceId\/settings\/(members|invitations)(\/|$)/, 'owner'],
        [/^\/w\/:workspaceId\/settings$/, 'owner'],
        [/^\/w\/:workspaceId\/leave$/, 'member'],
      ];
      const rank: Record<string, number> = { member: 1, admin: 2, owner: 3 };
      const wrong: string[] = [];
      const uncovered: string[] = [];
      for (const route of routes.filter((r) => STATE_CHANGING.has(r.method) && r.path.startsWith('/w/'))) {
        const rule = policy.find(([pattern]) => pattern.test(route.path));
        if (!rule) uncovered.push(`${route.method} ${route.path} (${route.access})`);
        else if ((rank[route.access ?? ''] ?? 0) < rank[rule[1]]) {
          wrong.push(`${route.method} ${route.path}: ${route.access}, needs ${rule[1]}`);
        }
      }
      expect(wrong).toEqual([]);
      // The rules above must see the routes they are about.
      expect(routes.some((r) => r.method === 'POST' && policy[0][0].test(r.path))).toBe(true);
      expect(routes.some((r) => r.method === 'POST' && policy[2][0].test(r.path))).toBe(true);
      if (uncovered.length > 0) console.log(`state-changing workspace routes without a role rule here (add one): ${uncovered.join(', ')}`);
    });

    it('refuses every state-changing request without the token, and with a wrong one (403), signed in as the owner', async () => {
      const unknown = new Set<string>();
      // The operator console answers 404 to anyone else before its CSRF check (test/operator-console.e2e-spec.ts checks both).
      const stateChanging = routes.filter((route) => STATE_CHANGING.has(route.method) && route.access !== 'operator');
      const failures: string[] = [];
      for (const route of stateChanging) {
        const path = fillPath(route.path, ids, unknown);
        const method = methodForFetch(route.method);
        const fields = { name: 'x', email: owner.email, password: owner.password, role: 'admin' };
        const attempts: [string, Record<string, string>, Record<string, string> | undefined][] = [
          ['no token', fields, undefined],
          ['a wrong token in the form', { ...fields, _csrf: randomBytes(16).toString('hex') }, undefined],
          ['a wrong token in the header', fields, { 'x-csrf-token': randomBytes(16).toString('hex') }],
          ['an empty token', { ...fields, _csrf: '' }, undefined],
        ];
        for (const [what, form, headers] of attempts) {
          const res = await owner.client.request(method, path, { form, headers });
          if (res.status !== 403 || !res.body.includes(CSRF_MESSAGE)) failures.push(`${method} ${path} with ${what}: ${res.status}`);
        }
        // htmx requests carry the token in a header; without it they are refused the same way.
        const htmx = await owner.client.request(method, path, { form: fields, headers: { 'hx-request': 'true' } });
        if (htmx.status !== 403) failures.push(`${method} ${path} by htmx without token: ${htmx.status}`);
      }
      expect(failures).toEqual([]);
      // The owner is still signed in: none of these did anything.
      expect((await owner.client.get('/account')).status).toBe(200);
      if (unknown.size > 0) console.log(`route parameters filled with made-up values: ${[...unknown].join(', ')}`);
    });

    it('answers a field sent twice, or a JSON field that is not text, with 400 naming it on every state-changing route', async () => {
      const token = await owner.client.csrfToken('/account');
      const failures: string[] = [];
      for (const route of routes.filter((r) => STATE_CHANGING.has(r.method) && r.access !== 'operator')) {
        const [method, path] = [methodForFetch(route.method), fillPath(route.path, ids)];
        const twice = await owner.client.request(method, path, {
          body: 'name=a&name=b&email=a%40example.com&email=b%40example.com&title=a&title=b',
          headers: { 'content-type': 'application/x-www-form-urlencoded', 'x-csrf-token': token },
        });
        if (twice.status !== 400 || !/is sent once/.test(twice.body)) failures.push(`${method} ${path} with a field twice: ${twice.status}`);
        const json = await owner.client.request(method, path, { body: '{"name": 5, "email": true}', headers: { 'content-type': 'application/json', 'x-csrf-token': token } });
        if (json.status !== 400 || !/must be text/.test(json.body)) failures.push(`${method} ${path} with JSON that is not text: ${json.status}`);
      }
      expect(failures).toEqual([]);
      expect((await owner.client.get('/account')).status).toBe(200);
    });

    it('refuses a token of another session', async () => {
      const other = new PageClient(t.baseUrl);
      const foreignToken = await other.csrfToken();
      for (const route of routes.filter((r) => STATE_CHANGING.has(r.method) && r.access !== 'operator')) {
        const res = await owner.client.request(methodForFetch(route.method), fillPath(route.path, ids), { form: { _csrf: foreignToken } });
        const name = `${route.method} ${route.path}`;
        expect({ name, status: res.status }).toEqual({ name, status: 403 });
      }
    });

    it('accepts the right token (the check is not refusing everything)', async () => {
      const token = await owner.client.csrfToken('/account');
      const res = await owner.client.post('/account/profile', { _csrf: token, name: 'Ada L.' });
      expect(res.status).toBe(303);
      const header = await owner.client.request('POST', '/account/profile', { form: { name: 'Ada' }, headers: { 'x-csrf-token': token } });
      expect(header.status).toBe(303);
    });

    it('keeps another workspace out of reach by changing the id in the URL (404), for every workspace route', async () => {
      const stranger = await signUp(t);
      const token = await stranger.client.csrfToken('/account');
      const failures: string[] = [];
      for (const route of routes.filter((r) => r.path.includes(':workspaceId'))) {
        const method = methodForFetch(route.method);
        const path = fillPath(route.path, ids);
        const res = STATE_CHANGING.has(route.method)
          ? await stranger.client.request(method, path, {
              form: { _csrf: token, name: 'taken over', email: stranger.email, role: 'owner' },
            })
          : await stranger.client.get(path);
        if (res.status !== 404) failures.push(`${method} ${path}: ${res.status}`);
      }
      expect(failures).toEqual([]);
    });

    it('refuses a member every route that needs admin or owner (403), form posts with a valid token included', async () => {
      const invite = await t.app.get(MembersService).invite(owner.workspaceId!, newEmail('viewer'), 'member', owner.userId);
      const member = await signUp(t, { email: invite.email, invitation: invite.token });
      const token = await member.client.csrfToken('/account');
      const guarded = routes.filter((route) => route.access === 'admin' || route.access === 'owner');
      const failures: string[] = [];
      for (const route of guarded) {
        const method = methodForFetch(route.method);
        const path = fillPath(route.path, ids);
        const res = STATE_CHANGING.has(route.method)
          ? await member.client.request(method, path, { form: { _csrf: token, name: 'mine now', email: member.email, role: 'owner' } })
          : await member.client.get(path);
        if (res.status !== 403) failures.push(`${method} ${path}: ${res.status}`);
      }
      expect(failures).toEqual([]);
      console.log(`routes that need admin or owner: ${guarded.map((r) => `${r.method} ${r.path}`).join(', ') || 'none yet'}`);
    });
  });

  describe('session cookie', () => {
    it('is HttpOnly, SameSite=Lax, Path=/, and not Secure outside production', async () => {
      const client = new PageClient(t.baseUrl);
      const res = await client.get('/login');
      const cookie = res.setCookies.find((line) => line.startsWith(`${SESSION_COOKIE}=`));
      expect(cookie).toBeDefined();
      const attributes = cookie!.split(';').map((part) => part.trim().toLowerCase());
      expect(attributes).toContain('httponly');
      expect(attributes).toContain('samesite=lax');
      expect(attributes).toContain('path=/');
      expect(attributes).not.toContain('secure');
    });

    it('is Secure in production', async () => {
      const production = await startTestApp({
        config: { production: true, nodeEnv: 'production', sessionSecret, dashboard: { ...testConfig().dashboard, signup: 'open' } },
      });
      try {
        // Behind its TLS proxy (trusted from loopback), as production runs.
        const client = new PageClient(production.baseUrl);
        const res = await client.get('/login', { 'x-forwarded-proto': 'https' });
        expect(res.status).toBe(200);
        const cookie = res.setCookies.find((line) => line.startsWith(`${SESSION_COOKIE}=`));
        expect(cookie).toBeDefined();
        const attributes = cookie!.split(';').map((part) => part.trim().toLowerCase());
        expect(attributes).toEqual(expect.arrayContaining(['httponly', 'samesite=lax', 'path=/', 'secure']));
        expect(res.headers.get('strict-transport-security')).toMatch(/max-age=/);
        // Never sent back over plain http.
        const plain = await new PageClient(production.baseUrl).get('/login');
        expect(plain.setCookies.filter((line) => line.startsWith(`${SESSION_COOKIE}=`))).toEqual([]);
      } finally {
        await production.close();
      }
    });
  });

  describe('security headers', () => {
    it('sends a strict Content-Security-Policy (no inline script or style) and no framing on pages', async () => {
      const res = await new PageClient(t.baseUrl).get('/login');
      const csp = res.headers.get('content-security-policy') ?? '';
      const directives = Object.fromEntries(csp.split(';').map((part) => part.trim().split(/\s+/)).map(([name, ...values]) => [name, values]));
      expect(directives['script-src']).toEqual(["'self'"]);
      expect(directives['style-src']).toEqual(["'self'"]);
      expect(directives['frame-ancestors']).toEqual(["'none'"]);
      expect(csp).not.toMatch(/unsafe-inline|unsafe-eval/);
      expect(res.headers.get('x-content-type-options')).toBe('nosniff');
      expect(res.headers.get('cache-control')).toBe('no-store');
      // No inline script or style attribute in the page itself.
      expect(res.body).not.toMatch(/<script(?![^>]*\ssrc=)[^>]*>|\sstyle="/);
    });
  });

  describe('sessions', () => {
    it('changes the session id at sign-in (fixation); the id from before is not signed in', async () => {
      const person = await signUp(t);
      const client = new PageClient(t.baseUrl);
      const page = await client.get('/login');
      const before = client.cookie;
      const beforeId = client.sessionId;
      expect(beforeId).toBeDefined();
      const res = await client.post('/login', { _csrf: csrfOf(page.body), email: person.email, password: person.password });
      expect(res.status).toBe(303);
      expect(client.sessionId).toBeDefined();
      expect(client.sessionId).not.toBe(beforeId);
      expect((await client.get('/account')).status).toBe(200);

      const planted = new PageClient(t.baseUrl);
      planted.jar.set(SESSION_COOKIE, before!);
      const account = await planted.get('/account');
      expect(account.status).toBe(303);
      expect(account.location).toBe('/login?next=%2Faccount');
      const rows: unknown[] = await db.query('SELECT 1 FROM dashboard_sessions WHERE sid = $1', [beforeId]);
      expect(rows).toEqual([]);
    });

    it('ends the session at logout: the old cookie is refused and its row is gone', async () => {
      const person = await signUp(t);
      const cookie = person.client.cookie!;
      const sid = person.client.sessionId!;
      expect(await db.query('SELECT 1 FROM dashboard_sessions WHERE sid = $1', [sid])).toHaveLength(1);
      const res = await person.client.submit('/account', {}, '/logout');
      expect(res.status).toBe(303);
      expect(res.location).toBe('/login?signed_out=1');
      expect(person.client.cookie).toBeUndefined();
      expect(await db.query('SELECT 1 FROM dashboard_sessions WHERE sid = $1', [sid])).toEqual([]);

      const replay = new PageClient(t.baseUrl);
      replay.jar.set(SESSION_COOKIE, cookie);
      const account = await replay.get('/account');
      expect(account.status).toBe(303);
      expect(account.location).toBe('/login?next=%2Faccount');
      const overview = await replay.get(`/w/${person.workspaceId}`);
      expect(overview.status).toBe(303);
    });

    it('ends the other sessions at a password change; the changing one stays signed in under a new id', async () => {
      const person = await signUp(t);
      const other = new PageClient(t.baseUrl);
      expect((await signIn(other, person.email, person.password)).status).toBe(303);
      expect((await other.get('/account')).status).toBe(200);

      const oldId = person.client.sessionId;
      const newPassword = 'a brand new passphrase';
      const res = await person.client.submit('/account', { current_password: person.password, password: newPassword }, '/account/password');
      expect(res.status).toBe(303);
      expect(res.location).toBe('/account');
      expect(person.client.sessionId).not.toBe(oldId);
      expect((await person.client.get('/account')).status).toBe(200);

      const signedOut = await other.get('/account');
      expect(signedOut.status).toBe(303);
      expect(signedOut.location).toBe('/login?next=%2Faccount');
      // The old password no longer works, the new one does.
      expect((await signIn(new PageClient(t.baseUrl), person.email, person.password)).status).toBe(401);
      expect((await signIn(new PageClient(t.baseUrl), person.email, newPassword)).status).toBe(303);
    });

    it('answers an expired session with a redirect that comes back, and htmx with HX-Redirect', async () => {
      const person = await signUp(t);
      const stranger = new PageClient(t.baseUrl);
      const plain = await stranger.get('/account');
      expect(plain.status).toBe(303);
      expect(plain.location).toBe('/login?next=%2Faccount');

      const htmx = await stranger.get('/account', { 'hx-request': 'true' });
      expect(htmx.status).toBe(200);
      expect(htmx.headers.get('hx-redirect')).toMatch(/^\/login/);
      const fromPage = await stranger.get(`/w/${person.workspaceId}`, {
        'hx-request': 'true',
        'hx-current-url': `${t.baseUrl}/account?tab=1`,
      });
      expect(fromPage.headers.get('hx-redirect')).toBe('/login?next=%2Faccount%3Ftab%3D1');

      const res = await signIn(stranger, person.email, person.password, '/account');
      expect(res.status).toBe(303);
      expect(res.location).toBe('/account');
      expect((await stranger.get('/account')).status).toBe(200);
    });

    it('ignores a next that leaves the dashboard (open redirect)', async () => {
      const person = await signUp(t);
      for (const next of ['//evil.com', 'https://evil.com', '/\\evil.com', 'javascript:alert(1)', '//evil.com/%2F..']) {
        const client = new PageClient(t.baseUrl);
        const page = await client.get(`/login?next=${encodeURIComponent(next)}`);
        expect(page.body).not.toContain('evil.com');
        const res = await signIn(client, person.email, person.password, next);
        expect({ next, status: res.status, location: res.location }).toEqual({ next, status: 303, location: '/' });
        // Signed in already: the login page sends you on, never away.
        const again = await client.get(`/login?next=${encodeURIComponent(next)}`);
        expect(again.location).toBe('/');
      }
    });
  });

  describe('login throttling', () => {
    it('answers the attempt after the per-account limit for one email with 429, alike for an existing and an unknown address', async () => {
      const person = await signUp(t);
      const unknown = newEmail('nobody');
      // Per account from anywhere: high, for guessing spread over many addresses (test/account-safety: per account and address).
      const limit = THROTTLE_LIMITS.login.account.attempts;
      const outcomes: Record<string, { statuses: number[]; last: PageResponse }> = {};
      for (const email of [person.email, unknown]) {
        const statuses: number[] = [];
        let last!: PageResponse;
        for (let attempt = 1; attempt <= limit + 1; attempt++) {
          // A new address each time: only the per-account count can stop it.
          const client = new PageClient(t.baseUrl);
          last = await signIn(client, email, 'not the password at all');
          statuses.push(last.status);
        }
        outcomes[email] = { statuses, last };
      }
      const expected = [...Array<number>(limit).fill(401), 429];
      expect(outcomes[person.email].statuses).toEqual(expected);
      expect(outcomes[unknown].statuses).toEqual(expected);
      for (const { last } of Object.values(outcomes)) {
        expect(last.body).toContain('Too many attempts');
        expect(last.headers.get('content-type')).toMatch(/text\/html/);
        expect(last.headers.get('retry-after')).toMatch(/^\d+$/);
      }
      const message = (html: string) => /<p>([^<]*Too many attempts[^<]*)<\/p>/.exec(html)?.[1];
      expect(message(outcomes[person.email].last.body)).toBeDefined();
      expect(message(outcomes[person.email].last.body)).toBe(message(outcomes[unknown].last.body));
      // Throttled means throttled: the right password does not get through either.
      expect((await signIn(new PageClient(t.baseUrl), person.email, person.password)).status).toBe(429);
    });

    it('limits attempts per address, whatever the emails', async () => {
      const client = new PageClient(t.baseUrl);
      const statuses: number[] = [];
      for (let attempt = 1; attempt <= 31; attempt++) statuses.push((await signIn(client, newEmail('spray'), 'guess guess guess')).status);
      expect(statuses.slice(0, 30).every((status) => status === 401)).toBe(true);
      expect(statuses[30]).toBe(429);
      // Another address is not affected.
      const person = await signUp(t);
      expect((await signIn(new PageClient(t.baseUrl), person.email, person.password)).status).toBe(303);
    });

    it('says the same for an unknown email and a wrong password', async () => {
      const person = await signUp(t);
      const wrong = await signIn(new PageClient(t.baseUrl), person.email, 'wrong password here');
      const unknown = await signIn(new PageClient(t.baseUrl), newEmail('ghost'), 'wrong password here');
      expect(wrong.status).toBe(401);
      expect(unknown.status).toBe(401);
      expect(alertOf(wrong.body)).toBeDefined();
      expect(alertOf(wrong.body)).toBe(alertOf(unknown.body));
    });
  });

  describe('no secret in pages or logs', () => {
    it('shows no password, hash, key, key hash, token hash or session secret on any page, and logs no password or key', async () => {
      const records: string[] = [];
      const text = (arg: unknown) => (arg instanceof Error ? `${arg.message} ${arg.stack}` : typeof arg === 'string' ? arg : JSON.stringify(arg));
      const record = (...args: unknown[]) => void records.push(args.map(text).join(' '));
      const recorder: LoggerService = { log: record, error: record, warn: record, debug: record, verbose: record, fatal: record };
      t.app.useLogger(recorder);
      const levels = ['log', 'info', 'warn', 'error', 'debug'] as const;
      const spies = levels.map((level) => jest.spyOn(console, level).mockImplementation(record));
      const writes = [jest.spyOn(process.stdout, 'write'), jest.spyOn(process.stderr, 'write')];
      const written = () => writes.flatMap((spy) => spy.mock.calls.map((call) => String(call[0])));
      try {
        const password = `Secret-${randomBytes(8).toString('hex')}`;
        const owner = await signUp(t, { password });
        await signIn(new PageClient(t.baseUrl), owner.email, 'a wrong password, logged?');
        expect((await signIn(new PageClient(t.baseUrl), owner.email, password)).status).toBe(303);
        // A key made in the keys page: its secret is in the answer to that POST, and nowhere else.
        const keysPage = `/w/${owner.workspaceId}/settings/keys`;
        const created = await owner.client.submit(keysPage, { name: 'secret-check', expires: 'never' });
        expect(created.status).toBe(201);
        const plaintext = /sk-[A-Za-z0-9_-]{20,}/.exec(created.body)?.[0];
        expect(plaintext).toBeDefined();
        const [{ id: keyId }]: { id: string }[] = await db.query('SELECT id FROM api_keys WHERE workspace_id = $1 AND name = $2', [
          owner.workspaceId,
          'secret-check',
        ]);
        const key = { id: keyId, apiKey: plaintext! };
        // Use the key, so last-used bookkeeping and request logs run.
        await fetch(`${t.baseUrl}/v1/models`, { headers: { authorization: `Bearer ${key.apiKey}` } });
        // A reset link asked for, and a password change through the page.
        await new PageClient(t.baseUrl).submit('/password/forgot', { email: owner.email });
        const newPassword = `Changed-${randomBytes(8).toString('hex')}`;
        const changed = await owner.client.submit('/account', { current_password: password, password: newPassword }, '/account/password');
        expect(changed.status).toBe(303);
        const invite = await t.app.get(MembersService).invite(owner.workspaceId!, newEmail('invited'), 'admin', owner.userId);
        // Tokens of every kind, so token-taking pages show their forms.
        const resetLink = t.app.get(MailService).logged.filter((m) => m.to === owner.email && /reset/i.test(m.subject)).at(-1)!.link!;
        const resetToken = resetLink.split('/').at(-1)!;
        const signInToken = await t.app.get(AccountsService).issueToken(owner.userId, 'sign_in');
        const pickToken = (path: string) => {
          if (path.includes('reset')) return resetToken;
          if (path.includes('sign-in')) return signInToken;
          if (path.includes('invit')) return invite.token;
          return randomBytes(32).toString('base64url');
        };

        const routes = dashboardRoutes(t).filter((route) => route.method === 'GET');
        const pages: { path: string; who: string; res: PageResponse }[] = [];
        for (const route of routes) {
          const path = fillPath(route.path, {
            workspaceId: owner.workspaceId!,
            keyId: key.id,
            invitationId: invite.id,
            userId: owner.userId,
            token: pickToken(route.path),
          });
          for (const [who, client] of [['owner', owner.client], ['stranger', new PageClient(t.baseUrl)]] as const) {
            const res = await client.get(path);
            pages.push({ path, who, res });
            if (res.status === 303 && res.location?.startsWith('/')) {
              pages.push({ path: res.location, who, res: await client.get(res.location) });
            }
          }
        }
        expect(pages.filter((page) => page.res.status === 200).length).toBeGreaterThanOrEqual(routes.length);

        const hashes: { password_hash: string | null }[] = await db.query('SELECT password_hash FROM users WHERE password_hash IS NOT NULL');
        const keyHashes: { key_hash: string }[] = await db.query('SELECT key_hash FROM api_keys');
        const tokenHashes: { token_hash: string }[] = await db.query(
          'SELECT token_hash FROM one_time_tokens UNION ALL SELECT token_hash FROM invitations',
        );
        expect(tokenHashes.length).toBeGreaterThan(0);
        const secrets = [
          password,
          newPassword,
          key.apiKey,
          sessionSecret,
          ...hashes.map((row) => row.password_hash!),
          ...keyHashes.map((row) => row.key_hash),
          ...tokenHashes.map((row) => row.token_hash),
        ];
        const leaks: string[] = [];
        for (const page of pages) {
          const text = page.res.body + JSON.stringify([...page.res.headers]);
          if (text.includes('$argon2')) leaks.push(`${page.who} ${page.path}: an argon2 hash`);
          // The CSP would block these in a browser: none may be written.
          if (/<script(?![^>]*\ssrc=)[^>]*>|\sstyle="|\son[a-z]+="/i.test(page.res.body)) leaks.push(`${page.who} ${page.path}: inline script or style`);
          for (const secret of secrets) if (text.includes(secret)) leaks.push(`${page.who} ${page.path}: ${secret.slice(0, 12)}…`);
        }
        expect(leaks).toEqual([]);

        const logs = [...records, ...written()].join('\n');
        // The recorder does receive the service's logs (the reset mail is logged without SMTP).
        expect(logs).toContain('Reset your password');
        for (const secret of [password, newPassword, key.apiKey, 'a wrong password, logged?', sessionSecret]) {
          expect(logs.includes(secret) ? `log contains ${secret}` : 'clean').toBe('clean');
        }
        expect(logs).not.toContain('$argon2');
      } finally {
        for (const spy of [...spies, ...writes]) spy.mockRestore();
        t.app.useLogger(false as unknown as LoggerService);
      }
    });
  });

  describe('error pages', () => {
    it('answers an unknown path with a 404 page in the layout', async () => {
      const res = await new PageClient(t.baseUrl).get('/no/such/page');
      expect(res.status).toBe(404);
      expect(res.headers.get('content-type')).toMatch(/text\/html/);
      expect(res.body).toContain('class="container site-header"');
      expect(res.body).toContain('<h1>Page not found</h1>');
      expect(res.body).not.toContain('/no/such/page');
      expect(res.body).not.toMatch(/Unknown request URL|Cannot GET/);
    });

    it('answers a 403 with a page in the layout', async () => {
      const client = new PageClient(t.baseUrl);
      await client.get('/login');
      const res = await client.post('/login', { email: 'a@example.com', password: 'whatever it is' });
      expect(res.status).toBe(403);
      expect(res.headers.get('content-type')).toMatch(/text\/html/);
      expect(res.body).toContain('class="container site-header"');
      expect(res.body).toContain('<h1>Not allowed</h1>');
    });

    it('answers an unexpected error with a 500 page that has the request id and nothing else', async () => {
      const owner = await signUp(t);
      const members = t.app.get(MembersService);
      const spy = jest.spyOn(members, 'workspacesOf').mockRejectedValueOnce(new Error('connection to 10.0.0.7 failed: password=hunter2'));
      const errors = jest.spyOn(console, 'error').mockImplementation(() => undefined);
      try {
        const res = await owner.client.get('/');
        expect(res.status).toBe(500);
        expect(res.headers.get('content-type')).toMatch(/text\/html/);
        const requestId = res.headers.get('x-request-id');
        expect(requestId).toBeTruthy();
        expect(res.body).toContain(requestId);
        expect(res.body).toContain('class="container site-header"');
        expect(res.body).not.toMatch(/hunter2|10\.0\.0\.7|connection to|at [A-Za-z.]+ \(|\.ts:\d+/);
      } finally {
        spy.mockRestore();
        errors.mockRestore();
      }
    });

    it('keeps JSON errors for the API, even when a browser asks', async () => {
      const { apiKey } = await t.createWorkspace();
      const res = await fetch(`${t.baseUrl}/v1/nope`, { headers: { accept: 'text/html', authorization: `Bearer ${apiKey}` } });
      expect(res.status).toBe(404);
      expect(res.headers.get('content-type')).toMatch(/application\/json/);
      expect(((await res.json()) as { error: { type: string } }).error.type).toBe('not_found');
      // A program that forgets /v1 gets JSON too.
      const program = await fetch(`${t.baseUrl}/chat/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: '{}',
      });
      expect(program.headers.get('content-type')).toMatch(/application\/json/);
    });
  });

  describe('email verification', () => {
    it('signs up into a workspace of the default tier (free) that the person owns', async () => {
      const person = await signUp(t);
      const [row]: { tier: string; role: string }[] = await db.query(
        'SELECT w.tier, m.role FROM workspaces w JOIN memberships m ON m.workspace_id = w.id WHERE w.id = $1 AND m.user_id = $2',
        [person.workspaceId, person.userId],
      );
      expect(row).toEqual({ tier: 'free', role: 'owner' });
    });

    it('shows a banner until the address is verified through the link; the link works once', async () => {
      const person = await signUp(t);
      const overview = await person.client.get(`/w/${person.workspaceId}`);
      expect(overview.status).toBe(200);
      expect(overview.body).toContain('Please verify your email address');
      // No mail server: the link is shown in the page, and kept in the mail log.
      const mail = t.app.get(MailService).logged.filter((m) => m.to === person.email && /verify/i.test(m.subject)).at(-1);
      expect(mail?.link).toBeDefined();
      expect(overview.body).toContain(mail!.link!);
      const path = new URL(mail!.link!).pathname;

      const verified = await person.client.get(path);
      expect(verified.status).toBe(303);
      const after = await person.client.get(verified.location!);
      const page = after.status === 303 ? await person.client.get(after.location!) : after;
      expect(page.body).toContain('Your email address is verified.');
      expect(page.body).not.toContain('Please verify your email address');
      expect((await person.client.get('/account')).body).toContain('Verified.');

      const again = await new PageClient(t.baseUrl).get(path);
      expect(again.status).toBe(400);
      expect(again.body).toContain('Link expired');
    });

    it('refuses a garbage or expired link with a 400 page', async () => {
      const client = new PageClient(t.baseUrl);
      for (const token of ['garbage', randomBytes(32).toString('base64url'), `${'a'.repeat(43)}%00`]) {
        const res = await client.get(`/verify-email/${token}`);
        expect(res.status).toBe(400);
        expect(res.body).toContain('Link expired');
      }
      const person = await signUp(t);
      const mail = t.app.get(MailService).logged.filter((m) => m.to === person.email).at(-1)!;
      await db.query(`UPDATE one_time_tokens SET expires_at = now() - interval '1 minute' WHERE user_id = $1`, [person.userId]);
      const expired = await client.get(new URL(mail.link!).pathname);
      expect(expired.status).toBe(400);
      const account = await person.client.get('/account');
      expect(account.body).toContain('Not verified yet.');
    });
  });
});

describe('dashboard sign-up modes', () => {
  let closed: TestApp;
  let invite: TestApp;
  let team: TestApp;

  beforeAll(async () => {
    const base = testConfig().dashboard;
    [closed, invite, team] = await Promise.all([
      startTestApp({ config: { dashboard: { ...base, signup: 'closed' } } }),
      startTestApp({ config: { dashboard: { ...base, signup: 'invite' } } }),
      startTestApp({ config: { dashboard: { ...base, signup: 'open', signupDefaultTier: 'team' } } }),
    ]);
  });
  afterAll(() => Promise.all([closed?.close(), invite?.close(), team?.close()]));

  async function countUsers(app: TestApp): Promise<number> {
    const [{ count }]: { count: string }[] = await app.app.get(DataSource).query('SELECT count(*) FROM users');
    return Number(count);
  }

  it('SIGNUP=closed: the sign-up page is a 403, and a posted sign-up is refused', async () => {
    const client = new PageClient(closed.baseUrl);
    const page = await client.get('/signup');
    expect(page.status).toBe(403);
    expect(page.body).toContain('Sign-up is closed');
    expect((await client.get('/login')).body).not.toContain('href="/signup"');
    const res = await client.post('/signup', { _csrf: await client.csrfToken(), name: 'Eve', email: newEmail('eve'), password: PASSWORD });
    expect(res.status).toBe(403);
    expect(await countUsers(closed)).toBe(0);
  });

  it('SIGNUP=invite: refused without an invitation, possible with one, joining its workspace', async () => {
    const client = new PageClient(invite.baseUrl);
    expect((await client.get('/signup')).status).toBe(403);
    const refused = await client.post('/signup', { _csrf: await client.csrfToken(), name: 'Eve', email: newEmail('eve'), password: PASSWORD });
    expect(refused.status).toBe(403);
    expect(await countUsers(invite)).toBe(0);
    const forged = await client.post('/signup', {
      _csrf: await client.csrfToken(),
      name: 'Eve',
      email: newEmail('eve'),
      password: PASSWORD,
      invitation: randomBytes(32).toString('base64url'),
    });
    expect(forged.status).toBe(400);
    expect(await countUsers(invite)).toBe(0);

    const workspace = await invite.createWorkspace({ name: 'Invited into' });
    const invitation = await invite.app.get(MembersService).invite(workspace.id, newEmail('welcome'), 'member', null as unknown as string);
    const person = await signUp(invite, { email: invitation.email, invitation: invitation.token });
    expect(person.workspaceId).toBe(workspace.id);
    const member = await invite.app.get(MembersService).membership(person.userId, workspace.id);
    expect(member?.role).toBe('member');
    // Only the invited workspace: no workspace of their own.
    expect(await invite.app.get(MembersService).workspacesOf(person.userId)).toHaveLength(1);
  });

  it('SIGNUP_DEFAULT_TIER sets the tier of the new workspace', async () => {
    const person = await signUp(team);
    const [{ tier }]: { tier: string }[] = await team.app.get(DataSource).query('SELECT tier FROM workspaces WHERE id = $1', [person.workspaceId]);
    expect(tier).toBe('team');
  });
});
