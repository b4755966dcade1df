/**
 * Workspaces and members in the dashboard, over HTTP against the whole application:
 * invitations (with no mail server, the link reaches the inviter), sign-up through an
 * invitation, roles enforced by the server (not by hidden buttons), the last owner who can
 * neither leave nor be demoted (also when two owners demote each other at once), removal,
 * revocation, single use, ids of another workspace, and creating a workspace.
 */
import { randomUUID } from 'node:crypto';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import { DataSource } from 'typeorm';
import { MailService } from '../src/mail/mail.service';
import { collectConsoleErrors, describeWithBrowser, expectAccessible, launchChromium, newContext, PageProblem } from './support/browser';
import { DashboardClient, DashboardResponse, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { startTestApp, TestApp } from './support/test-app';

const PASSWORD = 'correct horse battery staple';

describe('Dashboard: workspaces and members', () => {
  let t: TestApp;
  let db: DataSource;
  let mail: MailService;
  let alice: SignedUpPerson;
  let ws: string;
  let bob: DashboardClient;

  beforeAll(async () => {
    t = await startTestApp();
    db = t.app.get(DataSource);
    mail = t.app.get(MailService);
    alice = await signUp(t.baseUrl, { email: 'alice@example.com', name: 'Alice Owner' });
    ws = alice.workspaceId;
  });

  afterAll(async () => {
    await t?.close();
  });

  const members = (id: string) => `/w/${id}/settings/members`;

  async function userId(email: string): Promise<string> {
    const rows: { id: string }[] = await db.query(`SELECT id FROM users WHERE email = $1`, [email]);
    if (!rows[0]) throw new Error(`no user ${email}`);
    return rows[0].id;
  }

  async function roleOf(workspaceId: string, email: string): Promise<string | null> {
    const rows: { role: string }[] = await db.query(
      `SELECT m.role FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND u.email = $2`,
      [workspaceId, email],
    );
    return rows[0]?.role ?? null;
  }

  async function owners(workspaceId: string): Promise<string[]> {
    const rows: { email: string }[] = await db.query(
      `SELECT u.email FROM memberships m JOIN users u ON u.id = m.user_id WHERE m.workspace_id = $1 AND m.role = 'owner' ORDER BY u.email`,
      [workspaceId],
    );
    return rows.map((row) => row.email);
  }

  /** Invites through the members page; returns the link shown in the page (no mail server here). */
  async function invite(client: DashboardClient, workspaceId: string, email: string, role: string): Promise<{ link: string; token: string; page: DashboardResponse }> {
    await client.get(members(workspaceId));
    // Without a mail server the link is in the answer to the POST itself (201), shown once, never stored in the session.
    const page = await client.post(`/w/${workspaceId}/settings/invitations`, { email, role });
    expect(page.status).toBe(201);
    const match = page.html.match(/<code id="invitation-link"[^>]*>(http:\/\/[^<]+\/invitations\/([A-Za-z0-9_-]{43}))<\/code>/);
    if (!match) throw new Error(`No invitation link in the page: ${textOf(page.html).slice(0, 600)}`);
    return { link: match[1], token: match[2], page };
  }

  /** Signs up through an invitation link, as someone without an account does. */
  async function signUpInvited(token: string, email: string, name: string): Promise<{ client: DashboardClient; response: DashboardResponse }> {
    const client = new DashboardClient(t.baseUrl);
    const form = await client.get(`/signup?invitation=${token}`);
    expect(form.status).toBe(200);
    const response = await client.post('/signup', { name, email, password: PASSWORD, invitation: token });
    return { client, response };
  }

  it('an owner invites bob; with no mail server the link is in the page flash and in the logged mail', async () => {
    const page = await alice.client.get(members(ws));
    expect(page.status).toBe(200);
    expect(page.html).toContain(`action="/w/${ws}/settings/invitations"`);

    const { link, token, page: after } = await invite(alice.client, ws, 'Bob@Example.com', 'member');
    expect(link).toBe(`${t.baseUrl}/invitations/${token}`);
    const logged = mail.logged.at(-1)!;
    expect(logged.to).toBe('bob@example.com');
    expect(logged.link).toBe(link);
    expect(logged.text).toContain(link);
    // A copy-friendly box with the link, and the pending list.
    expect(after.html).toContain(`<code id="invitation-link" class="secret">${link}</code>`);
    expect(after.html).toContain('data-copy="invitation-link"');
    expect(textOf(after.html)).toMatch(/Pending invitations.*bob@example\.com member Alice Owner/);
    // The copy box shows once.
    expect((await alice.client.get(members(ws))).html).not.toContain('id="invitation-link"');

    const rows: { role: string; accepted_at: Date | null }[] = await db.query(
      `SELECT role, accepted_at FROM invitations WHERE workspace_id = $1 AND email = 'bob@example.com'`,
      [ws],
    );
    expect(rows).toEqual([{ role: 'member', accepted_at: null }]);

    // Signed out, the link names the workspace, role and inviter, and offers both ways in.
    const stranger = new DashboardClient(t.baseUrl);
    const invitation = await stranger.get(`/invitations/${token}`);
    expect(invitation.status).toBe(200);
    expect(textOf(invitation.html)).toContain("Alice Owner invited bob@example.com to join Alice Owner's workspace as member");
    expect(invitation.html).toContain(`href="/signup?invitation=${token}"`);
    expect(invitation.html).toContain(`href="/login?next=/invitations/${token}"`);
    expect(invitation.html).not.toContain('/accept');

    // Bob signs up through it: a member of Alice's workspace, with none of his own.
    const { client, response } = await signUpInvited(token, 'bob@example.com', 'Bob Member');
    expect(response.status).toBe(303);
    expect(response.location).toBe(`/w/${ws}`);
    bob = client;
    const memberships: { workspace_id: string; role: string }[] = await db.query(
      `SELECT workspace_id, role FROM memberships WHERE user_id = $1`,
      [await userId('bob@example.com')],
    );
    expect(memberships).toEqual([{ workspace_id: ws, role: 'member' }]);
    const accepted: { accepted_by: string }[] = await db.query(`SELECT accepted_by FROM invitations WHERE workspace_id = $1 AND email = 'bob@example.com'`, [ws]);
    expect(accepted[0].accepted_by).toBe(await userId('bob@example.com'));
    expect((await bob.get(`/w/${ws}`)).status).toBe(200);
  });

  it('a member sees the members but no controls, and every change they post is refused with 403', async () => {
    const page = await bob.get(members(ws));
    expect(page.status).toBe(200);
    const text = textOf(page.html);
    expect(text).toContain('Alice Owner alice@example.com owner');
    expect(text).toContain('Bob Member (you) bob@example.com member');
    expect(page.html).not.toContain('/settings/invitations"');
    expect(page.html).not.toContain('name="role"');
    expect(page.html).not.toContain('/remove"');
    expect(text).toContain('Only owners can invite people');

    const aliceId = await userId('alice@example.com');
    const bobId = await userId('bob@example.com');
    const invitationsBefore = await db.query(`SELECT count(*)::int AS n FROM invitations`);
    expect((await bob.post(`/w/${ws}/settings/invitations`, { email: 'mallory@example.com', role: 'owner' })).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings/members/${bobId}/role`, { role: 'owner' })).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings/members/${aliceId}/role`, { role: 'member' })).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings/members/${aliceId}/remove`)).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings`, { name: 'Taken over' })).status).toBe(403);
    expect(await db.query(`SELECT count(*)::int AS n FROM invitations`)).toEqual(invitationsBefore);
    expect(await roleOf(ws, 'bob@example.com')).toBe('member');
    expect(await roleOf(ws, 'alice@example.com')).toBe('owner');
  });

  it('an owner promotes bob to admin; an admin still may not manage members', async () => {
    const bobId = await userId('bob@example.com');
    await alice.client.get(members(ws));
    const promoted = await alice.client.post(`/w/${ws}/settings/members/${bobId}/role`, { role: 'admin' });
    expect(promoted.status).toBe(303);
    expect(textOf((await alice.client.follow(promoted)).html)).toContain('Bob Member is now an admin.');
    expect(await roleOf(ws, 'bob@example.com')).toBe('admin');

    const page = await bob.get(members(ws));
    expect(page.html).not.toContain('name="role"');
    const aliceId = await userId('alice@example.com');
    expect((await bob.post(`/w/${ws}/settings/invitations`, { email: 'mallory@example.com', role: 'member' })).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings/members/${bobId}/role`, { role: 'owner' })).status).toBe(403);
    expect((await bob.post(`/w/${ws}/settings/members/${aliceId}/remove`)).status).toBe(403);
    expect(await roleOf(ws, 'bob@example.com')).toBe('admin');
    expect(await roleOf(ws, 'alice@example.com')).toBe('owner');
  });

  it('the last owner can neither leave, nor demote nor remove themself', async () => {
    const aliceId = await userId('alice@example.com');
    const settings = await alice.client.get(`/w/${ws}/settings`);
    expect(settings.status).toBe(200);
    expect(textOf(settings.html)).toContain('You are the only owner');
    expect(settings.html).not.toContain(`action="/w/${ws}/leave"`);

    const leave = await alice.client.post(`/w/${ws}/leave`);
    expect(leave.status).toBe(400);
    expect(textOf(leave.html)).toContain('You are the only owner: make someone else an owner first, then leave.');

    const demote = await alice.client.post(`/w/${ws}/settings/members/${aliceId}/role`, { role: 'admin' });
    expect(demote.status).toBe(400);
    expect(textOf(demote.html)).toContain('You are the only owner');

    const remove = await alice.client.post(`/w/${ws}/settings/members/${aliceId}/remove`);
    expect(remove.status).toBe(400);
    expect(textOf(remove.html)).toContain('A workspace needs an owner');

    expect(await owners(ws)).toEqual(['alice@example.com']);
  });

  it('two owners demoting each other at once: exactly one succeeds, one owner remains', async () => {
    const { token } = await invite(alice.client, ws, 'carol@example.com', 'owner');
    const { client: carol, response } = await signUpInvited(token, 'carol@example.com', 'Carol Owner');
    expect(response.status).toBe(303);
    expect(await owners(ws)).toEqual(['alice@example.com', 'carol@example.com']);
    const aliceId = await userId('alice@example.com');
    const carolId = await userId('carol@example.com');
    await alice.client.get(members(ws));
    await carol.get(members(ws));

    // Hold the owner rows, so both requests are inside their transactions before either decides.
    const holder = db.createQueryRunner();
    await holder.connect();
    await holder.startTransaction();
    let results: DashboardResponse[];
    try {
      await holder.query(`SELECT 1 FROM memberships WHERE workspace_id = $1 AND role = 'owner' FOR UPDATE`, [ws]);
      const racing = Promise.all([
        alice.client.post(`/w/${ws}/settings/members/${carolId}/role`, { role: 'admin' }),
        carol.post(`/w/${ws}/settings/members/${aliceId}/role`, { role: 'admin' }),
      ]);
      await waitFor(async () => {
        const rows: { n: number }[] = await db.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'`,
        );
        return rows[0].n >= 2;
      });
      await holder.commitTransaction();
      results = await racing;
    } finally {
      if (holder.isTransactionActive) await holder.rollbackTransaction();
      await holder.release();
    }
    const statuses = results.map((r) => r.status).sort();
    expect(statuses[0]).toBe(303);
    expect([400, 403]).toContain(statuses[1]);
    const remaining = await owners(ws);
    expect(remaining).toHaveLength(1);

    // Back to Alice as the only owner, for what follows.
    if (remaining[0] === 'carol@example.com') {
      await carol.get(members(ws));
      expect((await carol.post(`/w/${ws}/settings/members/${aliceId}/role`, { role: 'owner' })).status).toBe(303);
    }
    await alice.client.get(members(ws));
    expect((await alice.client.post(`/w/${ws}/settings/members/${carolId}/role`, { role: 'member' })).status).toBe(303);
    expect(await owners(ws)).toEqual(['alice@example.com']);
  });

  it('an owner removes bob: his pages of the workspace are then 404', async () => {
    const bobId = await userId('bob@example.com');
    await alice.client.get(members(ws));
    const removed = await alice.client.post(`/w/${ws}/settings/members/${bobId}/remove`);
    expect(removed.status).toBe(303);
    expect(textOf((await alice.client.follow(removed)).html)).toContain("Bob Member is removed from Alice Owner's workspace.");
    expect(await roleOf(ws, 'bob@example.com')).toBeNull();
    expect((await bob.get(`/w/${ws}`)).status).toBe(404);
    expect((await bob.get(members(ws))).status).toBe(404);
    // Removing again: no such member.
    expect((await alice.client.post(`/w/${ws}/settings/members/${bobId}/remove`)).status).toBe(404);
  });

  it('a revoked invitation link shows the invalid page', async () => {
    const { token } = await invite(alice.client, ws, 'dave@example.com', 'admin');
    expect((await new DashboardClient(t.baseUrl).get(`/invitations/${token}`)).status).toBe(200);
    const [{ id }]: { id: string }[] = await db.query(
      `SELECT id FROM invitations WHERE workspace_id = $1 AND email = 'dave@example.com' AND revoked_at IS NULL`,
      [ws],
    );
    const revoked = await alice.client.post(`/w/${ws}/settings/invitations/${id}/revoke`);
    expect(revoked.status).toBe(303);
    const after = await alice.client.follow(revoked);
    expect(textOf(after.html)).toContain('The invitation to dave@example.com is revoked');
    expect(after.html).not.toContain(`/invitations/${id}/revoke`);
    const rows: { revoked_at: Date | null }[] = await db.query(`SELECT revoked_at FROM invitations WHERE id = $1`, [id]);
    expect(rows[0].revoked_at).not.toBeNull();

    const dave = new DashboardClient(t.baseUrl);
    const page = await dave.get(`/invitations/${token}`);
    expect(page.status).toBe(400);
    expect(textOf(page.html)).toContain('Invitation not valid');
    expect((await dave.get(`/signup?invitation=${token}`)).status).toBe(400);
  });

  it('an invitation link works once', async () => {
    const { token } = await invite(alice.client, ws, 'erin@example.com', 'member');
    const first = await signUpInvited(token, 'erin@example.com', 'Erin');
    expect(first.response.status).toBe(303);
    expect(await roleOf(ws, 'erin@example.com')).toBe('member');

    const other = new DashboardClient(t.baseUrl);
    const page = await other.get(`/invitations/${token}`);
    expect(page.status).toBe(400);
    expect(textOf(page.html)).toContain('This invitation is invalid, used, revoked or expired');
    await other.get('/signup');
    const second = await other.post('/signup', { name: 'Eve', email: 'eve@example.com', password: PASSWORD, invitation: token });
    expect(second.status).toBe(400);
    expect(await db.query(`SELECT id FROM users WHERE email = 'eve@example.com'`)).toEqual([]);
    // Signed in, accepting a used link is refused too.
    await first.client.get(`/w/${ws}`);
    const again = await first.client.post(`/invitations/${token}/accept`);
    expect(again.status).toBe(400);
  });

  describe('with a second workspace', () => {
    let frank: SignedUpPerson;
    let frankInvitationId: string;

    beforeAll(async () => {
      frank = await signUp(t.baseUrl, { email: 'frank@example.com', name: 'Frank Other' });
      await invite(frank.client, frank.workspaceId, 'grace@example.com', 'member');
      const rows: { id: string }[] = await db.query(`SELECT id FROM invitations WHERE workspace_id = $1`, [frank.workspaceId]);
      frankInvitationId = rows[0].id;
    });

    it("ids of another workspace's invitations and members in the URL are 404, and nothing changes", async () => {
      const frankId = await userId('frank@example.com');
      await alice.client.get(members(ws));
      expect((await alice.client.post(`/w/${ws}/settings/invitations/${frankInvitationId}/revoke`)).status).toBe(404);
      expect((await alice.client.post(`/w/${ws}/settings/invitations/${randomUUID()}/revoke`)).status).toBe(404);
      expect((await alice.client.post(`/w/${ws}/settings/invitations/not-a-uuid/revoke`)).status).toBe(404);
      expect((await alice.client.post(`/w/${ws}/settings/members/${frankId}/role`, { role: 'member' })).status).toBe(404);
      expect((await alice.client.post(`/w/${ws}/settings/members/${frankId}/remove`)).status).toBe(404);
      expect((await alice.client.post(`/w/${ws}/settings/members/not-a-uuid/remove`)).status).toBe(404);
      const rows: { revoked_at: Date | null }[] = await db.query(`SELECT revoked_at FROM invitations WHERE id = $1`, [frankInvitationId]);
      expect(rows[0].revoked_at).toBeNull();
      expect(await roleOf(frank.workspaceId, 'frank@example.com')).toBe('owner');
    });

    it('a workspace one does not belong to is 404, the same as one that does not exist', async () => {
      const html = { headers: { accept: 'text/html' } };
      for (const suffix of ['/settings/members', '/settings']) {
        const pages = new Set<string>();
        for (const id of [ws, randomUUID(), 'not-a-uuid']) {
          const answer = await frank.client.get(`/w/${id}${suffix}`, html);
          expect(answer.status).toBe(404);
          pages.add(textOf(answer.html).split(id).join('<id>'));
        }
        expect(pages.size).toBe(1);
        expect([...pages][0]).toContain('Page not found');
      }
      // Posting to it is 404 too, not 403: its existence is not given away.
      await frank.client.get(members(frank.workspaceId));
      expect((await frank.client.post(`/w/${ws}/settings/invitations`, { email: 'x@example.com', role: 'member' })).status).toBe(404);
      expect((await frank.client.post(`/w/${ws}/leave`)).status).toBe(404);
    });

    it('a signed-in person accepts an invitation with the button, once', async () => {
      const { token } = await invite(alice.client, ws, 'frank@example.com', 'admin');
      // An invitation is accepted by an account with the invited address, verified (test/account-safety covers refusals).
      const verification = mail.logged.filter((m) => m.to === 'frank@example.com' && /verify/i.test(m.subject)).at(-1)!;
      expect((await frank.client.get(new URL(verification.link!).pathname)).status).toBe(303);
      const page = await frank.client.get(`/invitations/${token}`);
      expect(page.status).toBe(200);
      expect(page.html).toContain(`action="/invitations/${token}/accept"`);
      expect(textOf(page.html)).toContain("Join Alice Owner's workspace");
      expect(page.html).not.toContain('Create an account</a>');

      const accepted = await frank.client.post(`/invitations/${token}/accept`);
      expect(accepted.status).toBe(303);
      expect(accepted.location).toBe(`/w/${ws}`);
      expect(textOf((await frank.client.follow(accepted)).html)).toContain("You joined Alice Owner's workspace; your role is admin.");
      expect(await roleOf(ws, 'frank@example.com')).toBe('admin');
      expect(await roleOf(frank.workspaceId, 'frank@example.com')).toBe('owner');
      expect((await frank.client.post(`/invitations/${token}/accept`)).status).toBe(400);
    });

    it('inviting a member says so, and makes no invitation', async () => {
      await alice.client.get(members(ws));
      const before = await db.query(`SELECT count(*)::int AS n FROM invitations WHERE workspace_id = $1`, [ws]);
      const response = await alice.client.post(`/w/${ws}/settings/invitations`, { email: 'Frank@example.com', role: 'member' });
      expect(response.status).toBe(409);
      expect(textOf(response.html)).toContain('frank@example.com is already a member of this workspace (admin)');
      expect(response.html).toContain('aria-invalid="true" aria-describedby="invite-email-error"');
      expect(await db.query(`SELECT count(*)::int AS n FROM invitations WHERE workspace_id = $1`, [ws])).toEqual(before);

      const invalid = await alice.client.post(`/w/${ws}/settings/invitations`, { email: 'not an address', role: 'member' });
      expect(invalid.status).toBe(400);
      const badRole = await alice.client.post(`/w/${ws}/settings/invitations`, { email: 'h@example.com', role: 'superuser' });
      expect(badRole.status).toBe(400);
      expect(await db.query(`SELECT count(*)::int AS n FROM invitations WHERE workspace_id = $1`, [ws])).toEqual(before);
    });

    it('a newer invitation to the same address replaces the pending one', async () => {
      const first = await invite(alice.client, ws, 'ivan@example.com', 'member');
      const second = await invite(alice.client, ws, 'ivan@example.com', 'admin');
      expect(textOf(second.page.html)).toContain('The earlier invitation to this address no longer works.');
      expect((await new DashboardClient(t.baseUrl).get(`/invitations/${first.token}`)).status).toBe(400);
      expect((await new DashboardClient(t.baseUrl).get(`/invitations/${second.token}`)).status).toBe(200);
    });

    it('Settings > General: tier and limits read-only, rename by owners only, leaving', async () => {
      const page = await frank.client.get(`/w/${ws}/settings`);
      expect(page.status).toBe(200);
      const text = textOf(page.html);
      expect(text).toContain('Tier: free');
      expect(text).toContain('Requests per minute 5');
      expect(text).toContain('Assistants 1');
      expect(text).toContain('Tier changes are made by the operator');
      expect(page.html).toContain(`<code id="workspace-id" class="secret">${ws}</code>`);
      expect(page.html).not.toContain('name="name"');
      expect(page.html).toContain(`action="/w/${ws}/leave"`);
      expect((await frank.client.post(`/w/${ws}/settings`, { name: 'Frank was here' })).status).toBe(403);

      // The operator's enterprise rate of its own is the one shown.
      await db.query(`UPDATE workspaces SET tier = 'enterprise', custom_rate_limit_rpm = 1234 WHERE id = $1`, [ws]);
      const enterprise = textOf((await frank.client.get(`/w/${ws}/settings`)).html);
      expect(enterprise).toContain('Requests per minute 1,234 (a rate of its own)');
      expect(enterprise).toContain('Assistants No limit');
      await db.query(`UPDATE workspaces SET tier = 'free', custom_rate_limit_rpm = NULL WHERE id = $1`, [ws]);

      await alice.client.get(`/w/${ws}/settings`);
      const empty = await alice.client.post(`/w/${ws}/settings`, { name: '   ' });
      expect(empty.status).toBe(400);
      expect(textOf(empty.html)).toContain('Enter a name for the workspace.');
      const renamed = await alice.client.post(`/w/${ws}/settings`, { name: '  Acme   Team ' });
      expect(renamed.status).toBe(303);
      expect(await db.query(`SELECT name FROM workspaces WHERE id = $1`, [ws])).toEqual([{ name: 'Acme Team' }]);

      // Frank leaves: an admin, not the last owner.
      const left = await frank.client.post(`/w/${ws}/leave`);
      expect(left.status).toBe(303);
      expect(await roleOf(ws, 'frank@example.com')).toBeNull();
      expect((await frank.client.get(`/w/${ws}`)).status).toBe(404);
    });
  });

  it('a new workspace: its creator is the owner, on the sign-up tier, with no key and no credit', async () => {
    const form = await alice.client.get('/workspaces/new');
    expect(form.status).toBe(200);
    const empty = await alice.client.post('/workspaces', { name: '' });
    expect(empty.status).toBe(400);
    expect(textOf(empty.html)).toContain('Enter a name for the workspace.');

    const created = await alice.client.post('/workspaces', { name: 'Side project' });
    expect(created.status).toBe(303);
    const id = created.location?.match(/^\/w\/([0-9a-f-]{36})$/)?.[1];
    expect(id).toBeDefined();
    expect(await roleOf(id!, 'alice@example.com')).toBe('owner');
    expect(await db.query(`SELECT name, tier FROM workspaces WHERE id = $1`, [id])).toEqual([{ name: 'Side project', tier: 'free' }]);
    expect(await db.query(`SELECT count(*)::int AS n FROM api_keys WHERE workspace_id = $1`, [id])).toEqual([{ n: 0 }]);
    const overview = await alice.client.follow(created);
    expect(overview.status).toBe(200);
    expect(textOf(overview.html)).toContain('Side project is created. You are its owner.');
    // The switcher lists both.
    expect(overview.html).toContain(`href="/w/${ws}"`);
    expect(overview.html).toContain(`href="/w/${id}"`);
  });
});

async function waitFor(condition: () => Promise<boolean>, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > deadline) throw new Error('Timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describeWithBrowser('Dashboard members pages in Chromium: accessible, usable at 360 px, no CSP errors', () => {
  let t: TestApp;
  let browser: Browser;

  beforeAll(async () => {
    t = await startTestApp();
    browser = await launchChromium();
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  /** Signs up in the browser; returns the page, signed in, on the new workspace's overview. */
  async function signUpIn(context: BrowserContext, name: string, email: string, invitationToken?: string): Promise<Page> {
    const page = await context.newPage();
    await page.goto(invitationToken ? `/signup?invitation=${invitationToken}` : '/signup');
    await page.getByLabel('Your name').fill(name);
    if (!invitationToken) await page.getByLabel('Email').fill(email);
    await page.getByLabel('Password').fill(PASSWORD);
    await page.getByRole('button', { name: 'Create account' }).click();
    await page.waitForURL(/\/w\/[0-9a-f-]{36}$/);
    return page;
  }

  async function check(page: Page, what: string, problems: PageProblem[]): Promise<void> {
    await expectAccessible(page, what);
    expect(problems).toEqual([]);
    await page.setViewportSize({ width: 360, height: 740 });
    // A string, as tsconfig has no DOM types: how far the page is wider than the screen.
    const overflow = await page.evaluate<number>('document.documentElement.scrollWidth - document.documentElement.clientWidth');
    expect(`${what}: ${overflow}px wider than the screen`).toBe(`${what}: 0px wider than the screen`);
    await page.setViewportSize({ width: 1280, height: 800 });
  }

  it('settings, members (owner and member views), invitation and new-workspace pages', async () => {
    const ownerContext = await newContext(browser, t.baseUrl);
    const owner = await signUpIn(ownerContext, 'Olga Owner', 'olga@example.com');
    const problems = collectConsoleErrors(owner);
    const workspaceId = owner.url().match(/\/w\/([0-9a-f-]{36})$/)![1];

    await owner.goto(`/w/${workspaceId}/settings`);
    await check(owner, 'Settings > General (sole owner)', problems);

    await owner.goto(`/w/${workspaceId}/settings/members`);
    await owner.getByLabel('Email').fill('mia@example.com');
    await owner.getByLabel('Role', { exact: true }).selectOption('member');
    // Posted from the members page, answered by it again: wait for the next page load, not for the URL.
    await Promise.all([owner.waitForEvent('load'), owner.getByRole('button', { name: 'Create invitation link' }).click()]);
    const link = (await owner.locator('#invitation-link').textContent())!.trim();
    expect(link).toMatch(/\/invitations\/[A-Za-z0-9_-]{43}$/);
    await check(owner, 'Settings > Members (owner, with the link to copy)', problems);

    // Signed out, the invitation page; then sign-up through it.
    const memberContext = await newContext(browser, t.baseUrl);
    const stranger = await memberContext.newPage();
    const strangerProblems = collectConsoleErrors(stranger);
    await stranger.goto(link);
    await check(stranger, 'Invitation (signed out)', strangerProblems);
    // (a link styled as a button; the header's "Create an account" is the plain sign-up)
    await stranger.getByRole('button', { name: 'Create an account' }).click();
    await stranger.waitForURL(/\/signup\?invitation=/);
    expect(await stranger.getByText('You were invited to join').count()).toBe(1);
    await stranger.getByLabel('Your name').fill('Mia Member');
    await stranger.getByLabel('Password').fill(PASSWORD);
    await stranger.getByRole('button', { name: 'Create account' }).click();
    await stranger.waitForURL(`**/w/${workspaceId}`);

    await stranger.goto(`/w/${workspaceId}/settings/members`);
    await check(stranger, 'Settings > Members (member)', strangerProblems);
    expect(await stranger.getByRole('button', { name: /Revoke|Remove|Save role/ }).count()).toBe(0);
    await stranger.goto(`/w/${workspaceId}/settings`);
    await check(stranger, 'Settings > General (member)', strangerProblems);

    // Signed in with another address, an invitation says whom it is for, and offers to sign out instead of a Join button.
    await owner.goto(`/w/${workspaceId}/settings/members`);
    await owner.getByLabel('Email').fill('mia.second@example.com');
    // Posted from the members page, answered by it again: wait for the next page load, not for the URL.
    await Promise.all([owner.waitForEvent('load'), owner.getByRole('button', { name: 'Create invitation link' }).click()]);
    const second = (await owner.locator('#invitation-link').textContent())!.trim();
    await check(owner, 'Settings > Members (owner, two members, one pending)', problems);
    await stranger.goto(second);
    await check(stranger, 'Invitation (signed in with another address)', strangerProblems);
    expect(await stranger.getByRole('button', { name: /^Join / }).count()).toBe(0);
    expect(await stranger.getByRole('button', { name: 'Sign out' }).count()).toBeGreaterThan(0);

    await owner.goto('/workspaces/new');
    await check(owner, 'New workspace', problems);
    await owner.getByLabel('Name').fill('Second one');
    await owner.getByRole('button', { name: 'Create workspace' }).click();
    await owner.waitForURL(/\/w\/[0-9a-f-]{36}$/);
    expect(owner.url()).not.toContain(workspaceId);

    await ownerContext.close();
    await memberContext.close();
  }, 120_000);
});
