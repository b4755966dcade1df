/**
 * A small browser stand-in for HTTP-level dashboard tests: fetch with a cookie jar, the
 * CSRF token of the last page sent with every form, and no redirect followed unless asked.
 *
 *   const person = await signUp(baseUrl, { email, name, password });
 *   const page = await person.client.get(`/w/${person.workspaceId}/settings/keys`);
 *   const created = await person.client.post(`/w/${person.workspaceId}/settings/keys`, { name: 'ci' });
 */

export interface DashboardResponse {
  status: number;
  headers: Headers;
  /** The body as text (HTML for pages). */
  html: string;
  /** The Location header of a redirect, else null. */
  location: string | null;
}

export interface RequestOptions {
  headers?: Record<string, string>;
  /** Follow redirects (GET each Location) until a page answers; default false. */
  follow?: boolean;
}

export interface PostOptions extends RequestOptions {
  /**
   * The `_csrf` field: by default the token of the last page this client saw (found in a
   * hidden field or in the htmx headers of <body>); false sends none; a string sends that.
   */
  csrf?: boolean | string;
}

const MAX_REDIRECTS = 10;
/** What a browser's navigation sends. */
export const BROWSER_ACCEPT = 'text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8';

export class DashboardClient {
  /** Cookie name -> value, as a browser on this one origin would keep them. */
  readonly cookies = new Map<string, string>();
  /** The CSRF token of the last page seen. */
  csrfToken: string | null = null;
  /** The last page's body. */
  lastHtml = '';

  /** `baseUrl`: `http://127.0.0.1:<port>` (with BASE_PATH when the app has one). */
  constructor(readonly baseUrl: string) {}

  /** GET a path (`/w/...`) or an absolute URL. */
  async get(path: string, options: RequestOptions = {}): Promise<DashboardResponse> {
    return this.request('GET', path, undefined, options);
  }

  /** POST a form (urlencoded), with `_csrf` added unless options.csrf is false. */
  async post(path: string, form: Record<string, string> = {}, options: PostOptions = {}): Promise<DashboardResponse> {
    const body = new URLSearchParams(form);
    const csrf = options.csrf ?? true;
    if (csrf === true && this.csrfToken && !('_csrf' in form)) body.set('_csrf', this.csrfToken);
    if (typeof csrf === 'string') body.set('_csrf', csrf);
    return this.request('POST', path, body, options);
  }

  /** GET the Location of a redirect. */
  async follow(response: DashboardResponse, options: RequestOptions = {}): Promise<DashboardResponse> {
    if (!response.location) throw new Error(`Not a redirect: ${response.status}`);
    return this.get(response.location, options);
  }

  /** The session cookie's value, or undefined. */
  get sessionCookie(): string | undefined {
    return this.cookies.get('acs.sid');
  }

  private url(path: string): string {
    if (/^https?:\/\//.test(path)) return path;
    // A Location from the server already carries BASE_PATH: resolve it against the origin.
    const base = new URL(this.baseUrl);
    const basePath = base.pathname.replace(/\/+$/, '');
    if (basePath && (path === basePath || path.startsWith(`${basePath}/`) || path.startsWith(`${basePath}?`))) {
      return `${base.origin}${path}`;
    }
    return `${base.origin}${basePath}${path}`;
  }

  private async request(
    method: string,
    path: string,
    body: URLSearchParams | undefined,
    options: RequestOptions,
  ): Promise<DashboardResponse> {
    let url = this.url(path);
    let currentMethod = method;
    let currentBody = body;
    for (let hop = 0; ; hop++) {
      // As a browser asks: error pages are HTML only for clients that accept HTML.
      const headers: Record<string, string> = { accept: BROWSER_ACCEPT, ...options.headers };
      const cookie = [...this.cookies].map(([name, value]) => `${name}=${value}`).join('; ');
      if (cookie) headers.cookie = cookie;
      if (currentBody) headers['content-type'] = 'application/x-www-form-urlencoded';
      const response = await fetch(url, { method: currentMethod, headers, body: currentBody, redirect: 'manual' });
      this.keepCookies(response.headers);
      const html = await response.text();
      const location = response.headers.get('location');
      if (response.headers.get('content-type')?.includes('text/html')) {
        this.lastHtml = html;
        this.csrfToken = csrfTokenIn(html) ?? this.csrfToken;
      }
      const result = { status: response.status, headers: response.headers, html, location };
      if (!options.follow || !location || response.status < 300 || response.status >= 400) return result;
      if (hop >= MAX_REDIRECTS) throw new Error(`More than ${MAX_REDIRECTS} redirects from ${path}`);
      url = new URL(location, url).toString();
      currentMethod = 'GET';
      currentBody = undefined;
    }
  }

  private keepCookies(headers: Headers): void {
    for (const line of headers.getSetCookie()) {
      const [pair, ...attributes] = line.split(';');
      const separator = pair.indexOf('=');
      const name = pair.slice(0, separator).trim();
      const value = pair.slice(separator + 1).trim();
      const expired = attributes.some((attribute) => {
        const [key, val] = attribute.trim().split('=');
        if (key.toLowerCase() === 'max-age') return Number(val) <= 0;
        if (key.toLowerCase() === 'expires') return new Date(val).getTime() <= Date.now();
        return false;
      });
      if (expired || value === '') this.cookies.delete(name);
      else this.cookies.set(name, value);
    }
  }
}

/** The CSRF token of a page: a hidden `_csrf` field, else the X-CSRF-Token of <body hx-headers>. */
export function csrfTokenIn(html: string): string | null {
  const field = html.match(/name="_csrf" value="([^"]+)"/);
  if (field) return field[1];
  const header = html.match(/"X-CSRF-Token":\s*"([^"]+)"/);
  return header ? header[1] : null;
}

export interface SignedUpPerson {
  client: DashboardClient;
  /** The workspace sign-up created, the person its owner (with an invitation: the workspace joined). */
  workspaceId: string;
  email: string;
  name: string;
  password: string;
}

/**
 * Signs a person up through the pages; they are signed in afterwards. Without an invitation
 * (its token, as in the `/signup?invitation=` link) sign-up must be open.
 */
export async function signUp(
  baseUrl: string,
  person: { email: string; name: string; password?: string; invitation?: string },
): Promise<SignedUpPerson> {
  const client = new DashboardClient(baseUrl);
  const password = person.password ?? 'correct horse battery staple';
  const query = person.invitation ? `?invitation=${encodeURIComponent(person.invitation)}` : '';
  const page = await client.get(`/signup${query}`);
  if (page.status !== 200) throw new Error(`GET /signup answered ${page.status}`);
  const form: Record<string, string> = { email: person.email, name: person.name, password };
  if (person.invitation) form.invitation = person.invitation;
  const response = await client.post('/signup', form);
  const workspace = response.location?.match(/\/w\/([0-9a-f-]{36})$/);
  if (response.status !== 303 || !workspace) {
    throw new Error(`Sign-up of ${person.email} answered ${response.status} ${response.location ?? ''}: ${response.html.slice(0, 500)}`);
  }
  return { client, workspaceId: workspace[1], email: person.email, name: person.name, password };
}

/** Signs in with email and password through the login page; returns the signed-in client. */
export async function signIn(baseUrl: string, credentials: { email: string; password: string }): Promise<DashboardClient> {
  const client = new DashboardClient(baseUrl);
  await client.get('/login');
  const response = await client.post('/login', { email: credentials.email, password: credentials.password });
  if (response.status !== 303) throw new Error(`Sign-in of ${credentials.email} answered ${response.status}`);
  return client;
}

/** The text of an HTML fragment, tags removed and whitespace collapsed (for assertions on what people read). */
export function textOf(html: string): string {
  return html
    .replace(/<script[\s\S]*?<\/script>/gi, ' ')
    .replace(/<[^>]+>/g, ' ')
    .replace(/&amp;/g, '&')
    .replace(/&lt;/g, '<')
    .replace(/&gt;/g, '>')
    .replace(/&quot;/g, '"')
    .replace(/&#39;/g, "'")
    .replace(/\s+/g, ' ')
    .trim();
}
