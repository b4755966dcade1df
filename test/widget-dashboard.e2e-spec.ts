import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { startTestApp, TestApp } from './support/test-app';

/**
 * The widget's page in the assistant editor, over HTTP: settings saved and refused with
 * their messages, the embed tag with the public id (never the assistant's uuid nor a key),
 * roles, and other workspaces' assistants.
 */
describe('dashboard: widget page', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let assistantId: string;
  let page: string;

  beforeAll(async () => {
    t = await startTestApp();
    owner = await signUp(t.baseUrl, { email: 'wanda@example.com', name: 'Wanda Widget' });
    assistantId = (await t.app.get(AssistantsService).create(owner.workspaceId, { name: 'Front desk', model: 'gpt-4o-mini' })).id;
    page = `/w/${owner.workspaceId}/assistants/${assistantId}/widget`;
  });
  afterAll(async () => {
    await t?.close();
  });

  const settings = (fields: Record<string, string> = {}) => ({
    enabled: 'on',
    allowed_origins: 'https://www.example.com\nhttp://localhost:8080/',
    title: 'Front desk',
    greeting: 'Hi, ask me anything.',
    placeholder: 'Your question',
    accent_color: '#aa3300',
    theme: 'dark',
    position: 'bottom-left',
    daily_cap: '12.50',
    history_messages: '4',
    max_answer_tokens: '800',
    ...fields,
  });

  it('links the widget page from the assistant editor, and shows it not set up yet', async () => {
    const editor = await owner.client.get(`/w/${owner.workspaceId}/assistants/${assistantId}`);
    expect(editor.html).toContain(`href="/w/${owner.workspaceId}/assistants/${assistantId}/widget"`);
    const first = await owner.client.get(page);
    expect(first.status).toBe(200);
    expect(textOf(first.html)).toContain('Not set up yet');
    expect(first.html).not.toContain('id="embed-tag"');
    // The preview is the real script, from this origin (the CSP allows 'self' only).
    expect(first.html).toContain('<script src="/widget.js" data-preview="widget-preview" defer></script>');
  });

  it('refuses enabling without an origin, and origins that are not exact, with the field\'s message', async () => {
    const none = await owner.client.post(page, settings({ allowed_origins: '' }));
    expect(none.status).toBe(400);
    expect(none.html).toContain('id="widget-allowedOrigins-error"');
    expect(textOf(none.html)).toContain('Add the origin of at least one website before enabling the widget.');
    const path = await owner.client.post(page, settings({ allowed_origins: 'https://www.example.com/shop', accent_color: 'blue' }));
    expect(path.status).toBe(400);
    expect(textOf(path.html)).toContain('"https://www.example.com/shop" is not an origin');
    expect(path.html).toContain('id="widget-accentColor-error"');
    // What was typed comes back in the form.
    expect(path.html).toContain('https://www.example.com/shop</textarea>');
    const [{ count }] = await t.app.get(DataSource).query(`SELECT count(*)::int AS count FROM widgets`);
    expect(count).toBe(0);
  });

  it('saves the settings and shows the embed tag with the public id, never the assistant id or a key', async () => {
    const saved = await owner.client.post(page, settings());
    expect(saved.status).toBe(303);
    const shown = await owner.client.follow(saved);
    expect(textOf(shown.html)).toContain('Saved: the widget answers on https://www.example.com, http://localhost:8080.');
    const [row] = await t.app.get(DataSource).query(`SELECT * FROM widgets WHERE assistant_id = $1`, [assistantId]);
    expect(row).toMatchObject({ enabled: true, allowed_origins: ['https://www.example.com', 'http://localhost:8080'], accent_color: '#aa3300', theme: 'dark', position: 'bottom-left' });
    // The spending settings: the cap typed in dollars is kept in millicents, and shown with today's spending.
    expect(row).toMatchObject({ daily_cap_millicents: '1250000', history_messages: 4, max_answer_tokens: 800, show_sources: false });
    expect(textOf(shown.html)).toContain('Spent today (UTC): $0.00 of $12.50.');
    expect(shown.html).toContain('name="daily_cap" inputmode="decimal" required value="12.50"');
    expect(shown.html).not.toContain('id="widget-cap-reached"');
    expect(row.public_id).toMatch(/^wgt_[A-Za-z0-9_-]{20}$/);
    expect(shown.html).toContain(`&lt;script src=&quot;${t.baseUrl}/widget.js&quot; data-widget=&quot;${row.public_id}&quot; async&gt;&lt;/script&gt;`);
    expect(shown.html.match(/id="embed-tag">([^<]*)</)![1]).not.toContain(assistantId);
    expect(shown.html).not.toMatch(/sk-[A-Za-z0-9_-]{20,}/);
    // Saving again keeps the public id: embedded tags go on working.
    await owner.client.post(page, settings({ enabled: '', title: 'Desk' }));
    const [again] = await t.app.get(DataSource).query(`SELECT public_id, enabled, title FROM widgets WHERE assistant_id = $1`, [assistantId]);
    expect(again).toEqual({ public_id: row.public_id, enabled: false, title: 'Desk' });
    // Showing the answers' sources is the owner's choice, off until the switch is on.
    await owner.client.post(page, settings({ show_sources: 'on' }));
    const [shows] = await t.app.get(DataSource).query(`SELECT show_sources FROM widgets WHERE assistant_id = $1`, [assistantId]);
    expect(shows).toEqual({ show_sources: true });
    expect((await owner.client.get(page)).html).toMatch(/name="show_sources" checked/);
  });

  it('lets a member read the settings but not change them; other workspaces get 404', async () => {
    const [{ id: ownerId }] = await t.app.get(DataSource).query('SELECT id FROM users WHERE email = $1', ['wanda@example.com']);
    const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'max@example.com', 'member', ownerId);
    const member = await signUp(t.baseUrl, { email: 'max@example.com', name: 'Max Member', invitation: invitation.token });
    const read = await member.client.get(page);
    expect(read.status).toBe(200);
    expect(read.html).toContain('id="read-only-note"');
    expect(read.html).not.toContain('id="save-widget"');
    expect((await member.client.post(page, settings())).status).toBe(403);

    const stranger = await signUp(t.baseUrl, { email: 'sam@example.com', name: 'Sam Stranger' });
    expect((await stranger.client.get(`/w/${stranger.workspaceId}/assistants/${assistantId}/widget`)).status).toBe(404);
    expect((await stranger.client.get(page)).status).toBe(404);
  });
});
