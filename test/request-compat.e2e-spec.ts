import { createServer, Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import OpenAI from 'openai';
import { type FakeAnthropic, startFakeAnthropic } from './fakes/fake-anthropic';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { FakeSearch, resultsScenario, startFakeSearch } from './fakes/fake-search';
import { AssistantsService } from '../src/assistants/assistants.service';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * The request side of client compatibility (issue 15): what openai-python, LangChain and the
 * AI SDK send (explicit nulls, `n` above 8, file and audio parts, stream_options) and what
 * they read back (usage details), against the fake OpenAI and Anthropic upstreams and the
 * simulator (Gemini models, which have no key here).
 */
describe('client compatibility: requests', () => {
  let openai: FakeOpenAi;
  let anthropic: FakeAnthropic;
  let search: FakeSearch;
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    openai = await startFakeOpenAi();
    anthropic = await startFakeAnthropic();
    search = await startFakeSearch({ apiKey: 'tvly-test' });
    t = await startTestApp({
      config: {
        providers: {
          openai: { apiKey: 'sk-upstream', baseUrl: openai.url },
          anthropic: { apiKey: 'sk-ant-upstream', baseUrl: anthropic.url },
        },
        llmSimulator: 'auto',
        webSearch: { provider: 'tavily', apiKey: 'tvly-test', baseUrl: search.url },
        // Room for the file and audio size limits, which are above the default 10 MB body limit.
        bodyLimit: '48mb',
      },
    });
    workspace = await t.createWorkspace({ balanceMillicents: 100_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await openai.close();
    await anthropic.close();
    await search.close();
  });

  const lastOpenAiBody = () => openai.requests[openai.requests.length - 1].body;
  const lastAnthropicBody = () => anthropic.requests[anthropic.requests.length - 1].body as Record<string, unknown>;

   
  async function post(body: unknown, path = '/v1/chat/completions'): Promise<{ status: number; body: any }> {
    const response = await fetch(`${t.baseUrl}${path}`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${workspace.apiKey}`, 'Content-Type': 'application/json' },
      body: typeof body === 'string' ? body : JSON.stringify(body),
    });
    const text = await response.text();
    return { status: response.status, body: text.startsWith('data:') ? text : JSON.parse(text) };
  }

  const user = (content: unknown) => [{ role: 'user', content }];

  describe('an explicit null is an absent field (openai-python sends max_tokens: null for None)', () => {
    /** Every optional top-level field a client may send as null. */
    const NULLS = {
      max_tokens: null,
      max_completion_tokens: null,
      n: null,
      temperature: null,
      stream_options: null,
      tools: null,
      tool_choice: null,
      response_format: null,
      stop: null,
      seed: null,
      top_p: null,
      user_id: null,
      subscription_id: null,
      conversation_id: null,
      assistant_id: null,
    };

    it('the simulator answers in full, not an empty finish_reason "length"', async () => {
      const completion = await workspace.client.chat.completions.create({
        model: 'gemini-2.5-flash',
        messages: [{ role: 'user', content: 'Hello there' }],
        ...NULLS,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(completion.choices[0].finish_reason).toBe('stop');
      expect(completion.choices[0].message.content).toContain('Hello there');
      expect(completion.usage!.completion_tokens).toBeGreaterThan(0);
    });

    it('nothing null reaches OpenAI, and the cap is the model\'s, not 0', async () => {
      const completion = await workspace.client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'Hi' }],
        ...NULLS,
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(completion.choices[0].message.content).toBe('Hello from the fake upstream.');
      const sent = lastOpenAiBody();
      expect(Object.entries(sent).filter(([, value]) => value === null)).toEqual([]);
      expect(sent.max_tokens).toBe(16_384);
      expect(sent).not.toHaveProperty('n');
      expect(sent).not.toHaveProperty('max_completion_tokens');
    });

    it('max_completion_tokens: null beside max_tokens: 500 leaves the cap at 500', async () => {
      await workspace.client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: 500,
        max_completion_tokens: null,
      });
      expect(lastOpenAiBody().max_tokens).toBe(500);
      expect(lastOpenAiBody()).not.toHaveProperty('max_completion_tokens');
    });

    it('Anthropic gets the model\'s cap, not max_tokens: 0', async () => {
      const completion = await workspace.client.chat.completions.create({
        model: 'claude-haiku-4-5',
        messages: [{ role: 'user', content: 'Hi' }],
        max_tokens: null,
        temperature: null,
      });
      expect(completion.choices[0].message.content).toBeTruthy();
      expect(lastAnthropicBody().max_tokens).toBe(64_000);
      expect(lastAnthropicBody()).not.toHaveProperty('temperature');
    });

    it('a streamed request with stream_options: null streams without usage', async () => {
      const { status, body } = await post({ model: 'gemini-2.5-flash', messages: user('Hi'), stream: true, stream_options: null });
      expect(status).toBe(200);
      expect(body).toContain('data: [DONE]');
      expect(body).not.toContain('"usage"');
    });

    it('keeps content: null in an assistant message that only calls tools, and drops its other nulls', async () => {
      await post({
        model: 'gpt-4o-mini',
        messages: [
          { role: 'user', content: 'Weather in Paris?', name: null },
          {
            role: 'assistant',
            content: null,
            name: null,
            tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Paris"}' } }],
          },
          { role: 'tool', tool_call_id: 'call_1', content: 'Sunny' },
        ],
      });
      const messages = lastOpenAiBody().messages as Array<Record<string, unknown>>;
      expect(messages[0]).toEqual({ role: 'user', content: 'Weather in Paris?' });
      expect(messages[1]).toHaveProperty('content', null);
      expect(messages[1]).not.toHaveProperty('name');
    });

    it('a required field sent as null is still required', async () => {
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: null });
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ type: 'bad_request', param: 'messages' });
    });
  });

  describe('stream_options and n, as OpenAI bounds them', () => {
    it.each([{}, { stream: false }])('stream_options without stream: true is a 400 naming stream_options (%j)', async (streamField) => {
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: user('Hi'), stream_options: { include_usage: true }, ...streamField });
      expect(status).toBe(400);
      expect(body.error).toEqual({
        type: 'bad_request',
        message: "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
        code: 'bad_request',
        param: 'stream_options',
      });
    });

    it('n may be up to 128, forwarded upstream', async () => {
      const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }], n: 128, max_tokens: 20 });
      expect(completion.choices.length).toBeGreaterThan(0);
      expect(lastOpenAiBody().n).toBe(128);
    });

    it.each([0, 129, 1.5, '2'])('n: %j is a 400 naming n', async (n) => {
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: user('Hi'), n });
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ param: 'n', message: 'n must be an integer from 1 to 128.' });
    });
  });

  describe('file and input_audio content parts', () => {
    const pdf = (bytes: number) => `data:application/pdf;base64,${Buffer.alloc(bytes, 7).toString('base64')}`;
    /** A WAV file: a 44-byte header declaring `byteRate`, then silence, `bytes` in all. */
    const wav = (bytes: number, byteRate = 32_000) => {
      const file = Buffer.alloc(bytes);
      file.write('RIFF', 0, 'latin1');
      file.write('WAVEfmt ', 8, 'latin1');
      file.writeUInt32LE(byteRate, 28);
      return file.toString('base64');
    };
    const filePart = { type: 'file', file: { filename: 'report.pdf', file_data: pdf(300) } };
    const audioPart = { type: 'input_audio', input_audio: { data: wav(3_000), format: 'wav' } };

    it('are accepted and passed to OpenAI as they came', async () => {
      const { status } = await post({ model: 'gpt-4o-mini', messages: user([{ type: 'text', text: 'Summarize' }, filePart, audioPart]) });
      expect(status).toBe(200);
      expect((lastOpenAiBody().messages as Array<{ content: unknown }>)[0].content).toEqual([{ type: 'text', text: 'Summarize' }, filePart, audioPart]);
    });

    it('a file may be named by file_id alone', async () => {
      const completion = await workspace.client.chat.completions.create({
        model: 'gpt-4o-mini',
        messages: [{ role: 'user', content: [{ type: 'file', file: { file_id: 'file-abc123' } }] }],
      });
      expect(completion.choices[0].message.content).toBeTruthy();
    });

    /** The prompt tokens the simulator reports (our own count) for one user message. */
    const promptTokensOf = async (content: unknown[]) => {
      const { status, body } = await post({ model: 'gemini-2.5-flash', messages: user(content) });
      expect(status).toBe(200);
      return (body as { usage: { prompt_tokens: number } }).usage.prompt_tokens;
    };

    it('are counted for the hold and the bill: a file by its size, audio by its estimated duration', async () => {
      const text = { type: 'text', text: 'Listen and read' };
      const base = await promptTokensOf([text]);
      // 64,000 bytes of file: one token per 64 bytes.
      expect((await promptTokensOf([text, { type: 'file', file: { file_data: pdf(64_000) } }])) - base).toBe(1_000);
      // A file known only by its id: one page, 1,500 tokens.
      expect((await promptTokensOf([text, { type: 'file', file: { file_id: 'file-abc' } }])) - base).toBe(1_500);
      // 10 seconds of audio at 10 tokens a second: WAV at the byte rate of its header, MP3 at 64 kbit/s.
      expect((await promptTokensOf([text, { type: 'input_audio', input_audio: { data: wav(320_000, 32_000), format: 'wav' } }])) - base).toBe(100);
      expect((await promptTokensOf([text, { type: 'input_audio', input_audio: { data: wav(960_000, 96_000), format: 'wav' } }])) - base).toBe(100);
      const mp3 = Buffer.alloc(80_000, 1).toString('base64');
      expect((await promptTokensOf([text, { type: 'input_audio', input_audio: { data: mp3, format: 'mp3' } }])) - base).toBe(100);
    });

    it.each([
      [{ type: 'file', file: {} }, 'type file needs'],
      [{ type: 'file', file: { file_data: 42 } }, 'type file needs'],
      [{ type: 'file', file: { file_id: 'file-1', filename: 7 } }, 'type file needs'],
      [{ type: 'file' }, 'type file needs'],
      [{ type: 'input_audio', input_audio: { data: 'AAAA', format: 'ogg' } }, 'type input_audio needs'],
      [{ type: 'input_audio', input_audio: { format: 'wav' } }, 'type input_audio needs'],
      [{ type: 'input_audio', input_audio: null }, 'type input_audio needs'],
      [{ type: 'video', video: {} }, 'unsupported type "video" (supported: text, image_url, file, input_audio)'],
    ])('a malformed part is a 400 that says what it needs: %j', async (part, message) => {
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: user([part]) });
      expect(status).toBe(400);
      expect(body.error.type).toBe('bad_request');
      expect(body.error.param).toContain('messages.0.content');
      expect(body.error.message).toContain(message);
    });

    it('files total at most 32 MB of file_data per request', async () => {
      const half = { type: 'file', file: { file_data: pdf(13 * 1024 * 1024) } };
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: user([half, half]) });
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ type: 'bad_request', code: 'files_too_large', param: 'messages' });
    });

    it('an audio part is at most 20 MB of base64', async () => {
      const data = 'A'.repeat(20 * 1024 * 1024 + 4);
      const { status, body } = await post({ model: 'gpt-4o-mini', messages: user([{ type: 'input_audio', input_audio: { data, format: 'mp3' } }]) });
      expect(status).toBe(400);
      expect(body.error).toMatchObject({ code: 'string_too_long', param: 'messages.0.content.0.input_audio.data' });
    });
  });

  describe('usage details pass through', () => {
    it('plain: reasoning and cached tokens reach the client', async () => {
      openai.script({ kind: 'text', text: 'Thought about it.', usage: { prompt_tokens: 50, completion_tokens: 40, cached_tokens: 20, reasoning_tokens: 32 } });
      const completion = await workspace.client.chat.completions.create({ model: 'o4-mini', messages: [{ role: 'user', content: 'Think' }] });
      expect(completion.usage).toEqual({
        prompt_tokens: 50,
        completion_tokens: 40,
        total_tokens: 90,
        prompt_tokens_details: { cached_tokens: 20 },
        completion_tokens_details: { reasoning_tokens: 32 },
      });
    });

    it('over a tool loop: each detail is summed over the model calls', async () => {
      const bot = await t.app.get(AssistantsService).create(workspace.id, { name: 'Thinker', model: 'o4-mini', tools: ['web_search'] });
      search.script(resultsScenario([{ title: 'Node 24', url: 'https://nodejs.org/blog/24', snippet: 'Node.js 24 is out.' }]));
      openai.script(
        {
          kind: 'tool_calls',
          calls: [{ id: 'call_ws1', name: 'web_search', arguments: '{"query":"node"}' }],
          usage: { prompt_tokens: 200, completion_tokens: 20, cached_tokens: 5, reasoning_tokens: 15 },
        },
        { kind: 'text', text: 'Node.js 24.', usage: { prompt_tokens: 400, completion_tokens: 40, cached_tokens: 20, reasoning_tokens: 32 } },
      );
      const completion = await workspace.client.chat.completions.create({
        assistant_id: bot.id,
        messages: [{ role: 'user', content: 'Latest Node.js?' }],
      } as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      expect(completion.usage).toEqual({
        prompt_tokens: 600,
        completion_tokens: 60,
        total_tokens: 660,
        prompt_tokens_details: { cached_tokens: 25 },
        completion_tokens_details: { reasoning_tokens: 47 },
      });
    });

    it('streamed: the usage chunk carries them', async () => {
      openai.script({ kind: 'text', text: 'Thought about it.', usage: { prompt_tokens: 50, completion_tokens: 40, cached_tokens: 0, reasoning_tokens: 32 } });
      const stream = await workspace.client.chat.completions.create({
        model: 'o4-mini',
        messages: [{ role: 'user', content: 'Think' }],
        stream: true,
        stream_options: { include_usage: true },
      });
      let usage: OpenAI.CompletionUsage | undefined;
      for await (const chunk of stream) if (chunk.usage) usage = chunk.usage;
      expect(usage).toEqual({
        prompt_tokens: 50,
        completion_tokens: 40,
        total_tokens: 90,
        prompt_tokens_details: { cached_tokens: 0 },
        completion_tokens_details: { reasoning_tokens: 32 },
      });
    });
  });
});

/** An OpenAI-compatible upstream that reports whatever usage the test sets, hostile values included. */
describe('client compatibility: usage details an upstream gets wrong', () => {
  let upstream: Server;
  let t: TestApp;
  let reported: unknown;

  beforeAll(async () => {
    upstream = createServer((req, res) => {
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(
          JSON.stringify({
            id: 'chatcmpl-x',
            object: 'chat.completion',
            created: 1_795_000_000,
            model: 'gpt-4o-mini',
            choices: [{ index: 0, message: { role: 'assistant', content: 'Short answer.' }, finish_reason: 'stop', logprobs: null }],
            usage: reported,
          }),
        );
      });
    });
    await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve));
    const { port } = upstream.address() as AddressInfo;
    t = await startTestApp({ config: { providers: { openai: { apiKey: 'sk-upstream', baseUrl: `http://127.0.0.1:${port}/v1` } }, llmSimulator: 'off' } });
  });
  afterAll(async () => {
    await t.close();
    await new Promise((resolve) => upstream.close(resolve));
  });

  it('keeps only non-negative integer counts, none above the total it details', async () => {
    reported = {
      prompt_tokens: 30,
      completion_tokens: 10,
      total_tokens: 40,
      prompt_tokens_details: { cached_tokens: 12, audio_tokens: -5, image_tokens: 'many' },
      completion_tokens_details: { reasoning_tokens: 999, audio_tokens: 1.5, accepted_prediction_tokens: 0, rejected_prediction_tokens: null },
    };
    const workspace = await t.createWorkspace();
    const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }] });
    expect(completion.usage).toEqual({
      prompt_tokens: 30,
      completion_tokens: 10,
      total_tokens: 40,
      prompt_tokens_details: { cached_tokens: 12 },
      completion_tokens_details: { reasoning_tokens: 10, accepted_prediction_tokens: 0 },
    });
  });

  it('details that are not objects are dropped', async () => {
    reported = { prompt_tokens: 30, completion_tokens: 10, total_tokens: 40, prompt_tokens_details: 'x', completion_tokens_details: [5] };
    const workspace = await t.createWorkspace();
    const completion = await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', messages: [{ role: 'user', content: 'Hi' }] });
    expect(completion.usage).toEqual({ prompt_tokens: 30, completion_tokens: 10, total_tokens: 40 });
  });
});
