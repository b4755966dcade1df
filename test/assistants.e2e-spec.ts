import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { ConversationStore } from '../src/conversations/conversation-store';
import { WalletService } from '../src/wallet/wallet.service';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, resultsScenario, startFakeSearch } from './fakes/fake-search';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/** gpt-4o-mini prices, millicents per million tokens. */
const MINI = { input: 15_000, output: 60_000 };
const WEB_SEARCH_PRICE = 1_000;
const FILE_SEARCH_PRICE = 100;

type Completion = OpenAI.Chat.ChatCompletion & {
  x_service: { cost_millicents: number; iterations: number; tools_used: string[]; generated_files: null; provider: string | null; deployment: string | null; attempts: number };
};

describe('assistants and the server-side tool loop (through the OpenAI SDK)', () => {
  let upstream: FakeOpenAi;
  let search: FakeSearch;
  let t: TestApp;
  let db: DataSource;
  let assistants: AssistantsService;

  beforeAll(async () => {
    upstream = await startFakeOpenAi();
    search = await startFakeSearch({ apiKey: 'tvly-test' });
    t = await startTestApp({
      config: {
        providers: { openai: { apiKey: 'sk-upstream', baseUrl: upstream.url } },
        llmSimulator: 'off',
        upstreamMaxRetries: 0,
        webSearch: { provider: 'tavily', apiKey: 'tvly-test', baseUrl: search.url },
        toolPrices: { web_search: WEB_SEARCH_PRICE, file_search: FILE_SEARCH_PRICE },
      },
    });
    db = t.app.get(DataSource);
    assistants = t.app.get(AssistantsService);
  });
  afterAll(async () => {
    await t.close();
    await search.close();
    await upstream.close();
  });

  const upstreamCalls = () => upstream.requests;
  const lastUpstream = () => upstream.requests[upstream.requests.length - 1];
  const create = (workspace: TestWorkspace, fields: Parameters<AssistantsService['create']>[1]) => assistants.create(workspace.id, fields);
  const webSearchCall = (query: string, id = 'call_ws1') => ({ kind: 'tool_calls' as const, calls: [{ id, name: 'web_search', arguments: JSON.stringify({ query }) }] });

  async function expectWalletConsistent(workspace: TestWorkspace) {
    await t.settled(workspace.id);
    const [{ sum }] = await db.query(
      'SELECT coalesce(sum(amount_millicents), 0)::bigint AS sum FROM wallet_transactions WHERE workspace_id = $1',
      [workspace.id],
    );
    const balance = await t.app.get(WalletService).balance(workspace.id);
    expect(balance.balanceMillicents).toBe(Number(sum));
    expect(balance.reservedMillicents).toBe(0);
  }

  describe('assistant mode', () => {
    it('applies the assistant by UUID and by slug: its system prompt first, then the request system message, its model and temperature', async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Support Bot', model: 'gpt-4o-mini', systemPrompt: 'You are Support Bot.', temperature: 0.3 });
      expect(bot.slug).toBe('support-bot');

      for (const assistantId of [bot.id, 'support-bot']) {
        const completion = (await workspace.client.chat.completions.create({
          assistant_id: assistantId,
          messages: [
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'Hi' },
          ],
        } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
        expect(completion.model).toBe('gpt-4o-mini');
        expect(completion.x_service).toMatchObject({ iterations: 1, tools_used: [] });
        expect(lastUpstream().body).toMatchObject({
          model: 'gpt-4o-mini',
          temperature: 0.3,
          messages: [
            { role: 'system', content: 'You are Support Bot.' },
            { role: 'system', content: 'Be brief.' },
            { role: 'user', content: 'Hi' },
          ],
        });
      }
      await t.settled(workspace.id);
      const [record] = await db.query('SELECT assistant_id FROM usage_records WHERE workspace_id = $1 LIMIT 1', [workspace.id]);
      expect(record.assistant_id).toBe(bot.id);
    });

    it('lets the request override the model, temperature and max_tokens', async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Overridable', model: 'gpt-4o-mini', temperature: 0.3, maxTokens: 300 });
      await workspace.client.chat.completions.create({
        assistant_id: bot.slug,
        model: 'gpt-4o',
        temperature: 1.1,
        max_tokens: 77,
        messages: [{ role: 'user', content: 'Hi' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(lastUpstream().body).toMatchObject({ model: 'gpt-4o', temperature: 1.1, max_tokens: 77 });

      await workspace.client.chat.completions.create({
        assistant_id: bot.slug,
        messages: [{ role: 'user', content: 'Hi' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(lastUpstream().body).toMatchObject({ model: 'gpt-4o-mini', temperature: 0.3, max_tokens: 300 });
    });

    it("answers an unknown assistant, or another workspace's, with NotFoundError", async () => {
      const workspace = await t.createWorkspace();
      const other = await t.createWorkspace();
      const theirs = await create(other, { name: 'Private', model: 'gpt-4o-mini' });
      for (const assistantId of ['nobody', theirs.id, theirs.slug, '00000000-0000-4000-8000-000000000000']) {
        const error = await workspace.client.chat.completions
          .create({ assistant_id: assistantId, messages: [{ role: 'user', content: 'x' }] } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
          .catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OpenAI.NotFoundError);
        expect((error as InstanceType<typeof OpenAI.NotFoundError>).error).toMatchObject({ type: 'not_found', code: 'assistant_not_found', param: 'assistant_id' });
      }
    });

    it('refuses server tools declared in the request of an assistant', async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Searcher', model: 'gpt-4o-mini', tools: ['web_search'] });
      const error = await workspace.client.chat.completions
        .create({
          assistant_id: bot.id,
          messages: [{ role: 'user', content: 'x' }],
          tools: [{ type: 'web_search' }],
        } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.BadRequestError);
      expect((error as InstanceType<typeof OpenAI.BadRequestError>).error).toMatchObject({ code: 'server_tool_in_request', param: 'tools.0' });
    });
  });

  describe('web_search', () => {
    it('runs a two-iteration search: the model calls web_search, the service searches, the model answers from the results', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Researcher', model: 'gpt-4o-mini', tools: [{ type: 'web_search', max_results: 2 }] });
      search.script(resultsScenario([
        { title: 'Node 24 released', url: 'https://nodejs.org/blog/24', snippet: 'Node.js 24 is out.' },
        { title: 'Changelog', url: 'https://nodejs.org/changelog', snippet: 'All changes.' },
        { title: 'Third', url: 'https://example.com/3', snippet: 'Not wanted.' },
      ]));
      upstream.script(
        { ...webSearchCall('latest node release'), usage: { prompt_tokens: 200, completion_tokens: 20 } },
        { kind: 'text', text: 'Node.js 24 is the latest release.', usage: { prompt_tokens: 400, completion_tokens: 10 } },
      );
      const before = upstreamCalls().length;

      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'What is the latest Node.js release?' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;

      expect(completion.choices[0]).toMatchObject({ message: { content: 'Node.js 24 is the latest release.' }, finish_reason: 'stop' });
      expect(completion.choices[0].message.tool_calls).toBeUndefined();
      const llm = (600 * MINI.input + 30 * MINI.output) / 1e6;
      expect(completion.x_service).toEqual({
        cost_millicents: llm + WEB_SEARCH_PRICE,
        iterations: 2,
        tools_used: ['web_search'],
        generated_files: null,
        provider: 'openai',
        deployment: 'openai',
        attempts: 2,
      });
      expect(completion.usage).toMatchObject({ prompt_tokens: 600, completion_tokens: 30, total_tokens: 630 });

      // The model was offered the tool as a function taking {"query"}.
      const first = upstreamCalls()[before];
      expect((first.body.tools as Array<{ function: { name: string; parameters: unknown } }>)[0].function).toMatchObject({
        name: 'web_search',
        parameters: { type: 'object', properties: { query: { type: 'string' } }, required: ['query'] },
      });
      // The search went to the configured provider with the model's query and the assistant's result count.
      expect(search.requests[search.requests.length - 1].body).toMatchObject({ query: 'latest node release', max_results: 2 });
      // The second call carries the tool call and its results.
      const second = upstreamCalls()[before + 1].body.messages as Array<{ role: string; content: string; tool_call_id?: string }>;
      expect(second.slice(-2)).toEqual([
        { role: 'assistant', content: null, tool_calls: [{ id: 'call_ws1', type: 'function', function: { name: 'web_search', arguments: '{"query":"latest node release"}' } }] },
        { role: 'tool', tool_call_id: 'call_ws1', content: expect.stringContaining('https://nodejs.org/blog/24') },
      ]);
      expect(second[second.length - 1].content).not.toContain('Not wanted');

      await t.settled(workspace.id);
      const [record] = await db.query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1`, [workspace.id]);
      expect(record).toMatchObject({
        assistant_id: bot.id,
        iterations: 2,
        tools_used: ['web_search'],
        input_tokens: 600,
        output_tokens: 30,
        tool_cost_millicents: WEB_SEARCH_PRICE.toFixed(6),
        total_cost_millicents: (llm + WEB_SEARCH_PRICE).toFixed(6),
        status: 'success',
      });
      await expectWalletConsistent(workspace);
    });

    it('streams the same loop: only the answer reaches the client, x_service on the last chunk', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Streamer', model: 'gpt-4o-mini', tools: ['web_search'] });
      upstream.script(
        { ...webSearchCall('weather oslo'), usage: { prompt_tokens: 100, completion_tokens: 10 } },
        { kind: 'text', text: 'It is cold in Oslo.', usage: { prompt_tokens: 300, completion_tokens: 6 } },
      );
      const stream = await workspace.client.chat.completions.create({
        assistant_id: bot.slug,
        messages: [{ role: 'user', content: 'Weather in Oslo?' }],
        stream: true,
        stream_options: { include_usage: true },
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      const chunks: Array<OpenAI.Chat.ChatCompletionChunk & { x_service?: Completion['x_service'] }> = [];
      for await (const chunk of stream) chunks.push(chunk);

      expect(chunks.filter((c) => c.choices[0]?.delta?.role).length).toBe(1);
      expect(chunks.some((c) => c.choices[0]?.delta?.tool_calls)).toBe(false);
      expect(chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('')).toBe('It is cold in Oslo.');
      expect(chunks.filter((c) => c.choices[0]?.finish_reason).map((c) => c.choices[0].finish_reason)).toEqual(['stop']);
      const last = chunks[chunks.length - 1];
      expect(last.usage).toMatchObject({ prompt_tokens: 400, completion_tokens: 16 });
      expect(last.x_service).toEqual({
        cost_millicents: (400 * MINI.input + 16 * MINI.output) / 1e6 + WEB_SEARCH_PRICE,
        iterations: 2,
        tools_used: ['web_search'],
        generated_files: null,
        provider: 'openai',
        deployment: 'openai',
        attempts: 2,
      });
      await expectWalletConsistent(workspace);
    });

    it('tells the model when the search fails, and does not charge for it', async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Unlucky', model: 'gpt-4o-mini', tools: ['web_search'] });
      search.script({ kind: 'http_error', status: 503 });
      upstream.script(webSearchCall('anything'), { kind: 'text', text: 'I could not search.' });
      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Search please' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
      expect(completion.x_service).toMatchObject({ iterations: 2, tools_used: [] });
      const toolMessage = (lastUpstream().body.messages as Array<{ role: string; content: string }>).at(-1)!;
      expect(toolMessage).toMatchObject({ role: 'tool', content: expect.stringContaining('web search failed') });
    });

    it('stops at the iteration limit and makes the last call answer (tool_choice none)', async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Eager', model: 'gpt-4o-mini', tools: ['web_search'], maxToolIterations: 2 });
      const before = upstreamCalls().length;
      upstream.script(webSearchCall('one', 'c1'), { kind: 'text', text: 'Done after one search.' });
      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Search forever' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
      expect(completion.x_service.iterations).toBe(2);
      expect(upstreamCalls().length - before).toBe(2);
      expect(upstreamCalls()[before].body.tool_choice).toBeUndefined();
      expect(upstreamCalls()[before + 1].body.tool_choice).toBe('none');

      // A model that calls the tool even then: its server calls are dropped, the answer ends.
      upstream.script(webSearchCall('two', 'c2'), webSearchCall('three', 'c3'));
      const stubborn = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Search forever' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
      expect(stubborn.x_service.iterations).toBe(2);
      expect(stubborn.choices[0].message.tool_calls).toBeUndefined();
      expect(stubborn.choices[0].finish_reason).toBe('stop');

      // The same, streamed.
      upstream.script(webSearchCall('four', 'c4'), webSearchCall('five', 'c5'));
      const stream = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Search forever' }],
        stream: true,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      const finishes: string[] = [];
      for await (const chunk of stream) if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
      expect(finishes).toEqual(['stop']);
    });

    it("returns a client tool call to the caller, offered alongside the assistant's server tools", async () => {
      const workspace = await t.createWorkspace();
      const bot = await create(workspace, { name: 'Mixed', model: 'gpt-4o-mini', tools: ['web_search'] });
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_c1', name: 'get_weather', arguments: '{"city":"Rome"}' }] });
      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Weather in Rome?' }],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
      expect(completion.choices[0].finish_reason).toBe('tool_calls');
      expect(completion.choices[0].message.tool_calls).toEqual([
        { id: 'call_c1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome"}' } },
      ]);
      expect(completion.x_service.iterations).toBe(1);
      expect((lastUpstream().body.tools as Array<{ function: { name: string } }>).map((tool) => tool.function.name)).toEqual([
        'get_weather',
        'web_search',
      ]);
    });

    it('ends cleanly when the wallet cannot cover another iteration', async () => {
      // Enough for the first call of gpt-4o-mini capped at 200 tokens, not for the search and a second call.
      const workspace = await t.createWorkspace({ balanceMillicents: 30 });
      const bot = await create(workspace, { name: 'Frugal', model: 'gpt-4o-mini', tools: ['web_search'], maxTokens: 200 });
      const searchesBefore = search.requests.length;
      upstream.script({ ...webSearchCall('costly'), usage: { prompt_tokens: 100, completion_tokens: 10 } });
      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Search' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;
      expect(completion.choices[0].finish_reason).toBe('length');
      expect(completion.choices[0].message.content).toContain('wallet balance');
      expect(completion.x_service.iterations).toBe(1);
      expect(search.requests.length).toBe(searchesBefore);
      await expectWalletConsistent(workspace);

      // Streamed, the same end: the note as text, then finish_reason length.
      const streamed = await t.createWorkspace({ balanceMillicents: 30 });
      const streamedBot = await create(streamed, { name: 'Frugal streamer', model: 'gpt-4o-mini', tools: ['web_search'], maxTokens: 200 });
      upstream.script({ ...webSearchCall('costly'), usage: { prompt_tokens: 100, completion_tokens: 10 } });
      const stream = await streamed.client.chat.completions.create({
        assistant_id: streamedBot.id,
        messages: [{ role: 'user', content: 'Search' }],
        stream: true,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let text = '';
      const finishes: string[] = [];
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        if (chunk.choices[0]?.finish_reason) finishes.push(chunk.choices[0].finish_reason);
      }
      expect(text).toContain('wallet balance');
      expect(finishes).toEqual(['length']);
      await expectWalletConsistent(streamed);
    });

    it('charges what earlier iterations used when the client goes away during a later one', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Abandoned', model: 'gpt-4o', tools: ['web_search'] });
      upstream.script({ ...webSearchCall('x'), usage: { prompt_tokens: 1_000, completion_tokens: 100 } }, { kind: 'hang' });
      const controller = new AbortController();
      const request = workspace.client.chat.completions.create(
        { assistant_id: bot.id, messages: [{ role: 'user', content: 'x' }] } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming,
        { signal: controller.signal },
      );
      // Let the first call and the search finish, then leave while the second call hangs.
      while (!search.requests.some((r) => r.body?.query === 'x')) await new Promise((resolve) => setTimeout(resolve, 20));
      await new Promise((resolve) => setTimeout(resolve, 100));
      controller.abort();
      await request.catch(() => undefined);
      let ledger: Array<{ type: string; amount: number }> = [];
      for (let i = 0; i < 100 && ledger.length < 2; i++) {
        await new Promise((resolve) => setTimeout(resolve, 50));
        ledger = await db.query('SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at', [workspace.id]);
      }
      const [record] = await db.query(
        'SELECT status, error_code, input_tokens::int AS input_tokens, total_cost_millicents::float8 AS cost FROM usage_records WHERE workspace_id = $1',
        [workspace.id],
      );
      // The first call (1,350 millicents), plus the prompt of the second, which was sent upstream before the client left.
      const secondPrompt = record.input_tokens - 1_000;
      expect(secondPrompt).toBeGreaterThan(0);
      expect(record.cost).toBeCloseTo(1_350 + (secondPrompt * 250_000) / 1e6, 6);
      expect(ledger).toEqual([
        { type: 'topup', amount: 100_000 },
        { type: 'usage', amount: -Math.floor(record.cost) },
      ]);
      expect(record).toMatchObject({ status: 'error', error_code: 'client_disconnected' });
      await expectWalletConsistent(workspace);
    });

    it('refunds what earlier iterations used when a later one fails', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Fragile', model: 'gpt-4o', tools: ['web_search'] });
      upstream.script({ ...webSearchCall('x'), usage: { prompt_tokens: 1_000, completion_tokens: 100 } }, { kind: 'http_error', status: 500 });
      const error = await workspace.client.chat.completions
        .create({ assistant_id: bot.id, messages: [{ role: 'user', content: 'x' }] } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)
        .catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OpenAI.InternalServerError);
      await t.settled(workspace.id);
      const ledger = await db.query(
        'SELECT type, amount_millicents::int AS amount FROM wallet_transactions WHERE workspace_id = $1 ORDER BY created_at, type DESC',
        [workspace.id],
      );
      // gpt-4o: 1000 x 250000 + 100 x 1000000 = 350 millicents, plus the search: charged, then refunded.
      expect(ledger).toEqual([
        { type: 'topup', amount: 100_000 },
        { type: 'usage', amount: -1_350 },
        { type: 'refund', amount: 1_350 },
      ]);
      expect(await t.app.get(WalletService).balance(workspace.id)).toMatchObject({ balanceMillicents: 100_000, reservedMillicents: 0 });
      const [record] = await db.query('SELECT status, error_code, charged_millicents FROM usage_records WHERE workspace_id = $1', [workspace.id]);
      expect(record).toMatchObject({ status: 'error', error_code: 'upstream_failed', charged_millicents: '0' });
    });
  });

  describe('file_search', () => {
    const refundPolicy = [
      '# Refund policy',
      '',
      'Customers may return any item within 30 days of delivery for a full refund.',
      'Damaged goods are replaced free of charge; send a photo of the damage to support.',
      '',
      '# Shipping',
      '',
      'Orders ship within two business days from our warehouse in Rotterdam.',
    ].join('\n');

    it('runs a two-iteration retrieval: the model calls file_search, the service finds the passage, the model answers', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Policy bot', model: 'gpt-4o-mini', tools: ['file_search'] });
      await t.app.get(DocumentsService).add({
        workspaceId: workspace.id,
        assistantId: bot.id,
        fileName: 'policy.md',
        data: Buffer.from(refundPolicy),
      });
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_fs1', name: 'file_search', arguments: '{"query":"damaged goods"}' }], usage: { prompt_tokens: 150, completion_tokens: 12 } },
        { kind: 'text', text: 'Damaged goods are replaced for free.', usage: { prompt_tokens: 350, completion_tokens: 8 } },
      );
      const completion = (await workspace.client.chat.completions.create({
        assistant_id: bot.slug,
        messages: [{ role: 'user', content: 'What happens with damaged goods?' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming)) as Completion;

      expect(completion.choices[0].message.content).toBe('Damaged goods are replaced for free.');
      expect(completion.x_service).toEqual({
        cost_millicents: (500 * MINI.input + 20 * MINI.output) / 1e6 + FILE_SEARCH_PRICE,
        iterations: 2,
        tools_used: ['file_search'],
        generated_files: null,
        provider: 'openai',
        deployment: 'openai',
        attempts: 2,
      });
      const toolMessage = (lastUpstream().body.messages as Array<{ role: string; content: string }>).at(-1)!;
      expect(toolMessage.role).toBe('tool');
      expect(toolMessage.content).toContain('policy.md');
      expect(toolMessage.content).toContain('Damaged goods are replaced free of charge');
      await t.settled(workspace.id);
      const [record] = await db.query('SELECT tool_cost_millicents, tools_used FROM usage_records WHERE workspace_id = $1', [workspace.id]);
      expect(record).toEqual({ tool_cost_millicents: FILE_SEARCH_PRICE.toFixed(6), tools_used: ['file_search'] });
      await expectWalletConsistent(workspace);
    });

    it('streams a retrieval answer', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000 });
      const bot = await create(workspace, { name: 'Streaming policy bot', model: 'gpt-4o-mini', tools: ['file_search'] });
      await t.app.get(DocumentsService).add({ workspaceId: workspace.id, assistantId: bot.id, fileName: 'policy.md', data: Buffer.from(refundPolicy) });
      upstream.script(
        { kind: 'tool_calls', calls: [{ id: 'call_fs2', name: 'file_search', arguments: '{"query":"shipping warehouse"}' }] },
        { kind: 'text', text: 'From Rotterdam within two days.' },
      );
      const stream = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Where do orders ship from?' }],
        stream: true,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let text = '';
      let last: (OpenAI.Chat.ChatCompletionChunk & { x_service?: Completion['x_service'] }) | undefined;
      for await (const chunk of stream) {
        text += chunk.choices[0]?.delta?.content ?? '';
        last = chunk;
      }
      expect(text).toBe('From Rotterdam within two days.');
      expect(last?.x_service).toMatchObject({ iterations: 2, tools_used: ['file_search'] });
      expect((lastUpstream().body.messages as Array<{ content: string }>).at(-1)!.content).toContain('Rotterdam');
    });

    it("takes OpenAI's file_search options in the tool settings and searches with them; bad ones are 400s naming the field", async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 100_000, tier: 'team' });
      const filters = { type: 'eq' as const, key: 'filename', value: 'policy.md' };
      const bot = await create(workspace, { name: 'Options bot', model: 'gpt-4o-mini', tools: [{ type: 'file_search', max_num_results: 1, ranking_options: { score_threshold: 0 }, filters }] });
      expect(bot.tools).toEqual([{ type: 'file_search', max_num_results: 1, ranking_options: { score_threshold: 0 }, filters }]);
      const documents = t.app.get(DocumentsService);
      await documents.add({ workspaceId: workspace.id, assistantId: bot.id, fileName: 'policy.md', data: Buffer.from(refundPolicy) });
      await documents.add({ workspaceId: workspace.id, assistantId: bot.id, fileName: 'other.md', data: Buffer.from('Damaged goods go back to the warehouse.') });
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'call_fs_o', name: 'file_search', arguments: '{"query":"damaged goods"}' }] }, { kind: 'text', text: 'Replaced [1].' });
      await workspace.client.chat.completions.create({ assistant_id: bot.id, messages: [{ role: 'user', content: 'Damaged goods?' }] } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      const toolMessage = (lastUpstream().body.messages as Array<{ role: string; content: string }>).at(-1)!;
      // One passage (max_num_results), of policy.md only (the filter): other.md matches the query too.
      expect(toolMessage.content.match(/^\[\d+\] /gm)).toHaveLength(1);
      expect(toolMessage.content).toContain('policy.md');
      expect(toolMessage.content).not.toContain('other.md');

      for (const [tools, param] of [
        [[{ type: 'file_search', max_num_results: 51 }], 'tools.0.max_num_results'],
        [[{ type: 'file_search', ranking_options: { score_threshold: -1 } }], 'tools.0.ranking_options.score_threshold'],
        [[{ type: 'file_search', filters: { type: 'and', filters: [] } }], 'tools.0.filters.filters'],
        [[{ type: 'web_search', filters: filters }], 'tools.0.filters'],
      ] as const) {
        await expect(create(workspace, { name: 'Refused', model: 'gpt-4o-mini', tools: tools as never })).rejects.toMatchObject({ status: 400, param });
      }
    });

    it("searches only the assistant's own documents", async () => {
      const workspace = await t.createWorkspace({ tier: 'team' });
      const mine = await create(workspace, { name: 'Mine', model: 'gpt-4o-mini', tools: ['file_search'] });
      const other = await create(workspace, { name: 'Other', model: 'gpt-4o-mini', tools: ['file_search'] });
      await t.app.get(DocumentsService).add({ workspaceId: workspace.id, assistantId: other.id, fileName: 'secret.txt', data: Buffer.from('The launch code is pelican.') });
      upstream.script({ kind: 'tool_calls', calls: [{ id: 'c', name: 'file_search', arguments: '{"query":"launch code"}' }] }, { kind: 'text', text: 'No idea.' });
      await workspace.client.chat.completions.create({ assistant_id: mine.id, messages: [{ role: 'user', content: 'launch code?' }] } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      const toolMessage = (lastUpstream().body.messages as Array<{ content: string }>).at(-1)!;
      expect(toolMessage.content).not.toContain('pelican');
    });
  });

  describe('citations (message.annotations)', () => {
    type Annotation = OpenAI.Chat.ChatCompletionMessage.Annotation | { type: 'file_citation'; file_citation: { file_id: string; filename: string; index: number; start_index: number; end_index: number } };
    const handbook = 'Damaged goods are replaced free of charge within 30 days.\n\nOrders ship from Rotterdam.';
    const webHits = [
      { title: 'Node 24 released', url: 'https://nodejs.org/blog/24', snippet: 'Node.js 24 is out.' },
      { title: 'Changelog', url: 'https://nodejs.org/changelog', snippet: 'All changes.' },
    ];
    // web_search first (numbers 1 and 2), file_search next (3), then an answer citing both and a number no result has.
    const answer = 'Node 24 is out [1][2]. Damaged goods are replaced 【3†source】, not [9].';

    async function citingBot(workspace: TestWorkspace, name: string) {
      const bot = await create(workspace, { name, model: 'gpt-4o-mini', tools: ['web_search', 'file_search'] });
      const document = await t.app.get(DocumentsService).add({ workspaceId: workspace.id, assistantId: bot.id, fileName: 'handbook.md', data: Buffer.from(handbook) });
      search.script(resultsScenario(webHits));
      upstream.script(
        webSearchCall('node release'),
        { kind: 'tool_calls', calls: [{ id: 'call_fs', name: 'file_search', arguments: '{"query":"damaged goods"}' }] },
        { kind: 'text', text: answer },
      );
      return { bot, document };
    }

    /** Every annotation names a result of this response and lies inside the text, on a marker. */
    function expectCitationsOf(text: string, annotations: Annotation[], documentId: string) {
      const urls = webHits.map((hit) => hit.url);
      for (const annotation of annotations) {
        const span = annotation.type === 'url_citation' ? annotation.url_citation : annotation.file_citation;
        expect(span.start_index).toBeGreaterThanOrEqual(0);
        expect(span.end_index).toBeLessThanOrEqual(text.length);
        expect(text.slice(span.start_index, span.end_index)).toMatch(/^(\[\d\]|【3†source】)$/);
        if (annotation.type === 'url_citation') expect(urls).toContain(annotation.url_citation.url);
        else expect(annotation.file_citation).toMatchObject({ file_id: documentId, filename: 'handbook.md' });
      }
      expect(annotations.map((annotation) => (annotation.type === 'url_citation' ? annotation.url_citation.url : annotation.file_citation.file_id))).toEqual([
        ...urls,
        documentId,
      ]);
    }

    it('a plain answer carries url_citation and file_citation annotations for its markers, and the tool messages number the results', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const { bot, document } = await citingBot(workspace, 'Citing bot');
      const conversation = await t.app.get(ConversationStore).create(workspace.id, { assistantId: bot.id });
      const completion = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        conversation_id: conversation.id,
        messages: [{ role: 'user', content: 'Node news, and damaged goods?' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      const message = completion.choices[0].message;
      expect(message.content).toBe(answer);
      expectCitationsOf(answer, message.annotations as Annotation[], document.id);
      expect(message.annotations![0]).toEqual({ type: 'url_citation', url_citation: { url: 'https://nodejs.org/blog/24', title: 'Node 24 released', start_index: 15, end_index: 18 } });
      // The model saw the numbers it cites: the second search went on from the first's.
      const toolMessages = (lastUpstream().body.messages as Array<{ role: string; content: string }>).filter((m) => m.role === 'tool');
      expect(toolMessages[0].content).toMatch(/^\[1\] Node 24 released\n[\s\S]*\[2\] Changelog/);
      expect(toolMessages[1].content).toMatch(/^\[3\] handbook\.md, passage 1\n/);
      // The reply is stored with its annotations: the conversation API gives them back.
      await t.settled(workspace.id);
      const stored = (await workspace.client.get(`/conversations/${conversation.id}`)) as { messages: { data: Array<{ role: string; annotations: unknown }> } };
      expect(stored.messages.data.map((message) => message.annotations)).toEqual([null, message.annotations]);
    });

    it('a streamed answer sends the annotations in a delta before its finish, indexing the text the client got', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const { bot, document } = await citingBot(workspace, 'Streaming citing bot');
      const stream = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Node news, and damaged goods?' }],
        stream: true,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      let text = '';
      const annotations: Annotation[] = [];
      let finishedBeforeAnnotations = false;
      let finished = false;
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        text += choice?.delta?.content ?? '';
        const delta = choice?.delta as { annotations?: Annotation[] } | undefined;
        if (delta?.annotations) {
          finishedBeforeAnnotations ||= finished;
          annotations.push(...delta.annotations);
        }
        finished ||= choice?.finish_reason != null;
      }
      expect(text).toBe(answer);
      expect(finishedBeforeAnnotations).toBe(false);
      expectCitationsOf(text, annotations, document.id);
    });

    it('an answer without sources carries no annotations', async () => {
      const workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
      const bot = await create(workspace, { name: 'Quiet bot', model: 'gpt-4o-mini', tools: ['web_search'] });
      upstream.script({ kind: 'text', text: 'No search needed [1].' });
      const completion = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Hi' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(completion.choices[0].message.annotations ?? []).toEqual([]);
    });
  });

  describe('limits', () => {
    it.each([
      ['free', 1],
      ['hobby', 2],
    ])('enforces maxAssistants on the %s tier (%i), naming the tier and its limit', async (tier, limit) => {
      const workspace = await t.createWorkspace({ tier });
      for (let i = 0; i < limit; i++) await create(workspace, { name: `Bot ${i}`, model: 'gpt-4o-mini' });
      await expect(create(workspace, { name: 'One too many', model: 'gpt-4o-mini' })).rejects.toMatchObject({
        type: 'permission_denied',
        status: 403,
        message: expect.stringContaining(`${tier} tier allows ${limit}`),
      });
    });

    it('holds maxAssistants under concurrent creates', async () => {
      const workspace = await t.createWorkspace({ tier: 'hobby' });
      const results = await Promise.allSettled(Array.from({ length: 6 }, (_, i) => create(workspace, { name: `Racer ${i}`, model: 'gpt-4o-mini' })));
      expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(2);
    });

    it('lets team and enterprise workspaces have any number', async () => {
      const workspace = await t.createWorkspace({ tier: 'team' });
      for (let i = 0; i < 12; i++) await create(workspace, { name: `Team bot ${i}`, model: 'gpt-4o-mini' });
      expect(await assistants.list(workspace.id)).toHaveLength(12);
    });

    it('derives unique slugs, refuses a taken or malformed one, and validates the model', async () => {
      const workspace = await t.createWorkspace({ tier: 'team' });
      expect((await create(workspace, { name: 'Helper', model: 'gpt-4o-mini' })).slug).toBe('helper');
      expect((await create(workspace, { name: 'Helper', model: 'gpt-4o-mini' })).slug).toBe('helper-2');
      await expect(create(workspace, { name: 'X', slug: 'helper', model: 'gpt-4o-mini' })).rejects.toMatchObject({ type: 'conflict' });
      await expect(create(workspace, { name: 'X', slug: 'Bad Slug', model: 'gpt-4o-mini' })).rejects.toMatchObject({ type: 'bad_request', param: 'slug' });
      await expect(create(workspace, { name: 'X', model: 'gpt-0' })).rejects.toMatchObject({ type: 'not_found', code: 'model_not_found' });
      await expect(create(workspace, { name: 'X', model: 'gpt-4o-mini', tools: ['code_interpreter' as 'web_search'] })).rejects.toMatchObject({ type: 'bad_request' });
    });
  });
});
