import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { MembersService } from '../src/accounts/members.service';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentIngestion } from '../src/assistants/documents/document-ingestion';
import { MAX_FILE_BYTES } from '../src/assistants/documents/document-limits';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { WalletService } from '../src/wallet/wallet.service';
import { ApiKeysService } from '../src/workspaces/api-keys.service';
import { WorkspacesService } from '../src/workspaces/workspaces.service';
import { BROWSER_ACCEPT, DashboardClient, DashboardResponse, signUp, SignedUpPerson, textOf } from './support/dashboard-client';
import { makeDocx, makePdf, makeScannedPdf } from './support/document-files';
import { startTestApp, testConfig, TestApp } from './support/test-app';

jest.setTimeout(60_000);

/**
 * The assistants' and documents' pages through HTTP, as a browser without JavaScript uses
 * them (and as assistants.js does, for uploads with a progress bar): create, edit and delete
 * with the service's own validation shown as form errors, the tier's maxAssistants under
 * concurrent creates, roles, and documents uploaded in several formats at once and read in
 * the background (ready, or failed with the reason), then found by file_search.
 */
describe('dashboard: assistants and documents', () => {
  let t: TestApp;
  let owner: SignedUpPerson;
  let ownerId: string;
  let base: string;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    owner = await signUp(t.baseUrl, { email: 'ada@example.com', name: 'Ada Admin' });
    base = `/w/${owner.workspaceId}/assistants`;
    [{ id: ownerId }] = (await db().query('SELECT id FROM users WHERE email = $1', ['ada@example.com'])) as { id: string }[];
    await t.app.get(WorkspacesService).setTier(owner.workspaceId, 'pro');
  });
  afterAll(async () => {
    await t?.app.get(DocumentIngestion).idle();
    await t?.close();
  });

  const db = () => t.app.get(DataSource);
  const assistants = () => t.app.get(AssistantsService);

  const validForm = (fields: Record<string, string> = {}): Record<string, string> => ({
    name: 'Support Bot',
    slug: '',
    description: 'Answers customers',
    system_prompt: 'You answer questions about our products, briefly.',
    model: 'gpt-4o-mini',
    temperature: '0.3',
    max_tokens: '',
    max_tool_iterations: '4',
    tool_file_search: 'on',
    ...fields,
  });

  /** Creates an assistant through the form; returns its id. */
  async function createAssistant(client: DashboardClient, path: string, fields: Record<string, string> = {}): Promise<string> {
    await client.get(`${path}/new`);
    const response = await client.post(path, validForm(fields));
    expect(response.status).toBe(303);
    return response.location!.match(/assistants\/([0-9a-f-]{36})$/)![1];
  }

  /** A multipart upload as the form (or, with `scripted`, assistants.js) sends it. */
  async function upload(
    client: DashboardClient,
    path: string,
    files: Array<{ name: string; data: Buffer | string; type?: string }>,
    options: { scripted?: boolean; csrf?: string | false } = {},
  ): Promise<DashboardResponse> {
    const form = new FormData();
    const token = options.csrf === undefined ? client.csrfToken : options.csrf;
    if (token) form.append('_csrf', token);
    for (const file of files) form.append('files', new Blob([file.data], { type: file.type ?? '' }), file.name);
    const headers: Record<string, string> = { accept: BROWSER_ACCEPT, cookie: [...client.cookies].map(([k, v]) => `${k}=${v}`).join('; ') };
    if (options.scripted) headers['x-requested-with'] = 'XMLHttpRequest';
    const response = await fetch(`${client.baseUrl}${path}`, { method: 'POST', body: form, headers, redirect: 'manual' });
    return { status: response.status, headers: response.headers, html: await response.text(), location: response.headers.get('location') };
  }

  /** Polls the documents fragment (as htmx does) until nothing is processing; returns the last fragment. */
  async function untilProcessed(client: DashboardClient, documentsPath: string): Promise<string> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      const fragment = await client.get(documentsPath, { headers: { 'hx-request': 'true' } });
      expect(fragment.status).toBe(200);
      if (!fragment.html.includes('data-status="processing"')) {
        expect(fragment.html).not.toContain('hx-trigger');
        return fragment.html;
      }
      expect(fragment.html).toContain('hx-trigger="every 2s"');
      if (Date.now() > deadline) throw new Error('documents still processing after 30 s');
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }

  function rowOf(html: string, id: string): string {
    const row = html.match(new RegExp(`<tr id="(?:document|assistant)-${id}"[\\s\\S]*?</tr>`));
    if (!row) throw new Error(`No row ${id}`);
    return textOf(row[0]);
  }

  describe('assistants', () => {
    it('an empty workspace says what to do next, with the count against the tier', async () => {
      const page = await owner.client.get(base);
      expect(page.status).toBe(200);
      const text = textOf(page.html);
      expect(text).toContain('No assistants yet');
      expect(text).toContain('0 of 10 assistants of the pro tier');
      expect(page.html).toContain(`href="${base}/new"`);
    });

    it('refuses a form with errors, each beside its field, and keeps what was typed', async () => {
      await owner.client.get(`${base}/new`);
      const response = await owner.client.post(base, validForm({ name: '  ', temperature: 'warm', max_tool_iterations: '', system_prompt: 'Kept <b>as typed</b>' }));
      expect(response.status).toBe(400);
      expect(response.html).toMatch(/id="assistant-name"[^>]*aria-invalid="true"/);
      expect(textOf(response.html)).toContain('Give the assistant a name.');
      expect(textOf(response.html)).toContain('temperature must be a number from 0 to 2');
      expect(textOf(response.html)).toContain('max_tool_iterations must be a whole number from 1 to 20.');
      expect(response.html).toContain('Kept &lt;b&gt;as typed&lt;/b&gt;');

      // Rules the service owns come back as field errors too.
      const badSlug = await owner.client.post(base, validForm({ slug: 'Not A Slug' }));
      expect(badSlug.status).toBe(400);
      expect(badSlug.html).toMatch(/id="assistant-slug"[^>]*aria-invalid="true"/);
      expect(textOf(badSlug.html)).toContain('slug must be lowercase letters and digits');
      const hot = await owner.client.post(base, validForm({ temperature: '2.5' }));
      expect(hot.status).toBe(400);
      expect(textOf(hot.html)).toContain('temperature must be a number from 0 to 2.');
      const unknownModel = await owner.client.post(base, validForm({ model: 'gpt-9' }));
      expect(unknownModel.status).toBe(400);
      expect(textOf(unknownModel.html)).toContain('Choose one of the models of the list.');
      expect(await assistants().list(owner.workspaceId)).toEqual([]);
    });

    it('shows the catalog with context length and prices', async () => {
      const page = await owner.client.get(`${base}/new`);
      expect(textOf(page.html)).toContain('gpt-4o-mini · 128K context · $0.15 / $0.60');
      expect(textOf(page.html)).toContain('gemini-2.5-pro · 1M context · $1.25 / $10.00');
      expect(textOf(page.html)).toContain('gpt-4o-mini 128,000 tokens $0.15 $0.60 yes');
      expect(page.html).toMatch(/<option value="gpt-4o-mini" selected>/);
    });

    it('creates an assistant (slug made from the name), shows its ids and SDK snippets, and the SDK uses it', async () => {
      const id = await createAssistant(owner.client, base, { name: 'Support Bot (EU)' });
      const stored = await assistants().resolve(owner.workspaceId, id);
      expect(stored).toMatchObject({
        name: 'Support Bot (EU)',
        slug: 'support-bot-eu',
        description: 'Answers customers',
        systemPrompt: 'You answer questions about our products, briefly.',
        model: 'gpt-4o-mini',
        temperature: 0.3,
        maxTokens: null,
        maxToolIterations: 4,
        tools: [{ type: 'file_search' }],
      });

      const page = await owner.client.get(`${base}/${id}`);
      expect(page.status).toBe(200);
      expect(textOf(page.html)).toContain('The assistant "Support Bot (EU)" is created: call it with assistant_id "support-bot-eu".');
      expect(page.html).toContain(`<code id="assistant-uuid">${id}</code>`);
      expect(page.html).toContain('<code id="assistant-slug-value">support-bot-eu</code>');
      expect(page.html).toContain(`baseURL: '${t.baseUrl}/v1'`);
      expect(page.html).toContain("assistant_id: 'support-bot-eu'");
      expect(page.html).toContain(`base_url="${t.baseUrl}/v1"`);
      expect(textOf(page.html)).toContain('No documents yet.');

      const list = await owner.client.get(base);
      expect(rowOf(list.html, id)).toBe('Support Bot (EU) Answers customers support-bot-eu gpt-4o-mini file_search 0');
      expect(textOf(list.html)).toContain('1 of 10 assistants of the pro tier');

      // Another workspace's key does not reach it: assistants are per workspace.
      const other = await t.createWorkspace();
      await expect(
        other.client.chat.completions.create({ assistant_id: 'support-bot-eu', messages: [{ role: 'user', content: 'Hi' }] } as never),
      ).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    });

    it('edits an assistant: tools, slug and numbers; a slug taken by another is a field error', async () => {
      const id = await createAssistant(owner.client, base, { name: 'Editable', slug: 'editable' });
      await createAssistant(owner.client, base, { name: 'Other', slug: 'taken-slug' });
      await owner.client.get(`${base}/${id}`);
      const saved = await owner.client.post(
        `${base}/${id}`,
        validForm({ name: 'Edited', slug: 'edited', tool_file_search: '', tool_web_search: 'on', temperature: '', max_tokens: '500', max_tool_iterations: '7' }),
      );
      expect(saved.status).toBe(303);
      expect(await assistants().resolve(owner.workspaceId, id)).toMatchObject({
        name: 'Edited',
        slug: 'edited',
        temperature: null,
        maxTokens: 500,
        maxToolIterations: 7,
        tools: [{ type: 'file_search' }, { type: 'web_search' }],
      });
      const withoutFileSearch = validForm({ name: 'Edited', slug: 'edited' });
      delete withoutFileSearch.tool_file_search;
      expect((await owner.client.post(`${base}/${id}`, withoutFileSearch)).status).toBe(303);
      expect((await assistants().resolve(owner.workspaceId, id)).tools).toEqual([]);

      const clash = await owner.client.post(`${base}/${id}`, validForm({ name: 'Edited', slug: 'taken-slug' }));
      expect(clash.status).toBe(409);
      expect(clash.html).toMatch(/id="assistant-slug"[^>]*aria-invalid="true"/);
      expect(textOf(clash.html)).toContain("The slug 'taken-slug' is already used by another assistant of this workspace.");
      const empty = await owner.client.post(`${base}/${id}`, validForm({ name: 'Edited', slug: '' }));
      expect(empty.status).toBe(400);
      expect(textOf(empty.html)).toContain('An assistant needs a slug.');
      expect((await assistants().resolve(owner.workspaceId, id)).slug).toBe('edited');
    });

    it("sets file_search's options (count, score threshold, filters), shows them again, and shows a bad one beside its field", async () => {
      const id = await createAssistant(owner.client, base, { name: 'Options', slug: 'options' });
      await owner.client.get(`${base}/${id}`);
      const filters = { type: 'or', filters: [{ type: 'eq', key: 'type', value: 'pdf' }, { type: 'gte', key: 'uploaded_at', value: 1767225600 }] };
      const options = { file_search_max_num_results: '12', file_search_score_threshold: '0.4', file_search_filters: JSON.stringify(filters) };
      expect((await owner.client.post(`${base}/${id}`, validForm({ name: 'Options', slug: 'options', ...options }))).status).toBe(303);
      expect((await assistants().resolve(owner.workspaceId, id)).tools).toEqual([
        { type: 'file_search', max_num_results: 12, ranking_options: { score_threshold: 0.4 }, filters },
      ]);
      const page = await owner.client.get(`${base}/${id}`);
      expect(page.html).toMatch(/name="file_search_max_num_results"[^>]*value="12"/);
      expect(page.html).toContain('&quot;uploaded_at&quot;');

      for (const [field, value, message] of [
        ['file_search_max_num_results', '60', 'max_num_results must be an integer from 1 to 50.'],
        ['file_search_score_threshold', '2', 'score_threshold must be a number from 0 to 1.'],
        ['file_search_filters', '{"type": "eq", "key": "colour", "value": "red"}', 'key must be one of'],
        ['file_search_filters', '{not json', 'The filters must be JSON'],
      ]) {
        const refused = await owner.client.post(`${base}/${id}`, validForm({ name: 'Options', slug: 'options', ...options, [field]: value }));
        expect(refused.status).toBe(400);
        expect(refused.html).toMatch(new RegExp(`name="${field}"[^>]*aria-invalid="true"`));
        expect(textOf(refused.html)).toContain(message);
      }
      // Emptied fields remove the options.
      const cleared = { file_search_max_num_results: '', file_search_score_threshold: '', file_search_filters: '' };
      expect((await owner.client.post(`${base}/${id}`, validForm({ name: 'Options', slug: 'options', ...cleared }))).status).toBe(303);
      expect((await assistants().resolve(owner.workspaceId, id)).tools).toEqual([{ type: 'file_search' }]);
    });

    it("chunk settings: saved from the editor, refused beside their field, and the editor says search is lexical-only", async () => {
      const id = await createAssistant(owner.client, base, { name: 'Chunks', slug: 'chunks' });
      expect(await assistants().resolve(owner.workspaceId, id)).toMatchObject({ chunkMaxTokens: 800, chunkOverlapTokens: 400 });
      const page = await owner.client.get(`${base}/${id}`);
      expect(page.html).toMatch(/id="assistant-chunk-max-tokens"[^>]*value="800"/);
      expect(textOf(page.html)).toContain('Lexical-only: no embedding model is set');

      const form = { name: 'Chunks', slug: 'chunks' };
      expect((await owner.client.post(`${base}/${id}`, validForm({ ...form, chunk_max_tokens: '300', chunk_overlap_tokens: '100' }))).status).toBe(303);
      expect(await assistants().resolve(owner.workspaceId, id)).toMatchObject({ chunkMaxTokens: 300, chunkOverlapTokens: 100 });

      const tooLarge = await owner.client.post(`${base}/${id}`, validForm({ ...form, chunk_max_tokens: '5000', chunk_overlap_tokens: '100' }));
      expect(tooLarge.status).toBe(400);
      expect(tooLarge.html).toMatch(/id="assistant-chunk-max-tokens"[^>]*aria-invalid="true"/);
      expect(textOf(tooLarge.html)).toContain('chunk_max_tokens must be a whole number from 100 to 4096.');
      const overlap = await owner.client.post(`${base}/${id}`, validForm({ ...form, chunk_max_tokens: '300', chunk_overlap_tokens: '151' }));
      expect(overlap.status).toBe(400);
      expect(overlap.html).toMatch(/id="assistant-chunk-overlap-tokens"[^>]*aria-invalid="true"/);
      expect(textOf(overlap.html)).toContain('chunk_overlap_tokens must be a whole number from 0 to half of chunk_max_tokens (150).');
      expect(await assistants().resolve(owner.workspaceId, id)).toMatchObject({ chunkMaxTokens: 300, chunkOverlapTokens: 100 });
    });

    it("chooses the embedding model of document search: lexical-only says so, a chat model is a field error, the workspace's applies", async () => {
      const id = await createAssistant(owner.client, base, { name: 'Searcher', slug: 'searcher' });
      const lexical = await owner.client.get(`${base}/${id}`);
      expect(lexical.html).toMatch(/data-search-mode="lexical"/);
      expect(textOf(lexical.html)).toContain('file_search is lexical only');

      const wrong = await owner.client.post(`${base}/${id}`, validForm({ name: 'Searcher', slug: 'searcher', embedding_model: 'gpt-4o-mini' }));
      expect(wrong.status).toBe(400);
      expect(wrong.html).toMatch(/id="assistant-embedding-model"[^>]*aria-invalid="true"/);
      expect((await assistants().resolve(owner.workspaceId, id)).embeddingModel).toBeNull();
      await owner.client.get(`${base}/${id}`);
      const saved = await owner.client.post(`${base}/${id}`, validForm({ name: 'Searcher', slug: 'searcher', embedding_model: 'text-embedding-3-small' }));
      expect(saved.status).toBe(303);
      expect((await assistants().resolve(owner.workspaceId, id)).embeddingModel).toBe('text-embedding-3-small');
      const hybrid = await owner.client.get(`${base}/${id}`);
      expect(hybrid.html).toMatch(/data-search-mode="hybrid"/);
      expect(hybrid.html).toMatch(/<option value="text-embedding-3-small" selected>/);

      // The workspace's model applies to the assistants that name none.
      const settings = `/w/${owner.workspaceId}/settings`;
      await owner.client.get(settings);
      const refused = await owner.client.post(`${settings}/embedding-model`, { embedding_model: 'gpt-4o-mini' });
      expect(refused.status).toBe(400);
      expect(textOf(refused.html)).toContain('gpt-4o-mini is a chat model');
      await owner.client.get(settings);
      expect((await owner.client.post(`${settings}/embedding-model`, { embedding_model: 'text-embedding-3-large' })).status).toBe(303);
      const other = await createAssistant(owner.client, base, { name: 'Follower', slug: 'follower' });
      const following = await owner.client.get(`${base}/${other}`);
      expect(following.html).toMatch(/data-search-mode="hybrid"/);
      expect(textOf(following.html)).toContain("The workspace's: hybrid with text-embedding-3-large");
      await owner.client.get(settings);
      expect((await owner.client.post(`${settings}/embedding-model`, { embedding_model: '' })).status).toBe(303);
      expect((await owner.client.get(`${base}/${other}`)).html).toMatch(/data-search-mode="lexical"/);
    });

    it('deletes after a confirmation page; the assistant is then unknown to pages and API', async () => {
      const id = await createAssistant(owner.client, base, { name: 'Doomed', slug: 'doomed' });
      const confirm = await owner.client.get(`${base}/${id}/delete`);
      expect(confirm.status).toBe(200);
      expect(textOf(confirm.html)).toContain('Delete the assistant “Doomed”?');
      const deleted = await owner.client.post(`${base}/${id}/delete`);
      expect(deleted.status).toBe(303);
      expect(deleted.location).toBe(base);
      const list = await owner.client.follow(deleted);
      expect(textOf(list.html)).toContain('The assistant "Doomed" and its documents are deleted');
      await expect(assistants().resolve(owner.workspaceId, id)).rejects.toMatchObject({ status: 404 });
      expect((await owner.client.get(`${base}/${id}`)).status).toBe(404);
      expect((await owner.client.post(`${base}/${id}/delete`)).status).toBe(404);
      expect((await owner.client.get(`${base}/not-a-uuid`)).status).toBe(404);
    });

    it('hobby allows 2: of 5 creates sent at once exactly 2 succeed, the others show the limit as a form error, never a 500', async () => {
      const hobbyist = await signUp(t.baseUrl, { email: 'hugo@example.com', name: 'Hugo Hobby' });
      await t.app.get(WorkspacesService).setTier(hobbyist.workspaceId, 'hobby');
      const path = `/w/${hobbyist.workspaceId}/assistants`;
      await hobbyist.client.get(`${path}/new`);
      const responses = await Promise.all(
        Array.from({ length: 5 }, (_, i) => hobbyist.client.post(path, validForm({ name: `Racer ${i}`, slug: `racer-${i}` }))),
      );
      const statuses = responses.map((response) => response.status).sort();
      expect(statuses).toEqual([303, 303, 403, 403, 403]);
      for (const refused of responses.filter((response) => response.status === 403)) {
        expect(refused.html).toContain('class="flash error" role="alert"');
        expect(textOf(refused.html)).toContain(
          'The hobby tier allows 2 assistants per workspace, and this workspace has 2. Upgrade the tier or delete an assistant.',
        );
      }
      expect(await assistants().list(hobbyist.workspaceId)).toHaveLength(2);

      const list = await hobbyist.client.get(path);
      expect(textOf(list.html)).toContain('2 of 2 assistants of the hobby tier. That is the limit');
      expect(list.html).not.toContain('id="new-assistant"');
      const form = await hobbyist.client.get(`${path}/new`);
      expect(textOf(form.html)).toContain('This workspace has 2 of 2 assistants');
    });
  });

  describe('roles', () => {
    let member: SignedUpPerson;
    let assistantId: string;

    beforeAll(async () => {
      assistantId = await createAssistant(owner.client, base, { name: 'Shared', slug: 'shared' });
      const invitation = await t.app.get(MembersService).invite(owner.workspaceId, 'mo@example.com', 'member', ownerId);
      member = await signUp(t.baseUrl, { email: 'mo@example.com', name: 'Mo Member', invitation: invitation.token });
    });

    it('a member sees the list and the settings, read-only, and can copy the ids', async () => {
      const list = await member.client.get(base);
      expect(list.status).toBe(200);
      expect(list.html).toContain('Shared');
      expect(list.html).not.toContain('id="new-assistant"');
      const page = await member.client.get(`${base}/${assistantId}`);
      expect(page.status).toBe(200);
      expect(page.html).toMatch(/<fieldset disabled>/);
      expect(page.html).toContain('id="read-only-note"');
      expect(page.html).toContain(`<code id="assistant-uuid">${assistantId}</code>`);
      expect(page.html).not.toContain('id="save-assistant"');
      expect(page.html).not.toContain('id="upload-form"');
      expect(page.html).not.toContain('id="delete-assistant"');
    });

    it('a member gets 403 for every change, and nothing changes', async () => {
      await member.client.get(base);
      expect((await member.client.get(`${base}/new`)).status).toBe(403);
      expect((await member.client.post(base, validForm({ name: 'Sneaky' }))).status).toBe(403);
      expect((await member.client.post(`${base}/${assistantId}`, validForm({ name: 'Renamed', slug: 'shared' }))).status).toBe(403);
      expect((await member.client.get(`${base}/${assistantId}/delete`)).status).toBe(403);
      expect((await member.client.post(`${base}/${assistantId}/delete`)).status).toBe(403);
      expect((await upload(member.client, `${base}/${assistantId}/documents`, [{ name: 'a.txt', data: 'hello there' }])).status).toBe(403);
      const stored = await assistants().resolve(owner.workspaceId, assistantId);
      expect(stored.name).toBe('Shared');
      expect(await t.app.get(DocumentsService).list(assistantId)).toEqual([]);
      expect((await assistants().list(owner.workspaceId)).map((a) => a.name)).not.toContain('Sneaky');
    });

    it('someone outside the workspace gets 404, as for a workspace that does not exist', async () => {
      const stranger = await signUp(t.baseUrl, { email: 'sam@example.com', name: 'Sam Stranger' });
      expect((await stranger.client.get(base)).status).toBe(404);
      expect((await stranger.client.get(`${base}/${assistantId}`)).status).toBe(404);
      expect((await upload(stranger.client, `${base}/${assistantId}/documents`, [{ name: 'a.txt', data: 'x' }])).status).toBe(404);
    });
  });

  describe('documents', () => {
    let assistantId: string;
    let docsPath: string;
    const pdfFact = 'The staff parking code for the north garage is 7351.';

    beforeAll(async () => {
      assistantId = await createAssistant(owner.client, base, { name: 'Handbook', slug: 'handbook' });
      docsPath = `${base}/${assistantId}/documents`;
    });

    it('uploads several formats at once: each is read in the background, ready with its chunks, or failed with the reason', async () => {
      await owner.client.get(`${base}/${assistantId}`);
      const response = await upload(owner.client, docsPath, [
        { name: 'handbook.pdf', data: await makePdf([['Welcome to the company handbook.', pdfFact]]), type: 'application/pdf' },
        { name: 'benefits.docx', data: await makeDocx(['Employees get 30 days of paid leave a year.']) },
        { name: 'faq.md', data: '# FAQ\n\nThe office opens at 8 in the morning.' },
        { name: 'hours.txt', data: 'Support answers from 9 to 17.' },
        { name: 'page.html', data: '<html><body><h1>Menu</h1><p>Soup of the day: lentils.</p></body></html>' },
        { name: 'scan.pdf', data: await makeScannedPdf(), type: 'application/pdf' },
        { name: 'tool.exe', data: 'MZ binary' },
      ]);
      expect(response.status).toBe(303);
      expect(response.location).toBe(`${base}/${assistantId}#documents`);
      const page = await owner.client.follow(response);
      const text = textOf(page.html);
      expect(text).toContain('Uploaded handbook.pdf, benefits.docx, faq.md, hours.txt, page.html, scan.pdf: they are being read');
      expect(text).toContain('Unsupported file type ".exe" (tool.exe).');

      const fragment = await untilProcessed(owner.client, docsPath);
      const documents = await t.app.get(DocumentsService).list(assistantId);
      expect(documents.map((d) => [d.name, d.status])).toEqual([
        ['handbook.pdf', 'ready'],
        ['benefits.docx', 'ready'],
        ['faq.md', 'ready'],
        ['hours.txt', 'ready'],
        ['page.html', 'ready'],
        ['scan.pdf', 'failed'],
      ]);
      for (const document of documents.filter((d) => d.status === 'ready')) {
        expect(document.chunkCount).toBeGreaterThan(0);
        // Chunks, with the size / overlap they were split with, then the language they are indexed in.
        expect(rowOf(fragment, document.id)).toMatch(new RegExp(`${document.chunkCount} \\(800 / 400\\) [a-z]+ Ready`));
      }
      const scan = documents.find((d) => d.name === 'scan.pdf')!;
      expect(scan.chunkCount).toBe(0);
      expect(rowOf(fragment, scan.id)).toContain(
        'Failed: No text found in scan.pdf: it looks like a scanned PDF (pictures of pages, no text layer). Scanned PDFs need OCR',
      );
      // The list of assistants counts them (the failed one too: it is listed until deleted).
      expect(rowOf((await owner.client.get(base)).html, assistantId)).toMatch(/ 6$/);
      // The stored files are dropped once read.
      const [{ kept }] = (await db().query('SELECT count(*)::int AS kept FROM documents WHERE assistant_id = $1 AND upload IS NOT NULL', [assistantId])) as { kept: number }[];
      expect(kept).toBe(0);

    });

    it('the assistant finds the PDF-only fact with file_search, through the OpenAI SDK', async () => {
      // A key of the owner's workspace and some credit (sign-up gives none); the simulator calls file_search when asked to.
      const { apiKey } = await t.app.get(ApiKeysService).create(owner.workspaceId, 'dashboard test');
      await t.app.get(WalletService).credit({ workspaceId: owner.workspaceId, amountMillicents: 1_000_000, type: 'topup', idempotencyKey: 'dashboard-assistants-test' });
      const client = new OpenAI({ baseURL: `${t.baseUrl}/v1`, apiKey, maxRetries: 0 });
      const completion = (await client.chat.completions.create({
        assistant_id: 'handbook',
        messages: [{ role: 'user', content: 'Use file_search: what is the staff parking code for the north garage?' }],
      } as never)) as OpenAI.Chat.ChatCompletion & { x_service: { tools_used: string[] } };
      expect(completion.x_service.tools_used).toEqual(['file_search']);
      expect(completion.choices[0].message.content).toContain('7351');
      expect(completion.choices[0].message.content).toContain('handbook.pdf');
    });

    it('the list polls while a document is processing; one left by a stopped process is taken up by the sweep', async () => {
      // A document stored as an upload would be, whose reader then stopped (no ingestion started).
      const documents = t.app.get(DocumentsService);
      const stranded = await documents.enqueue({ workspaceId: owner.workspaceId, assistantId, fileName: 'late.txt', data: Buffer.from('The late shift ends at midnight.') });
      const polling = await owner.client.get(docsPath, { headers: { 'hx-request': 'true' } });
      expect(polling.html).toContain(`hx-get="${docsPath}" hx-trigger="every 2s" hx-swap="outerHTML"`);
      expect(rowOf(polling.html, stranded.id)).toContain('Processing…');
      // Opened as a page (not by htmx), the fragment's address leads to the editor.
      const opened = await owner.client.get(docsPath);
      expect(opened.status).toBe(303);
      expect(opened.location).toBe(`${base}/${assistantId}#documents`);

      const ingestion = t.app.get(DocumentIngestion);
      expect(await ingestion.sweep()).toBe(0); // its lease still runs: someone is reading it
      await db().query(`UPDATE documents SET ingestion_lease_until = now() - interval '1 second' WHERE id = $1`, [stranded.id]);
      expect(await ingestion.sweep()).toBe(1);
      expect(await documents.getInWorkspace(owner.workspaceId, stranded.id)).toMatchObject({ status: 'ready', chunkCount: 1 });
      await untilProcessed(owner.client, docsPath);
    });

    it('answers a scripted upload (assistants.js) with the panel; refused files are listed in it', async () => {
      await owner.client.get(`${base}/${assistantId}`);
      const ok = await upload(owner.client, docsPath, [{ name: 'notes.txt', data: 'Lunch is at noon.' }], { scripted: true });
      expect(ok.status).toBe(200);
      expect(ok.html.startsWith('<div id="documents-panel"')).toBe(true);
      expect(textOf(ok.html)).toContain('Uploaded notes.txt: it is being read');
      expect(ok.html).toContain('notes.txt');

      const refused = await upload(owner.client, docsPath, [{ name: 'empty.txt', data: '' }, { name: 'huge.txt', data: Buffer.alloc(MAX_FILE_BYTES + 1, 'a') }], { scripted: true });
      expect(refused.status).toBe(400);
      expect(textOf(refused.html)).toContain('empty.txt is empty.');
      expect(textOf(refused.html)).toContain('huge.txt is 20 MB; a document may be at most 20 MB.');

      const none = await upload(owner.client, docsPath, [], { scripted: true });
      expect(none.status).toBe(400);
      expect(textOf(none.html)).toContain('Choose one or more files to upload.');

      const tooMuch = await upload(owner.client, docsPath, Array.from({ length: 4 }, (_, i) => ({ name: `big-${i}.txt`, data: Buffer.alloc(MAX_FILE_BYTES - 10, 'b') })), { scripted: true });
      // Refused from its Content-Length, before its body is read (test/upload-authorisation covers the rest).
      expect(tooMuch.status).toBe(413);
      expect(textOf(tooMuch.html)).toContain('An upload may be at most 60 MB in all');
      await untilProcessed(owner.client, docsPath);
      const names = (await t.app.get(DocumentsService).list(assistantId)).map((d) => d.name);
      expect(names).toContain('notes.txt');
      expect(names.filter((name) => /^(empty|huge|big-\d)\.txt$/.test(name))).toEqual([]);
    });

    it('an upload without the CSRF token, or without a session, stores nothing', async () => {
      const before = (await t.app.get(DocumentsService).list(assistantId)).length;
      expect((await upload(owner.client, docsPath, [{ name: 'x.txt', data: 'x' }], { csrf: false })).status).toBe(403);
      const anonymous = await upload(new DashboardClient(t.baseUrl), docsPath, [{ name: 'x.txt', data: 'x' }], { csrf: false });
      expect([303, 403]).toContain(anonymous.status);
      expect((await t.app.get(DocumentsService).list(assistantId)).length).toBe(before);
    });

    it('re-indexes the documents with the chunk settings changed since their upload', async () => {
      const service = t.app.get(DocumentsService);
      const ready = (await service.list(assistantId)).filter((document) => document.status === 'ready');
      expect(ready.length).toBeGreaterThan(0);
      await assistants().update(assistantId, { chunkMaxTokens: 100, chunkOverlapTokens: 0 });
      const editor = await owner.client.get(`${base}/${assistantId}`);
      expect(textOf(editor.html)).toContain(`${ready.length} of ${ready.length} ready document`);
      expect(textOf(editor.html)).toContain("split with other chunk settings than the assistant's (100 / 0)");

      const fragment = await owner.client.post(`${docsPath}/reindex`, {}, { headers: { 'hx-request': 'true' } });
      expect(fragment.status).toBe(200);
      const after = (await service.list(assistantId)).filter((document) => document.status === 'ready');
      const chunks = after.reduce((sum, document) => sum + document.chunkCount, 0);
      expect(textOf(fragment.html)).toContain(`Re-indexed ${ready.length} document${ready.length === 1 ? '' : 's'} into ${chunks} chunks of at most 100 tokens (0 of overlap).`);
      expect(fragment.html).not.toContain('split with other chunk settings');
      for (const document of after) expect(document).toMatchObject({ chunkMaxTokens: 100, chunkOverlapTokens: 0 });
      const [{ longest }] = await db().query<Array<{ longest: number }>>(
        'SELECT max(tokens)::int AS longest FROM document_chunks WHERE assistant_id = $1',
        [assistantId],
      );
      expect(longest).toBeLessThanOrEqual(100);
      // A plain form gets a redirect.
      expect((await owner.client.post(`${docsPath}/reindex`)).status).toBe(303);
    });

    it('deletes a document, from htmx (the panel comes back) or a plain form (a redirect)', async () => {
      const [first, second] = await t.app.get(DocumentsService).list(assistantId);
      await owner.client.get(`${base}/${assistantId}`);
      const fragment = await owner.client.post(`${docsPath}/${first.id}/delete`, {}, { headers: { 'hx-request': 'true' } });
      expect(fragment.status).toBe(200);
      expect(textOf(fragment.html)).toContain(`Deleted ${first.name}`);
      expect(fragment.html).not.toContain(`id="document-${first.id}"`);
      const plain = await owner.client.post(`${docsPath}/${second.id}/delete`);
      expect(plain.status).toBe(303);
      const remaining = (await t.app.get(DocumentsService).list(assistantId)).map((d) => d.id);
      expect(remaining).not.toContain(first.id);
      expect(remaining).not.toContain(second.id);
      expect((await owner.client.post(`${docsPath}/${first.id}/delete`)).status).toBe(404);
    });

    it("the free tier's document limit refuses the files past it, naming the limit", async () => {
      const freeOwner = await signUp(t.baseUrl, { email: 'fay@example.com', name: 'Fay Free' });
      const path = `/w/${freeOwner.workspaceId}/assistants`;
      const id = await createAssistant(freeOwner.client, path, { name: 'Tiny', slug: 'tiny' });
      await freeOwner.client.get(`${path}/${id}`);
      const files = Array.from({ length: 6 }, (_, i) => ({ name: `doc-${i}.txt`, data: `Document number ${i}.` }));
      const response = await upload(freeOwner.client, `${path}/${id}/documents`, files, { scripted: true });
      expect(response.status).toBe(200);
      expect(textOf(response.html)).toContain('The free tier allows 5 documents per workspace, and this workspace has 5.');
      expect(await t.app.get(DocumentsService).list(id)).toHaveLength(5);
      await untilProcessed(freeOwner.client, `${path}/${id}/documents`);
    });
  });


  it("works under BASE_PATH: the form's CSRF token is read before the guard there too, and links carry the prefix", async () => {
    const prefixed = await startTestApp({ config: { llmSimulator: 'on', dashboard: { ...testConfig().dashboard, basePath: '/acs' } } });
    try {
      const person = await signUp(`${prefixed.baseUrl}/acs`, { email: 'bea@example.com', name: 'Bea Base' });
      const path = `/w/${person.workspaceId}/assistants`;
      await person.client.get(`${path}/new`);
      const created = await person.client.post(path, validForm({ name: 'Prefixed', slug: 'prefixed' }));
      expect(created.status).toBe(303);
      expect(created.location).toMatch(new RegExp(`^/acs${path}/[0-9a-f-]{36}$`));
      const editor = await person.client.follow(created);
      expect(editor.html).toContain(`action="/acs${path}/`);
      expect(editor.html).toContain(`${prefixed.baseUrl}/acs/v1`);
      const id = created.location!.split('/').pop()!;
      const uploaded = await upload(person.client, `${path}/${id}/documents`, [{ name: 'a.txt', data: 'Under a prefix.' }], { scripted: true });
      expect(uploaded.status).toBe(200);
      expect(uploaded.html).toContain(`action="/acs${path}/${id}/documents/`);
      await prefixed.app.get(DocumentIngestion).idle();
      expect((await prefixed.app.get(DocumentsService).list(id)).map((d) => [d.name, d.status])).toEqual([['a.txt', 'ready']]);
    } finally {
      await prefixed.close();
    }
  });
});
