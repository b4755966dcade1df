import { createOpenAI } from '@ai-sdk/openai';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { ChatOpenAI } from '@langchain/openai';
import { generateObject, generateText, jsonSchema, stepCountIs, streamText, tool } from 'ai';
import { execFileSync } from 'node:child_process';
import { z } from 'zod';
import { AssistantsService } from '../src/assistants/assistants.service';
import { FakeAnthropic, startFakeAnthropic, toolUseReply } from './fakes/fake-anthropic';
import { FakeOpenAi, startFakeOpenAi } from './fakes/fake-openai';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';

/**
 * What users of the most common OpenAI clients do first, run with those clients against the
 * service: once on the built-in simulator (what a newcomer without provider keys meets), once
 * in front of fakes of OpenAI and Anthropic (so the adapters run for real).
 */

const Weather = z.object({
  city: z.string().describe('The city'),
  temperature_c: z.number(),
  conditions: z.enum(['sunny', 'cloudy', 'rain']),
  forecast: z.array(z.object({ day: z.string(), high_c: z.number() })),
});

/** Weather, as the JSON Schema a prompt can carry. */
const WEATHER_JSON_SCHEMA = {
  type: 'object',
  properties: {
    city: { type: 'string' },
    temperature_c: { type: 'number' },
    conditions: { type: 'string', enum: ['sunny', 'cloudy', 'rain'] },
    forecast: { type: 'array', items: { type: 'object', properties: { day: { type: 'string' }, high_c: { type: 'number' } }, required: ['day', 'high_c'] } },
  },
  required: ['city', 'temperature_c', 'conditions', 'forecast'],
};

const weatherTool = {
  type: 'function' as const,
  function: {
    name: 'get_weather',
    description: 'Current weather in a city',
    parameters: {
      type: 'object' as const,
      properties: { city: { type: 'string' as const } },
      required: ['city'],
      additionalProperties: false,
    },
  },
};

describe('OpenAI clients against the service', () => {
  let simulated: TestApp;
  let proxied: TestApp;
  let openai: FakeOpenAi;
  let anthropic: FakeAnthropic;
  let onSimulator: TestWorkspace;
  let onProviders: TestWorkspace;

  beforeAll(async () => {
    openai = await startFakeOpenAi();
    anthropic = await startFakeAnthropic();
    simulated = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    proxied = await startTestApp({
      config: {
        llmSimulator: 'off',
        providers: {
          openai: { apiKey: 'sk-upstream', baseUrl: openai.url },
          anthropic: { apiKey: 'sk-ant-upstream', baseUrl: anthropic.url },
        },
        upstreamMaxRetries: 0,
      },
    });
    onSimulator = await simulated.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    onProviders = await proxied.createWorkspace({ tier: 'team', balanceMillicents: 10_000_000 });
    await simulated.app.get(AssistantsService).create(onSimulator.id, {
      name: 'Support Bot',
      model: 'claude-haiku-4-5',
      systemPrompt: 'You are Support Bot.',
    });
  });
  afterAll(async () => {
    await simulated?.close();
    await proxied?.close();
    await openai?.close();
    await anthropic?.close();
  });

  const langchain = (app: TestApp, workspace: TestWorkspace, model: string) =>
    new ChatOpenAI({ model, apiKey: workspace.apiKey, configuration: { baseURL: `${app.baseUrl}/v1` }, maxRetries: 0 });
  const compatible = (app: TestApp, workspace: TestWorkspace) =>
    createOpenAICompatible({ name: 'acs', baseURL: `${app.baseUrl}/v1`, apiKey: workspace.apiKey, includeUsage: true, supportsStructuredOutputs: true });
  const official = (app: TestApp, workspace: TestWorkspace) => createOpenAI({ baseURL: `${app.baseUrl}/v1`, apiKey: workspace.apiKey });
  const wallet = async (workspace: TestWorkspace) =>
    (await workspace.client.get('/wallet')) as { balanceMillicents: number; reservedMillicents: number };

  describe('LangChain JS (@langchain/openai)', () => {
    it('invokes and streams on the simulator, with usage', async () => {
      const model = langchain(simulated, onSimulator, 'gpt-4o-mini');
      const answer = await model.invoke('Say hello');
      expect(typeof answer.content).toBe('string');
      expect(answer.usage_metadata?.input_tokens).toBeGreaterThan(0);
      let streamed = '';
      let outputTokens = 0;
      for await (const chunk of await model.stream('Say hello again')) {
        streamed += chunk.content;
        outputTokens += chunk.usage_metadata?.output_tokens ?? 0;
      }
      expect(streamed.length).toBeGreaterThan(0);
      expect(outputTokens).toBeGreaterThan(0);
    });

    it.each(['jsonSchema', 'jsonMode', 'functionCalling'] as const)(
      'withStructuredOutput (%s) parses an object on the simulator',
      async (method) => {
        const model = langchain(simulated, onSimulator, 'gpt-4o-mini').withStructuredOutput(Weather, { method });
        // JSON mode sends no schema: as with a real model, the prompt says what the JSON must hold.
        const weather = await model.invoke(`The weather in Paris, as JSON valid against this JSON Schema: ${JSON.stringify(WEATHER_JSON_SCHEMA)}`);
        expect(Weather.safeParse(weather).success).toBe(true);
      },
    );

    it('is made to call a tool with tool_choice "required" on the simulator', async () => {
      const model = langchain(simulated, onSimulator, 'gpt-4o-mini').bindTools([weatherTool], { tool_choice: 'required' });
      const answer = await model.invoke('Nothing here names the tool');
      expect(answer.tool_calls).toEqual([expect.objectContaining({ name: 'get_weather', args: { city: expect.any(String) } })]);
    });

    it('selects an assistant through model "assistant/<slug>"', async () => {
      const answer = await langchain(simulated, onSimulator, 'assistant/support-bot').invoke('Who are you?');
      expect(answer.response_metadata.model_name).toBe('claude-haiku-4-5');
    });

    it('reports reasoning tokens from the upstream in output_token_details', async () => {
      openai.script({ kind: 'text', text: 'Thought about it.', usage: { prompt_tokens: 50, completion_tokens: 40, reasoning_tokens: 32 } });
      const answer = await langchain(proxied, onProviders, 'gpt-4o').invoke('Think');
      expect(answer.content).toBe('Thought about it.');
      expect(answer.usage_metadata).toMatchObject({ input_tokens: 50, output_tokens: 40, output_token_details: { reasoning: 32 } });
    });

    it('gets structured output from a Claude model through the Anthropic adapter', async () => {
      // Claude is made to answer through a forced tool that carries the schema; the fake answers with that tool.
      anthropic.script((request) =>
        toolUseReply([
          {
            name: request.body.tool_choice?.name ?? 'missing_forced_tool',
            input: { city: 'Paris', temperature_c: 21, conditions: 'sunny', forecast: [{ day: 'Tuesday', high_c: 23 }] },
          },
        ]),
      );
      const weather = await langchain(proxied, onProviders, 'claude-haiku-4-5').withStructuredOutput(Weather, { method: 'jsonSchema' }).invoke('Paris weather');
      expect(weather).toEqual({ city: 'Paris', temperature_c: 21, conditions: 'sunny', forecast: [{ day: 'Tuesday', high_c: 23 }] });
    });
  });

  describe.each([
    ['@ai-sdk/openai-compatible', (app: TestApp, workspace: TestWorkspace, id: string) => compatible(app, workspace).chatModel(id)],
    ['@ai-sdk/openai (chat)', (app: TestApp, workspace: TestWorkspace, id: string) => official(app, workspace).chat(id)],
  ])('the AI SDK with %s', (_provider, model) => {
    it('generates and streams text on the simulator, with usage, and charges it', async () => {
      const before = await wallet(onSimulator);
      const result = await generateText({ model: model(simulated, onSimulator, 'gpt-4o-mini'), prompt: 'Say hello', maxRetries: 0 });
      expect(result.text.length).toBeGreaterThan(0);
      expect(result.usage.inputTokens).toBeGreaterThan(0);
      const stream = streamText({ model: model(simulated, onSimulator, 'gpt-4o-mini'), prompt: 'Say hello', maxRetries: 0 });
      let text = '';
      for await (const part of stream.textStream) text += part;
      expect(text.length).toBeGreaterThan(0);
      expect((await stream.usage).outputTokens).toBeGreaterThan(0);
      expect((await wallet(onSimulator)).balanceMillicents).toBeLessThan(before.balanceMillicents);
    });

    it('generateObject returns an object valid against the schema on the simulator', async () => {
      // The zod schema as the AI SDK converts it (zod's own types are too deep for the SDK's inference here).
      const schema = jsonSchema<z.infer<typeof Weather>>(WEATHER_JSON_SCHEMA as Parameters<typeof jsonSchema>[0]);
      const { object } = await generateObject({ model: model(simulated, onSimulator, 'gpt-4o-mini'), schema, prompt: 'Paris weather', maxRetries: 0 });
      expect(Weather.safeParse(object).success).toBe(true);
    });

    it('toolChoice "required" calls a tool on the simulator', async () => {
      const result = await generateText({
        model: model(simulated, onSimulator, 'gpt-4o-mini'),
        prompt: 'Nothing here names the tool',
        tools: { get_weather: tool({ description: 'Current weather', inputSchema: jsonSchema<{ city: string }>(weatherTool.function.parameters) }) },
        toolChoice: 'required',
        stopWhen: stepCountIs(1),
        maxRetries: 0,
      });
      expect(result.toolCalls).toEqual([expect.objectContaining({ toolName: 'get_weather', input: { city: expect.any(String) } })]);
    });

    it('runs a multi-step tool round trip on the simulator', async () => {
      const result = await generateText({
        model: model(simulated, onSimulator, 'gpt-4o-mini'),
        prompt: 'Use get_weather for Paris',
        tools: {
          get_weather: tool({
            description: 'Current weather',
            inputSchema: jsonSchema<{ city: string }>(weatherTool.function.parameters),
            execute: async ({ city }) => ({ city, temperature_c: 21 }),
          }),
        },
        stopWhen: stepCountIs(3),
        maxRetries: 0,
      });
      expect(result.steps.length).toBeGreaterThanOrEqual(2);
      expect(result.steps[0].toolCalls[0]?.toolName).toBe('get_weather');
      expect(result.text.length).toBeGreaterThan(0);
    });

    it('selects an assistant through model "assistant/<slug>"', async () => {
      const result = await generateText({ model: model(simulated, onSimulator, 'assistant/support-bot'), prompt: 'Who are you?', maxRetries: 0 });
      expect(result.response.modelId).toBe('claude-haiku-4-5');
    });

    it('generateObject returns the object a Claude model gave through the Anthropic adapter', async () => {
      anthropic.script((request) =>
        toolUseReply([
          {
            name: request.body.tool_choice?.name ?? 'missing_forced_tool',
            input: { city: 'Oslo', temperature_c: 4, conditions: 'rain', forecast: [] },
          },
        ]),
      );
      const schema = jsonSchema<z.infer<typeof Weather>>(WEATHER_JSON_SCHEMA as Parameters<typeof jsonSchema>[0]);
      const { object } = await generateObject({ model: model(proxied, onProviders, 'claude-haiku-4-5'), schema, prompt: 'Oslo weather', maxRetries: 0 });
      expect(object).toEqual({ city: 'Oslo', temperature_c: 4, conditions: 'rain', forecast: [] });
    });

    it('reports reasoning tokens from the upstream', async () => {
      openai.script({ kind: 'text', text: 'Thought about it.', usage: { prompt_tokens: 50, completion_tokens: 40, reasoning_tokens: 32 } });
      const result = await generateText({ model: model(proxied, onProviders, 'gpt-4o'), prompt: 'Think', maxRetries: 0 });
      expect(result.text).toBe('Thought about it.');
      expect(result.usage).toMatchObject({ inputTokens: 50, outputTokens: 40, reasoningTokens: 32 });
    });
  });

  describe('the official openai SDK', () => {
    it('lists assistants as models after the catalog when asked, and retrieves one', async () => {
      // The specification's list holds the eight catalog models: assistants only on request.
      expect((await onSimulator.client.models.list()).data.map((m) => m.id)).not.toContain('assistant/support-bot');
      const models = await onSimulator.client.models.list({ query: { include_assistants: 'true' } });
      const ids = models.data.map((m) => m.id);
      expect(ids).toEqual(expect.arrayContaining(['gpt-4o-mini', 'claude-haiku-4-5', 'assistant/support-bot']));
      expect(ids.indexOf('assistant/support-bot')).toBeGreaterThan(ids.indexOf('claude-haiku-4-5'));
      const entry = await onSimulator.client.models.retrieve('assistant/support-bot');
      expect(entry).toMatchObject({ id: 'assistant/support-bot', owned_by: 'assistant', assistant: { name: 'Support Bot', model: 'claude-haiku-4-5' } });
      // Another workspace does not see it.
      const other = await simulated.createWorkspace();
      expect((await other.client.models.list({ query: { include_assistants: 'true' } })).data.map((m) => m.id)).not.toContain('assistant/support-bot');
    });
  });

  describe('openai-python', () => {
    const python = (() => {
      try {
        execFileSync('python3', ['-c', 'import openai'], { stdio: 'ignore' });
        return true;
      } catch {
        return false;
      }
    })();
    if (!python) {
      // PyPI is not reachable from this machine or CI, and Debian has no python3-openai: said out loud, not hidden.
      console.warn('SKIPPED: openai-python is not installed (pip cannot reach PyPI here); its cases are covered over raw HTTP in request-compat.');
    }
    (python ? it : it.skip)('sends max_tokens=None and parses structured output', async () => {
      const script = [
        'import json, sys, openai',
        'client = openai.OpenAI(base_url=sys.argv[1], api_key=sys.argv[2], max_retries=0)',
        'r = client.chat.completions.create(model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], max_tokens=None)',
        'print(json.dumps({"finish": r.choices[0].finish_reason, "text": r.choices[0].message.content}))',
      ].join('\n');
      const out = JSON.parse(execFileSync('python3', ['-c', script, `${simulated.baseUrl}/v1`, onSimulator.apiKey]).toString());
      expect(out.finish).toBe('stop');
      expect(out.text.length).toBeGreaterThan(0);
    });
  });
});
