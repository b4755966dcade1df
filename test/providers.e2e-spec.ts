import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { FakeAnthropic, startFakeAnthropic, textReply, toolUseReply } from './fakes/fake-anthropic';
import { FakeGemini, startFakeGemini } from './fakes/fake-gemini';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/**
 * The whole service, driven by the OpenAI SDK, with each non-OpenAI provider's real adapter
 * talking to a fake of that provider: translation both ways, streaming and billing.
 */
describe('chat completions through the Anthropic provider', () => {
  let anthropic: FakeAnthropic;
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    anthropic = await startFakeAnthropic({ apiKey: 'sk-ant-test' });
    t = await startTestApp({
      config: { providers: { anthropic: { apiKey: 'sk-ant-test', baseUrl: anthropic.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
    });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await anthropic.close();
  });

  const last = () => anthropic.requests[anthropic.requests.length - 1];

  it('sends the system prompt apart, answers in the OpenAI shape, and bills Anthropic usage with cache reads', async () => {
    anthropic.script(
      textReply('Bonjour !', { usage: { input_tokens: 900, cache_read_input_tokens: 100, output_tokens: 4 } }),
    );
    const completion = await workspace.client.chat.completions.create({
      model: 'claude-haiku-4-5',
      messages: [
        { role: 'system', content: 'Answer in French.' },
        { role: 'user', content: 'Hello' },
      ],
      temperature: 1.5,
      max_tokens: 200,
    });
    expect(last().body).toMatchObject({
      model: 'claude-haiku-4-5',
      system: 'Answer in French.',
      messages: [{ role: 'user', content: 'Hello' }],
      max_tokens: 200,
      temperature: 1,
    });
    expect(completion.choices[0]).toMatchObject({ message: { role: 'assistant', content: 'Bonjour !' }, finish_reason: 'stop' });
    expect(completion.usage).toMatchObject({ prompt_tokens: 1_000, completion_tokens: 4, total_tokens: 1_004 });
    // claude-haiku-4-5: 900 x 100000 + 100 cached x 10000 + 4 x 500000, in millionths of a millicent.
    const cost = (900 * 100_000 + 100 * 10_000 + 4 * 500_000) / 1e6;
    expect((completion as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents).toBe(cost);
    await t.settled(workspace.id);
    const [record] = await t.app
      .get(DataSource)
      .query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC LIMIT 1`, [workspace.id]);
    expect(record).toMatchObject({ model: 'claude-haiku-4-5', input_tokens: 1_000, cached_tokens: 100, output_tokens: 4 });
  });

  it('streams Claude text and tool calls as OpenAI chunks', async () => {
    anthropic.script(textReply('one two three', { usage: { input_tokens: 10, output_tokens: 3 } }));
    const stream = await workspace.client.chat.completions.create({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'count' }],
      stream: true,
      stream_options: { include_usage: true },
    });
    let text = '';
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? '';
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe('one two three');
    expect(usage).toMatchObject({ prompt_tokens: 10, completion_tokens: 3 });

    anthropic.script(toolUseReply([{ name: 'get_weather', input: { city: 'Oslo' }, id: 'toolu_1' }]));
    const toolStream = workspace.client.chat.completions.stream({
      model: 'claude-haiku-4-5',
      messages: [{ role: 'user', content: 'Weather in Oslo?' }],
      tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    const final = await toolStream.finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe('tool_calls');
    expect(final.choices[0].message.tool_calls?.[0]).toMatchObject({
      id: 'toolu_1',
      function: { name: 'get_weather', arguments: '{"city":"Oslo"}' },
    });
    expect(last().body.tools).toEqual([
      { name: 'get_weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } },
    ]);
  });

  it('maps an Anthropic refusal of the request to BadRequestError', async () => {
    anthropic.script({ kind: 'http_error', status: 400, message: 'messages: text content blocks must be non-empty' });
    const error = await workspace.client.chat.completions
      .create({ model: 'claude-haiku-4-5', messages: [{ role: 'user', content: 'x' }] })
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(OpenAI.BadRequestError);
    expect((error as Error).message).toContain('text content blocks must be non-empty');
  });
});

describe('chat completions through the Google provider', () => {
  let gemini: FakeGemini;
  let t: TestApp;
  let workspace: TestWorkspace;

  beforeAll(async () => {
    gemini = await startFakeGemini({ apiKey: 'gemini-test-key' });
    t = await startTestApp({
      config: { providers: { google: { apiKey: 'gemini-test-key', baseUrl: gemini.url } }, llmSimulator: 'off', upstreamMaxRetries: 0 },
    });
    workspace = await t.createWorkspace({ balanceMillicents: 1_000_000 });
  });
  afterAll(async () => {
    await t.close();
    await gemini.close();
  });

  const last = () => gemini.requests[gemini.requests.length - 1];

  it('translates the request, answers in the OpenAI shape and bills thinking tokens as output', async () => {
    gemini.script({
      answer: {
        text: 'Hallo!',
        usage: { promptTokenCount: 40, candidatesTokenCount: 2, thoughtsTokenCount: 8, cachedContentTokenCount: 10 },
      },
    });
    const completion = await workspace.client.chat.completions.create({
      model: 'gemini-2.5-flash',
      messages: [
        { role: 'system', content: 'Answer in German.' },
        { role: 'user', content: 'Hello' },
      ],
      max_tokens: 100,
    });
    expect(last().body).toMatchObject({
      systemInstruction: { parts: [{ text: 'Answer in German.' }] },
      contents: [{ role: 'user', parts: [{ text: 'Hello' }] }],
      generationConfig: { maxOutputTokens: 100 },
    });
    expect(completion.choices[0]).toMatchObject({ message: { content: 'Hallo!' }, finish_reason: 'stop' });
    expect(completion.usage).toMatchObject({ prompt_tokens: 40, completion_tokens: 10 });
    // gemini-2.5-flash: 30 x 30000 + 10 cached x 7500 + 10 x 250000, in millionths of a millicent.
    const cost = (30 * 30_000 + 10 * 7_500 + 10 * 250_000) / 1e6;
    expect((completion as unknown as { x_service: { cost_millicents: number } }).x_service.cost_millicents).toBe(cost);
  });

  it('streams Gemini text and function calls as OpenAI chunks', async () => {
    gemini.script({ answer: { text: 'alpha beta', usage: { promptTokenCount: 5, candidatesTokenCount: 2 } } });
    const stream = await workspace.client.chat.completions.create({
      model: 'gemini-2.5-flash',
      messages: [{ role: 'user', content: 'go' }],
      stream: true,
    });
    let text = '';
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? '';
    expect(text).toBe('alpha beta');

    gemini.script({ answer: { functionCalls: [{ name: 'get_weather', args: { city: 'Rome' } }] } });
    const final = await workspace.client.chat.completions
      .stream({
        model: 'gemini-2.5-flash',
        messages: [{ role: 'user', content: 'Weather in Rome?' }],
        tools: [{ type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
      })
      .finalChatCompletion();
    expect(final.choices[0].finish_reason).toBe('tool_calls');
    expect(JSON.parse(final.choices[0].message.tool_calls![0].function.arguments)).toEqual({ city: 'Rome' });
  });
});
