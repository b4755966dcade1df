/**
 * Accounts that hold with untrusted tenants and the public (issue 29, items 5 and 7), over
 * HTTP against the whole application with mail configured (a fake SMTP server that keeps
 * what it is sent): an invitation works only for an account with the invited address,
 * verified; sign-up through it gets that address; a third party's failed sign-ins from
 * another address do not stop the owner signing in from theirs, and a reset link works
 * while the account is throttled and clears it; a reset revokes the account's other reset
 * and sign-in links; mailed links come from PUBLIC_URL, never from the Host header; no
 * full link is ever written to the log once mail is configured, also when sending fails.
 */
import { LoggerService } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { DataSource } from 'typeorm';
import { AccountsService } from '../src/accounts/accounts.service';
import { THROTTLE_LIMITS } from '../src/dashboard/login-throttle';
import { MailService } from '../src/mail/mail.service';
import { FakeSmtp, startFakeSmtp } from './fakes/fake-smtp';
import { DashboardClient, DashboardResponse, PostOptions, RequestOptions, textOf } from './support/dashboard-client';
import { startTestApp, testConfig, TestApp } from './support/test-app';

const PUBLIC_URL = 'https://chat.example.test';
const PASSWORD = 'correct horse battery staple';
/** A link of any kind that carries more of a secret than a masked one (8 characters) does. */
const LINK_WITH_SECRET = /\/(?:password\/reset|verify-email|invitations|sign-in)\/[A-Za-z0-9_-]{9,}/;

/** A browser at a client address of its own (the app trusts X-Forwarded-For from loopback). */
class Browser extends DashboardClient {
  constructor(
    baseUrl: string,
    readonly address = `10.${1 + (randomBytes(1)[0] % 250)}.${randomBytes(1)[0]}.${1 + (randomBytes(1)[0] % 250)}`,
  ) {
    super(baseUrl);
  }

  override get(path: string, options: RequestOptions = {}): Promise<DashboardResponse> {
    return super.get(path, { ...options, headers: { 'x-forwarded-for': this.address, ...options.headers } });
  }

  override post(path: string, form: Record<string, string> = {}, options: PostOptions = {}): Promise<DashboardResponse> {
    return super.post(path, form, { ...options, headers: { 'x-forwarded-for': this.address, ...options.headers } });
  }
}

let counter = 0;
function newEmail(tag: string): string {
  return `${tag}-${Date.now().toString(36)}-${++counter}@example.com`;
}

describe('Account safety (issue 29)', () => {
  let t: TestApp;
  let smtp: FakeSmtp;
  let db: DataSource;
  const records: string[] = [];

  beforeAll(async () => {
    smtp = await startFakeSmtp();
    const base = testConfig().dashboard;
    t = await startTestApp({ config: { dashboard: { ...base, publicUrl: PUBLIC_URL, smtpUrl: smtp.url } } });
    db = t.app.get(DataSource);
    // Every line the application logs, from here on.
    const record = (...args: unknown[]) => void records.push(args.map((arg) => (typeof arg === 'string' ? arg : JSON.stringify(arg))).join(' '));
    const recorder: LoggerService = { log: record, error: record, warn: record, debug: record, verbose: record, fatal: record };
    t.app.useLogger(recorder);
  });

  afterAll(async () => {
    await t?.close();
    await smtp?.close();
  });

  /** The path of the newest link mailed to this address (the mail's link starts with PUBLIC_URL). */
  function mailedPath(email: string, subject: RegExp): string {
    const mail = smtp.received.filter((m) => m.to.includes(email.toLowerCase()) && subject.test(m.subject)).at(-1);
    if (!mail) throw new Error(`No mail "${subject}" to ${email}; received: ${smtp.received.map((m) => `${m.to} ${m.subject}`).join(', ')}`);
    const link = new RegExp(`${PUBLIC_URL.replace(/\./g, '\\.')}(/\\S+)`).exec(mail.text);
    if (!link) throw new Error(`No link to ${PUBLIC_URL} in: ${mail.text}`);
    return link[1];
  }

  function mailedPaths(email: string, subject: RegExp): string[] {
    return smtp.received
      .filter((m) => m.to.includes(email.toLowerCase()) && subject.test(m.subject))
      .map((m) => new RegExp(`${PUBLIC_URL.replace(/\./g, '\\.')}(/\\S+)`).exec(m.text)![1]);
  }

  async function signUp(email: string, name: string, browser = new Browser(t.baseUrl)): Promise<{ browser: Browser; workspaceId: string }> {
    await browser.get('/signup');
    const answer = await browser.post('/signup', { name, email, password: PASSWORD });
    const workspace = answer.location?.match(/\/w\/([0-9a-f-]{36})$/);
    if (answer.status !== 303 || !workspace) throw new Error(`Sign-up answered ${answer.status}: ${textOf(answer.html).slice(0, 300)}`);
    return { browser, workspaceId: workspace[1] };
  }

  async function verify(browser: Browser, email: string): Promise<void> {
    const answer = await browser.get(mailedPath(email, /verify/i));
    expect(answer.status).toBe(303);
    expect(await verifiedAt(email)).not.toBeNull();
  }

  async function verifiedAt(email: string): Promise<Date | null> {
    const rows: { email_verified_at: Date | null }[] = await db.query(`SELECT email_verified_at FROM users WHERE email = $1`, [email]);
    return rows[0].email_verified_at;
  }

  async function signIn(browser: Browser, email: string, password: string): Promise<DashboardResponse> {
    await browser.get('/login');
    return browser.post('/login', { email, password });
  }

  async function roleOf(workspaceId: string, email: string): Promise<string | null> {
    const rows: { role: string }[] = await db.query(
      `SELECT m.role FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND u.email = $2`,
      [workspaceId, email],
    );
    return rows[0]?.role ?? null;
  }

  /** Invites through the members page (mail configured: the link goes to the invitee's mailbox only). */
  async function invite(owner: Browser, workspaceId: string, email: string, role: string): Promise<string> {
    await owner.get(`/w/${workspaceId}/settings/members`);
    const answer = await owner.post(`/w/${workspaceId}/settings/invitations`, { email, role });
    expect(answer.status).toBe(303);
    expect(textOf((await owner.follow(answer)).html)).toContain(`Invitation sent to ${email.toLowerCase()}`);
    const path = mailedPath(email, /invited you/);
    expect(path).toMatch(/^\/invitations\/[A-Za-z0-9_-]{43}$/);
    return path.split('/').at(-1)!;
  }

  describe('invitations bound to their address', () => {
    let owner: { browser: Browser; workspaceId: string };

    beforeAll(async () => {
      const email = newEmail('owner');
      owner = await signUp(email, 'Olga Owner');
      await verify(owner.browser, email);
    });

    it('an account with another email, verified, is refused and told whom the invitation is for', async () => {
      const invited = newEmail('Invited').replace('invited', 'Invited');
      const token = await invite(owner.browser, owner.workspaceId, invited, 'owner');
      const mallory = newEmail('mallory');
      const intruder = await signUp(mallory, 'Mallory');
      await verify(intruder.browser, mallory);

      const page = await intruder.browser.get(`/invitations/${token}`);
      expect(page.status).toBe(200);
      const text = textOf(page.html);
      expect(text).toContain(`The invitation is for ${invited.toLowerCase()} only`);
      expect(text).toContain(`You are signed in as ${mallory}, not as ${invited.toLowerCase()}`);
      expect(page.html).not.toContain(`/invitations/${token}/accept`);

      // Posting the accept form anyway (the button is not what protects it).
      const accepted = await intruder.browser.post(`/invitations/${token}/accept`);
      expect(accepted.status).toBe(403);
      expect(textOf(accepted.html)).toContain(`This invitation is for ${invited.toLowerCase()}. Sign in with that address`);
      expect(await roleOf(owner.workspaceId, mallory)).toBeNull();
      const rows: { accepted_at: Date | null }[] = await db.query(`SELECT accepted_at FROM invitations WHERE email = $1`, [invited.toLowerCase()]);
      expect(rows).toEqual([{ accepted_at: null }]);

      // Signing up through the link with another address in the form still gets the invited one.
      const newcomer = new Browser(t.baseUrl);
      const form = await newcomer.get(`/signup?invitation=${token}`);
      expect(form.status).toBe(200);
      expect(form.html).toMatch(new RegExp(`<input id="email" name="email" type="email" autocomplete="email" readonly value="${invited.toLowerCase()}"`));
      const signedUp = await newcomer.post('/signup', { name: 'Ivy Invited', email: newEmail('someone-else'), password: PASSWORD, invitation: token });
      expect(signedUp.status).toBe(303);
      expect(signedUp.location).toBe(`/w/${owner.workspaceId}`);
      expect(await roleOf(owner.workspaceId, invited.toLowerCase())).toBe('owner');
      // Verified by the link itself: no verification mail, and no second account.
      expect(await verifiedAt(invited.toLowerCase())).not.toBeNull();
      expect(smtp.received.filter((m) => m.to.includes(invited.toLowerCase()) && /verify/i.test(m.subject))).toEqual([]);
      expect(await db.query(`SELECT count(*)::int AS n FROM users WHERE email LIKE 'someone-else-%'`)).toEqual([{ n: 0 }]);
    });

    it('the invited address, once verified, accepts (case aside); unverified, it is asked to verify first', async () => {
      const invited = newEmail('frank');
      const frank = await signUp(invited, 'Frank');
      // Invited with another case than the account's.
      const token = await invite(owner.browser, owner.workspaceId, invited.toUpperCase(), 'admin');

      const unverified = await frank.browser.get(`/invitations/${token}`);
      expect(textOf(unverified.html)).toContain(`Verify your email address ${invited} first`);
      expect(unverified.html).not.toContain(`/invitations/${token}/accept`);
      const refused = await frank.browser.post(`/invitations/${token}/accept`);
      expect(refused.status).toBe(403);
      expect(textOf(refused.html)).toContain(`Verify your email address ${invited} first`);
      expect(await roleOf(owner.workspaceId, invited)).toBeNull();

      await verify(frank.browser, invited);
      const page = await frank.browser.get(`/invitations/${token}`);
      expect(page.html).toContain(`action="/invitations/${token}/accept"`);
      const accepted = await frank.browser.post(`/invitations/${token}/accept`);
      expect(accepted.status).toBe(303);
      expect(accepted.location).toBe(`/w/${owner.workspaceId}`);
      expect(await roleOf(owner.workspaceId, invited)).toBe('admin');
    });

    it('sign-up through an invitation to an address that has an account says to sign in with it', async () => {
      const existing = newEmail('existing');
      await signUp(existing, 'Existing');
      const token = await invite(owner.browser, owner.workspaceId, existing, 'member');
      const someone = new Browser(t.baseUrl);
      await someone.get(`/signup?invitation=${token}`);
      const answer = await someone.post('/signup', { name: 'Someone', email: newEmail('x'), password: PASSWORD, invitation: token });
      expect(answer.status).toBe(409);
      expect(textOf(answer.html)).toContain(`An account with ${existing} exists. Sign in with it`);
      expect(await roleOf(owner.workspaceId, existing)).toBeNull();
    });
  });

  describe('sign-in throttling by account and address', () => {
    it("a third party's failed attempts from another address do not stop the owner signing in from theirs", async () => {
      const email = newEmail('victim');
      await signUp(email, 'Victor');
      const limits = THROTTLE_LIMITS.login;
      // From three addresses of its own, more failures in all than a per-account limit of 10 would allow.
      for (const attacker of [new Browser(t.baseUrl), new Browser(t.baseUrl), new Browser(t.baseUrl)]) {
        const statuses: number[] = [];
        for (let attempt = 0; attempt <= limits.accountAddress.attempts; attempt++) {
          statuses.push((await signIn(attacker, email, `guess number ${attempt} here`)).status);
        }
        // The third party is throttled at each of its addresses, the right password included...
        expect(statuses).toEqual([...Array<number>(limits.accountAddress.attempts).fill(401), 429]);
        expect((await signIn(attacker, email, PASSWORD)).status).toBe(429);
      }
      // ...and the owner, from theirs, is not.
      const owner = new Browser(t.baseUrl);
      const signedIn = await signIn(owner, email, PASSWORD);
      expect(signedIn.status).toBe(303);
      expect(signedIn.location).toBe('/');
    });

    it('guessing spread over many addresses hits the per-account limit; a reset link works meanwhile and clears it', async () => {
      const email = newEmail('target');
      await signUp(email, 'Tara');
      const limit = THROTTLE_LIMITS.login.account.attempts;
      const statuses: number[] = [];
      for (let attempt = 0; attempt < limit; attempt++) {
        // Fewer per address than that address's own limit: only the per-account count adds up.
        statuses.push((await signIn(new Browser(t.baseUrl), email, `spread guess ${attempt}`)).status);
      }
      expect(statuses.every((status) => status === 401)).toBe(true);
      const owner = new Browser(t.baseUrl);
      const throttled = await signIn(owner, email, PASSWORD);
      expect(throttled.status).toBe(429);
      expect(textOf(throttled.html)).toContain('or reset your password');

      // The owner asks for a reset link from the same address, and it works.
      await owner.get('/password/forgot');
      expect((await owner.post('/password/forgot', { email })).status).toBe(200);
      const reset = mailedPath(email, /reset/i);
      await owner.get(reset);
      const newPassword = 'a brand new passphrase';
      const changed = await owner.post(reset, { password: newPassword });
      expect(changed.status).toBe(303);
      expect(changed.location).toBe('/login?reset=1');
      expect((await signIn(owner, email, newPassword)).status).toBe(303);
      // The old password, from anywhere, is now simply wrong (not throttled).
      expect((await signIn(new Browser(t.baseUrl), email, PASSWORD)).status).toBe(401);
    });

    it('one address trying many accounts is limited across them', async () => {
      const sprayer = new Browser(t.baseUrl);
      const limit = THROTTLE_LIMITS.login.address.attempts;
      const statuses: number[] = [];
      for (let attempt = 0; attempt <= limit; attempt++) statuses.push((await signIn(sprayer, newEmail('spray'), 'guess guess guess')).status);
      expect(statuses).toEqual([...Array<number>(limit).fill(401), 429]);
    });
  });

  it('a successful reset revokes every other outstanding reset link and sign-in link of the account', async () => {
    const email = newEmail('resetter');
    await signUp(email, 'Rita');
    const asker = new Browser(t.baseUrl);
    for (let i = 0; i < 3; i++) {
      await asker.get('/password/forgot');
      expect((await asker.post('/password/forgot', { email })).status).toBe(200);
    }
    const links = mailedPaths(email, /reset/i);
    expect(links).toHaveLength(3);
    expect(new Set(links).size).toBe(3);
    const [userRow]: { id: string }[] = await db.query(`SELECT id FROM users WHERE email = $1`, [email]);
    const signInToken = await t.app.get(AccountsService).issueToken(userRow.id, 'sign_in');
    expect((await asker.get(`/sign-in/${signInToken}`)).status).toBe(200);
    for (const link of links) expect((await asker.get(link)).status).toBe(200);

    await asker.get(links[1]);
    expect((await asker.post(links[1], { password: 'the newest passphrase' })).status).toBe(303);

    for (const link of [links[0], links[2]]) {
      const page = await asker.get(link);
      expect(page.status).toBe(400);
      expect(textOf(page.html)).toContain('This link is invalid, used or expired.');
      await asker.get('/login');
      expect((await asker.post(link, { password: 'an intruder passphrase' })).status).toBe(400);
    }
    expect((await asker.get(`/sign-in/${signInToken}`)).status).toBe(400);
    expect((await signIn(new Browser(t.baseUrl), email, 'the newest passphrase')).status).toBe(303);
    expect((await signIn(new Browser(t.baseUrl), email, 'an intruder passphrase')).status).toBe(401);
  });

  it('mailed links are built from PUBLIC_URL, whatever Host the request names', async () => {
    const email = newEmail('host');
    await signUp(email, 'Hosted');
    const before = smtp.received.length;
    const client = new Browser(t.baseUrl);
    await client.get('/password/forgot');
    const answer = await client.post('/password/forgot', { email }, { headers: { host: 'evil.example', 'x-forwarded-host': 'evil.example' } });
    expect(answer.status).toBe(200);
    const mail = smtp.received.slice(before).find((m) => m.to.includes(email))!;
    expect(mail.text).toContain(`${PUBLIC_URL}/password/reset/`);
    expect(mail.text).not.toContain('evil.example');
  });

  it('writes no full link to the log with mail configured: mails sent, and a mail the server refuses (masked link only)', async () => {
    // Everything above mailed links (verification, invitation, reset): none of them is in the log.
    const mailedLinks = smtp.received.flatMap((m) => m.text.match(/https?:\/\/\S+/g) ?? []);
    expect(mailedLinks.length).toBeGreaterThan(10);
    const logged = () => records.join('\n');
    for (const link of mailedLinks) expect(logged()).not.toContain(link.split('/').at(-1));
    expect(logged()).not.toMatch(LINK_WITH_SECRET);
    // Nor does the in-memory copy of logged mail (what no mail server would have delivered) grow.
    expect(t.app.get(MailService).logged).toEqual([]);

    const email = newEmail('bounced');
    await signUp(email, 'Bounce');
    smtp.reject = true;
    try {
      const before = records.length;
      const client = new Browser(t.baseUrl);
      await client.get('/password/forgot');
      const answer = await client.post('/password/forgot', { email });
      // The same page as when the mail went out: nothing says whether the address has an account.
      expect(answer.status).toBe(200);
      const failure = records.slice(before).find((line) => line.includes('Could not send "Reset your password"'));
      expect(failure).toBeDefined();
      expect(failure).toContain(email);
      expect(failure).toMatch(new RegExp(`\\(link ${PUBLIC_URL.replace(/\./g, '\\.')}/password/reset/[A-Za-z0-9_-]{8}…\\)`));
      expect(logged()).not.toMatch(LINK_WITH_SECRET);

      // A verification mail that fails is not shown in the page either: a verified address must mean the mailbox was read.
      const person = new Browser(t.baseUrl);
      await person.get('/signup');
      const signedUp = await person.post('/signup', { name: 'Vera', email: newEmail('vera'), password: PASSWORD });
      expect(signedUp.status).toBe(303);
      const next = await person.follow(signedUp);
      expect(textOf(next.html)).toContain('We could not send the verification link');
      expect(next.html).not.toMatch(LINK_WITH_SECRET);
      expect(logged()).not.toMatch(LINK_WITH_SECRET);
    } finally {
      smtp.reject = false;
    }
  });
});
