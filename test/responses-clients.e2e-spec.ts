import { createOpenAI } from '@ai-sdk/openai';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import OpenAI from 'openai';
import { DataSource } from 'typeorm';
import { AssistantsService } from '../src/assistants/assistants.service';
import { FakeAnthropic, startFakeAnthropic, textReply, toolUseReply } from './fakes/fake-anthropic';
import { FakeGemini, startFakeGemini } from './fakes/fake-gemini';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/**
 * The Responses API as clients use it: the AI SDK's default `createOpenAI({baseURL})(model)`
 * (which calls `/responses`) and the openai SDK, on the built-in simulator and in front of
 * fakes of OpenAI and Anthropic, so that each provider adapter translates from the chat core.
 */

const WEATHER_PARAMETERS = { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false };
const weatherFunction = { type: 'function' as const, name: 'get_weather', description: 'Current weather in a city', parameters: WEATHER_PARAMETERS, strict: true };
const CITY_SCHEMA = {
  type: 'object',
  properties: { city: { type: 'string' }, temperature_c: { type: 'number' } },
  required: ['city', 'temperature_c'],
  additionalProperties: false,
};

type WithService<T> = T & { x_service: { cost_millicents: number; iterations: number; tools_used: string[] } };

describe('Responses API clients', () => {
  let simulated: TestApp;
  let proxied: TestApp;
  let openai: FakeOpenAi;
  let anthropic: FakeAnthropic;
  let gemini: FakeGemini;
  let onSimulator: TestWorkspace;
  let onProviders: TestWorkspace;

  beforeAll(async () => {
    openai = await startFakeOpenAi();
    anthropic = await startFakeAnthropic();
    gemini = await startFakeGemini({ apiKey: 'goog-upstream' });
    simulated = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    proxied = await startTestApp({
      config: {
        llmSimulator: 'off',
        providers: {
          openai: { apiKey: 'sk-upstream', baseUrl: openai.url },
          anthropic: { apiKey: 'sk-ant-upstream', baseUrl: anthropic.url },
          google: { apiKey: 'goog-upstream', baseUrl: gemini.url },
        },
        upstreamMaxRetries: 0,
      },
    });
    onSimulator = await simulated.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    onProviders = await proxied.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    await simulated.app.get(AssistantsService).create(onSimulator.id, { name: 'Support Bot', model: 'claude-haiku-4-5', systemPrompt: 'You are Support Bot.' });
  });
  afterAll(async () => {
    await simulated?.close();
    await proxied?.close();
    await openai?.close();
    await anthropic?.close();
    await gemini?.close();
  });

  /** The AI SDK's default model: `createOpenAI(...)(id)` is its Responses API model. */
  const aiSdk = (app: TestApp, workspace: TestWorkspace) => createOpenAI({ baseURL: `${app.baseUrl}/v1`, apiKey: workspace.apiKey });
  const wallet = async (workspace: TestWorkspace) => (await workspace.client.get('/wallet')) as { balanceMillicents: number; reservedMillicents: number };
  const usageRecords = async (app: TestApp, workspace: TestWorkspace) => {
    await app.settled(workspace.id);
    return app.app.get(DataSource).query(`SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1 ORDER BY created_at`, [workspace.id]);
  };

  describe('the AI SDK (createOpenAI(...)(model) calls /responses)', () => {
    it('generates and streams text on the simulator, with usage, and charges it', async () => {
      const before = await wallet(onSimulator);
      const result = await generateText({ model: aiSdk(simulated, onSimulator)('gpt-4o-mini'), prompt: 'Say hello', maxRetries: 0 });
      expect(result.text.length).toBeGreaterThan(0);
      expect(result.usage.inputTokens).toBeGreaterThan(0);
      expect(result.usage.outputTokens).toBeGreaterThan(0);
      expect(result.response.id).toMatch(/^resp_/);

      const stream = streamText({ model: aiSdk(simulated, onSimulator)('gpt-4o-mini'), prompt: 'Say hello again', maxRetries: 0 });
      let text = '';
      for await (const part of stream.textStream) text += part;
      expect(text.length).toBeGreaterThan(0);
      expect((await stream.usage).outputTokens).toBeGreaterThan(0);
      expect(await stream.finishReason).toBe('stop');

      const after = await wallet(onSimulator);
      expect(after.balanceMillicents).toBeLessThan(before.balanceMillicents);
      expect(after.reservedMillicents).toBe(0);
    });

    it('runs a multi-step tool round trip on the simulator (the second step sends the call and its output back)', async () => {
      const executed: string[] = [];
      const result = await generateText({
        model: aiSdk(simulated, onSimulator)('gpt-4o-mini'),
        prompt: 'Use get_weather for Paris',
        tools: {
          get_weather: tool({
            description: 'Current weather',
            inputSchema: jsonSchema<{ city: string }>(WEATHER_PARAMETERS as Parameters<typeof jsonSchema>[0]),
            execute: async ({ city }) => {
              executed.push(city);
              return { city, temperature_c: 21 };
            },
          }),
        },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      });
      expect(executed.length).toBeGreaterThan(0);
      expect(result.steps.length).toBeGreaterThanOrEqual(2);
      expect(result.steps[0].toolCalls[0]?.toolName).toBe('get_weather');
      expect(result.text.length).toBeGreaterThan(0);
    });

    it('generateObject sends text.format json_schema and parses the object on the simulator', async () => {
      const { object } = await generateObject({
        model: aiSdk(simulated, onSimulator)('gpt-4o-mini'),
        schema: jsonSchema<{ city: string; temperature_c: number }>(CITY_SCHEMA as Parameters<typeof jsonSchema>[0]),
        prompt: 'Paris weather',
        maxRetries: 0,
      });
      expect(object).toEqual({ city: expect.any(String), temperature_c: expect.any(Number) });
    });

    it('selects an assistant through model "assistant/<slug>"', async () => {
      const result = await generateText({ model: aiSdk(simulated, onSimulator)('assistant/support-bot'), prompt: 'Who are you?', maxRetries: 0 });
      expect(result.response.modelId).toBe('claude-haiku-4-5');
    });

    it('streams a multi-step tool round trip where the model spoke before calling (its message comes back as an item_reference)', async () => {
      anthropic.script(
        toolUseReply([{ id: 'toolu_w', name: 'get_weather', input: { city: 'Rome' } }], { text: 'Let me check.' }),
        textReply('Rome is sunny.'),
      );
      const bodies: Array<{ input: Array<{ type?: string }> }> = [];
      const recording = createOpenAI({
        baseURL: `${proxied.baseUrl}/v1`,
        apiKey: onProviders.apiKey,
        fetch: (url, init) => {
          bodies.push(JSON.parse(String(init?.body)) as (typeof bodies)[number]);
          return fetch(url, init);
        },
      });
      const stream = streamText({
        model: recording('claude-haiku-4-5'),
        prompt: 'Weather in Rome?',
        tools: {
          get_weather: tool({
            description: 'Current weather',
            inputSchema: jsonSchema<{ city: string }>(WEATHER_PARAMETERS as Parameters<typeof jsonSchema>[0]),
            execute: async ({ city }) => ({ city, conditions: 'sunny' }),
          }),
        },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      });
      let text = '';
      for await (const part of stream.textStream) text += part;
      expect(text).toBe('Let me check.Rome is sunny.');
      expect((await stream.steps).length).toBe(2);
      expect(bodies[1].input.map((item) => item.type ?? 'message')).toEqual(['message', 'item_reference', 'function_call', 'function_call_output']);
      // The second request carried the first step's text (by reference to the stored item), the call and its result.
      const second = anthropic.requests[anthropic.requests.length - 1].body;
      expect(second.messages).toEqual([
        { role: 'user', content: 'Weather in Rome?' },
        { role: 'assistant', content: [expect.objectContaining({ type: 'text', text: 'Let me check.' }), expect.objectContaining({ type: 'tool_use', id: 'toolu_w', name: 'get_weather', input: { city: 'Rome' } })] },
        { role: 'user', content: [expect.objectContaining({ type: 'tool_result', tool_use_id: 'toolu_w' })] },
      ]);
    });

    it('generates and streams through the fake OpenAI and the fake Anthropic (each adapter translating from the chat core)', async () => {
      openai.script({ kind: 'text', text: 'Hello from OpenAI.' }, { kind: 'text', text: 'Streamed from OpenAI.' });
      const viaOpenAi = await generateText({ model: aiSdk(proxied, onProviders)('gpt-4o-mini'), system: 'Be brief.', prompt: 'Hi', maxRetries: 0 });
      expect(viaOpenAi.text).toBe('Hello from OpenAI.');
      expect(openai.requests[openai.requests.length - 1].body.messages).toEqual([
        { role: 'system', content: 'Be brief.' },
        { role: 'user', content: [{ type: 'text', text: 'Hi' }] },
      ]);
      const openAiStream = streamText({ model: aiSdk(proxied, onProviders)('gpt-4o-mini'), prompt: 'Hi', maxRetries: 0 });
      let openAiText = '';
      for await (const part of openAiStream.textStream) openAiText += part;
      expect(openAiText).toBe('Streamed from OpenAI.');

      anthropic.script(textReply('Hello from Claude.', { usage: { input_tokens: 30, output_tokens: 5 } }), textReply('Streamed from Claude.'));
      const viaClaude = await generateText({ model: aiSdk(proxied, onProviders)('claude-haiku-4-5'), system: 'Be brief.', prompt: 'Hi', maxRetries: 0 });
      expect(viaClaude.text).toBe('Hello from Claude.');
      expect(viaClaude.usage).toMatchObject({ inputTokens: 30, outputTokens: 5 });
      expect(anthropic.requests[anthropic.requests.length - 1].body.system).toEqual(expect.stringContaining('Be brief.'));
      const claudeStream = streamText({ model: aiSdk(proxied, onProviders)('claude-haiku-4-5'), prompt: 'Hi', maxRetries: 0 });
      let claudeText = '';
      for await (const part of claudeStream.textStream) claudeText += part;
      expect(claudeText).toBe('Streamed from Claude.');
      expect((await wallet(onProviders)).reservedMillicents).toBe(0);
    });
  });

  describe('LangChain JS (ChatOpenAI with useResponsesApi)', () => {
    it('invokes, streams and calls a bound tool through /v1/responses on the simulator', async () => {
      const requests: string[] = [];
      const llm = new ChatOpenAI({
        model: 'gpt-4o-mini',
        apiKey: onSimulator.apiKey,
        useResponsesApi: true,
        maxRetries: 0,
        configuration: {
          baseURL: `${simulated.baseUrl}/v1`,
          fetch: (url: string | URL | Request, init?: RequestInit) => {
            requests.push(String(url));
            return fetch(url, init);
          },
        },
      });
      const answer = await llm.invoke('Say hello');
      expect(typeof answer.content === 'string' ? answer.content : answer.text).not.toHaveLength(0);
      expect(answer.usage_metadata?.input_tokens).toBeGreaterThan(0);
      let streamed = '';
      for await (const chunk of await llm.stream('Say hello again')) streamed += chunk.text;
      expect(streamed.length).toBeGreaterThan(0);
      const getWeather = { type: 'function' as const, function: { name: 'get_weather', description: 'Current weather in a city', parameters: WEATHER_PARAMETERS } };
      const withTool = await llm.bindTools([getWeather]).invoke('Use get_weather for Paris');
      expect(withTool.tool_calls?.[0]).toMatchObject({ name: 'get_weather', args: { city: expect.any(String) } });
      expect(requests.length).toBeGreaterThanOrEqual(3);
      expect(requests.every((url) => url.endsWith('/v1/responses'))).toBe(true);
    });
  });

  describe('the openai SDK', () => {
    it('creates plain and streamed responses on the simulator, and continues one with previous_response_id', async () => {
      const first = await onSimulator.client.responses.create({ model: 'gpt-4o-mini', input: 'Say hello' });
      expect(first.status).toBe('completed');
      expect(first.output_text.length).toBeGreaterThan(0);
      expect(first.usage?.input_tokens).toBeGreaterThan(0);

      const stream = onSimulator.client.responses.stream({ model: 'claude-haiku-4-5', input: 'Tell me a story', previous_response_id: first.id });
      let streamed = '';
      stream.on('response.output_text.delta', (event) => {
        streamed += event.delta;
      });
      const final = await stream.finalResponse();
      expect(streamed.length).toBeGreaterThan(0);
      expect(final.output_text).toBe(streamed);
      expect(final.previous_response_id).toBe(first.id);
      // The continuation's prompt held the first turn: more input tokens than the first request.
      expect(final.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens);
    });

    it('function tools round trip on the simulator: tool_choice required calls get_weather, its output gets an answer', async () => {
      const call = await onSimulator.client.responses.create({ model: 'gpt-4o-mini', input: 'Weather in Paris?', tools: [weatherFunction], tool_choice: 'required' });
      const functionCall = call.output.find((item): item is OpenAI.Responses.ResponseFunctionToolCall => item.type === 'function_call');
      expect(functionCall).toMatchObject({ name: 'get_weather', call_id: expect.any(String) });
      expect(JSON.parse(functionCall!.arguments)).toEqual({ city: expect.any(String) });

      const answer = await onSimulator.client.responses.create({
        model: 'gpt-4o-mini',
        previous_response_id: call.id,
        input: [{ type: 'function_call_output', call_id: functionCall!.call_id, output: '{"temperature_c": 21}' }],
        tools: [weatherFunction],
      });
      expect(answer.output_text.length).toBeGreaterThan(0);
    });

    it('structured output on the simulator: responses.parse with a json_schema format', async () => {
      const response = await onSimulator.client.responses.parse({
        model: 'gpt-4o-mini',
        input: 'Paris weather',
        text: { format: { type: 'json_schema', name: 'weather', schema: CITY_SCHEMA, strict: true } },
      });
      expect(response.output_parsed).toEqual({ city: expect.any(String), temperature_c: expect.any(Number) });
    });

    it('through the fake Anthropic: text, a streamed answer, and a function call as a function_call item', async () => {
      anthropic.script(textReply('Bonjour.', { usage: { input_tokens: 20, output_tokens: 2 } }));
      const plain = await onProviders.client.responses.create({ model: 'claude-haiku-4-5', instructions: 'Answer in French.', input: 'Hello' });
      expect(plain.output_text).toBe('Bonjour.');
      expect(plain.usage).toMatchObject({ input_tokens: 20, output_tokens: 2, total_tokens: 22 });
      const sent = anthropic.requests[anthropic.requests.length - 1].body;
      expect(JSON.stringify(sent.system)).toContain('Answer in French.');
      expect(sent.messages).toEqual([{ role: 'user', content: 'Hello' }]);

      anthropic.script(textReply('Il était une fois.'));
      const events: string[] = [];
      const stream = onProviders.client.responses.stream({ model: 'claude-haiku-4-5', input: 'A story' });
      stream.on('event', (event) => events.push(event.type));
      expect((await stream.finalResponse()).output_text).toBe('Il était une fois.');
      expect(events[0]).toBe('response.created');
      expect(events[events.length - 1]).toBe('response.completed');

      anthropic.script(toolUseReply([{ id: 'toolu_1', name: 'get_weather', input: { city: 'Lyon' } }]));
      const withCall = await onProviders.client.responses.create({ model: 'claude-haiku-4-5', input: 'Weather in Lyon?', tools: [weatherFunction] });
      expect(withCall.output).toEqual([expect.objectContaining({ type: 'function_call', call_id: 'toolu_1', name: 'get_weather', arguments: '{"city":"Lyon"}' })]);
    });

    it('through the fake Gemini: text, a streamed answer, and a function call', async () => {
      gemini.script(
        { answer: { text: 'Hallo.', usage: { promptTokenCount: 12, candidatesTokenCount: 2 } } },
        { answer: { text: 'Es war einmal.' } },
        { answer: { functionCalls: [{ name: 'get_weather', args: { city: 'Bern' } }] } },
      );
      const plain = await onProviders.client.responses.create({ model: 'gemini-2.5-flash', instructions: 'Answer in German.', input: 'Hello' });
      expect(plain.output_text).toBe('Hallo.');
      expect(plain.usage).toMatchObject({ input_tokens: 12, output_tokens: 2 });
      expect(JSON.stringify(gemini.requests[gemini.requests.length - 1].body)).toContain('Answer in German.');

      const streamed = await onProviders.client.responses.stream({ model: 'gemini-2.5-flash', input: 'A story' }).finalResponse();
      expect(streamed.output_text).toBe('Es war einmal.');

      const withCall = await onProviders.client.responses.create({ model: 'gemini-2.5-flash', input: 'Weather in Bern?', tools: [weatherFunction] });
      expect(withCall.output).toEqual([expect.objectContaining({ type: 'function_call', name: 'get_weather', call_id: expect.any(String) })]);
      expect(JSON.parse((withCall.output[0] as OpenAI.Responses.ResponseFunctionToolCall).arguments)).toEqual({ city: 'Bern' });
    });

    it('a Claude request through /v1/responses is charged exactly what the same chat completion is', async () => {
      const viaChat = await proxied.createWorkspace({ balanceMillicents: 1_000_000 });
      const viaResponses = await proxied.createWorkspace({ balanceMillicents: 1_000_000 });
      // No usage reported: the service counts the tokens of the prompt it translated, which must be the same.
      anthropic.script(textReply('Ok, noted.', { usage: {} }), textReply('Ok, noted.', { usage: {} }));
      const completion = (await viaChat.client.chat.completions.create({
        model: 'claude-haiku-4-5',
        messages: [
          { role: 'system', content: 'Be terse.' },
          { role: 'user', content: 'Note that the meeting is at noon.' },
        ],
        max_tokens: 200,
      })) as WithService<OpenAI.Chat.ChatCompletion>;
      const response = (await viaResponses.client.responses.create({
        model: 'claude-haiku-4-5',
        instructions: 'Be terse.',
        input: 'Note that the meeting is at noon.',
        max_output_tokens: 200,
      })) as WithService<OpenAI.Responses.Response>;
      const [chatRecord] = await usageRecords(proxied, viaChat);
      const [responsesRecord] = await usageRecords(proxied, viaResponses);
      expect(Number(chatRecord.charged_millicents)).toBeGreaterThan(0);
      expect(Number(responsesRecord.charged_millicents)).toBe(Number(chatRecord.charged_millicents));
      expect(responsesRecord.input_tokens).toBe(chatRecord.input_tokens);
      expect(response.x_service.cost_millicents).toBe(completion.x_service.cost_millicents);
    });
  });
});
