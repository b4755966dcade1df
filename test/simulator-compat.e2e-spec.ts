import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { DataSource } from 'typeorm';
import { z } from 'zod';
import { AssistantsService } from '../src/assistants/assistants.service';
import { DocumentsService } from '../src/assistants/documents/documents.service';
import { ModelsService } from '../src/models/models.service';
import { countTextTokens } from '../src/providers/tokens';
import { startTestApp, TestApp, TestWorkspace } from './support/test-app';
import { TOKENS_AS_INT } from './support/usage-records';

/**
 * The built-in simulator honours what clients ask of an answer's shape (`tool_choice`,
 * `response_format`, `stop`, `n`, `logprobs`), plain and streamed, through the official SDK:
 * with no provider keys it is what every newcomer's client talks to first.
 */

type Chunk = OpenAI.Chat.ChatCompletionChunk & { x_service?: { cost_millicents: number } };
type Completion = OpenAI.Chat.ChatCompletion & { x_service?: { cost_millicents: number } };
interface StreamedChoice {
  content: string;
  toolCalls: Array<{ name?: string; arguments: string }>;
  finish: string | null;
  logprobs: OpenAI.Chat.ChatCompletionTokenLogprob[];
}

const Weather = z.object({
  city: z.string(),
  temperature_c: z.number(),
  conditions: z.enum(['sunny', 'cloudy', 'rain']),
  wind: z.object({ speed_kmh: z.number().int().min(0), direction: z.enum(['N', 'E', 'S', 'W']) }).nullable(),
  forecast: z.array(z.object({ day: z.string(), high_c: z.number() })),
});

const tools: OpenAI.Chat.ChatCompletionFunctionTool[] = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string' },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
          days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city', 'unit', 'days'],
        additionalProperties: false,
      },
    },
  },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { type: 'string' } }, required: ['zone'] } } },
];

describe('the simulator honours what clients ask for', () => {
  let t: TestApp;
  let workspace: TestWorkspace;
  let db: DataSource;

  beforeAll(async () => {
    t = await startTestApp({ config: { llmSimulator: 'on', simulatorWordDelayMs: 0 } });
    workspace = await t.createWorkspace({ balanceMillicents: 10_000_000 });
    db = t.app.get(DataSource);
  });
  afterAll(async () => {
    await t?.close();
  });

  const messages = (content: string): OpenAI.Chat.ChatCompletionMessageParam[] => [{ role: 'user', content }];
  // Each request's charge commits before the next request: usage records committed in one
  // batch share their created_at, and expectChargedAsUsage reads the newest.
  afterEach(() => t.settled(workspace.id));
  const create = async (params: Omit<OpenAI.Chat.ChatCompletionCreateParamsNonStreaming, 'model'>) => {
    const completion = (await workspace.client.chat.completions.create({ model: 'gpt-4o-mini', ...params })) as Completion;
    await t.settled(workspace.id);
    return completion;
  };
  async function stream(params: Omit<OpenAI.Chat.ChatCompletionCreateParamsStreaming, 'model' | 'stream'>): Promise<Chunk[]> {
    const chunks: Chunk[] = [];
    const body = { model: 'gpt-4o-mini', stream: true as const, stream_options: { include_usage: true }, ...params };
    for await (const chunk of await workspace.client.chat.completions.create(body)) chunks.push(chunk as Chunk);
    await t.settled(workspace.id);
    return chunks;
  }
  /** What a stream said, per choice: its text, tool calls, finish and log-probabilities. */
  function assemble(chunks: Chunk[]) {
    const choices = new Map<number, StreamedChoice>();
    for (const chunk of chunks) {
      for (const choice of chunk.choices) {
        const entry = choices.get(choice.index) ?? { content: '', toolCalls: [], finish: null, logprobs: [] };
        choices.set(choice.index, entry);
        entry.content += choice.delta.content ?? '';
        for (const call of choice.delta.tool_calls ?? []) {
          entry.toolCalls[call.index] ??= { name: call.function?.name, arguments: '' };
          entry.toolCalls[call.index].arguments += call.function?.arguments ?? '';
        }
        entry.finish = choice.finish_reason ?? entry.finish;
        entry.logprobs.push(...(choice.logprobs?.content ?? []));
      }
    }
    return [...choices.entries()].sort(([a], [b]) => a - b).map(([, entry]) => entry);
  }
  const usageOf = (chunks: Chunk[]) => chunks.find((chunk) => chunk.usage)?.usage;
  const toolCall = (completion: Completion, choice = 0) => {
    const call = completion.choices[choice].message.tool_calls?.[0];
    return call?.type === 'function' ? { name: call.function.name, arguments: JSON.parse(call.function.arguments) as unknown } : undefined;
  };

  /** The charge is the catalog price of the usage reported, to the millionth of a millicent. */
  async function expectChargedAsUsage(usage: OpenAI.CompletionUsage | null | undefined, cost: number | undefined) {
    const model = t.app.get(ModelsService).get('gpt-4o-mini');
    const exact = (usage!.prompt_tokens * model.inputPrice + usage!.completion_tokens * model.outputPrice) / 1e6;
    expect(cost).toBe(exact);
    await t.settled(workspace.id);
    const [record] = await db.query(
      `SELECT *, ${TOKENS_AS_INT} FROM usage_records WHERE workspace_id = $1 ORDER BY created_at DESC LIMIT 1`,
      [workspace.id],
    );
    expect(record).toMatchObject({
      input_tokens: usage!.prompt_tokens,
      output_tokens: usage!.completion_tokens,
      total_cost_millicents: exact.toFixed(6),
    });
  }

  describe('citations', () => {
    it("answers from an assistant's documents citing the passages it used, so annotations work offline, plain and streamed", async () => {
      const bot = await t.app.get(AssistantsService).create(workspace.id, { name: 'Offline librarian', model: 'gpt-4o-mini', tools: ['file_search'] });
      const document = await t.app
        .get(DocumentsService)
        .add({ workspaceId: workspace.id, assistantId: bot.id, fileName: 'handbook.md', data: Buffer.from('The emergency generator is tested every Tuesday.') });
      const request = { assistant_id: bot.id, messages: messages('When is the emergency generator tested?') };
      const completion = await workspace.client.chat.completions.create(request as unknown as OpenAI.Chat.ChatCompletionCreateParamsNonStreaming);
      const { content, annotations } = completion.choices[0].message as unknown as { content: string; annotations: Array<{ type: string; file_citation: { file_id: string; start_index: number; end_index: number } }> };
      expect(content).toContain('The emergency generator is tested every Tuesday. [1]');
      expect(annotations).toHaveLength(1);
      expect(annotations[0]).toMatchObject({ type: 'file_citation', file_citation: { file_id: document.id, filename: 'handbook.md' } });
      expect(content.slice(annotations[0].file_citation.start_index, annotations[0].file_citation.end_index)).toBe('[1]');

      const stream = await workspace.client.chat.completions.create({ ...request, stream: true } as unknown as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
      const streamed: unknown[] = [];
      for await (const chunk of stream) streamed.push(...(((chunk.choices[0]?.delta as { annotations?: unknown[] }) ?? {}).annotations ?? []));
      expect(streamed).toEqual(annotations);
    });
  });

  describe('tool_choice', () => {
    it('"required" calls the tool the user names, else the first offered, with arguments valid against its schema', async () => {
      const named = await create({ messages: messages('What time is it? get_time please'), tools, tool_choice: 'required' });
      expect(toolCall(named)).toEqual({ name: 'get_time', arguments: { zone: 'What time is it? get_time please' } });
      expect(named.choices[0].finish_reason).toBe('tool_calls');

      const first = await create({ messages: messages('Nothing here names a tool'), tools, tool_choice: 'required' });
      expect(toolCall(first)).toEqual({ name: 'get_weather', arguments: { city: 'Nothing here names a tool', unit: 'celsius', days: 1 } });

      const streamed = assemble(await stream({ messages: messages('Nothing here names a tool'), tools, tool_choice: 'required' }));
      expect(streamed[0].toolCalls.map((call) => ({ name: call.name, arguments: JSON.parse(call.arguments) }))).toEqual([toolCall(first)]);
      expect(streamed[0].finish).toBe('tool_calls');
    });

    it('a named function calls that one; "none" never calls one, though the user names it', async () => {
      const forced = await create({
        messages: messages('Use get_time'),
        tools,
        tool_choice: { type: 'function', function: { name: 'get_weather' } },
      });
      expect(toolCall(forced)?.name).toBe('get_weather');

      const auto = await create({ messages: messages('Use get_time'), tools });
      expect(toolCall(auto)?.name).toBe('get_time');
      const none = await create({ messages: messages('Use get_time'), tools, tool_choice: 'none' });
      expect(none.choices[0]).toMatchObject({ message: { content: expect.stringContaining('[simulator]') }, finish_reason: 'stop' });
      expect(none.choices[0].message.tool_calls ?? []).toEqual([]);
      const streamed = assemble(await stream({ messages: messages('Use get_time'), tools, tool_choice: 'none' }));
      expect(streamed[0]).toMatchObject({ content: none.choices[0].message.content, toolCalls: [], finish: 'stop' });
    });
  });

  describe('response_format', () => {
    it('json_object answers a JSON object as text, plain and streamed', async () => {
      const plain = await create({ messages: messages('Answer in JSON'), response_format: { type: 'json_object' } });
      expect(JSON.parse(plain.choices[0].message.content!)).toEqual({ answer: expect.stringContaining('simulator') });
      const streamed = assemble(await stream({ messages: messages('Answer in JSON'), response_format: { type: 'json_object' } }));
      expect(streamed[0].content).toBe(plain.choices[0].message.content);
    });

    it('json_object follows a JSON Schema given in the prompt (how JSON mode is meant to be used)', async () => {
      const schema = JSON.stringify(zodResponseFormat(Weather, 'weather').json_schema.schema);
      const prompt: OpenAI.Chat.ChatCompletionMessageParam[] = [
        { role: 'system', content: `Answer with a JSON object following this JSON Schema: ${schema}` },
        { role: 'user', content: 'The weather in Paris' },
      ];
      const plain = await create({ messages: prompt, response_format: { type: 'json_object' } });
      expect(Weather.safeParse(JSON.parse(plain.choices[0].message.content!)).success).toBe(true);
      const streamed = assemble(await stream({ messages: prompt, response_format: { type: 'json_object' } }));
      expect(streamed[0].content).toBe(plain.choices[0].message.content);
    });

    it('json_schema answers an object valid against the schema: chat.completions.parse() with zodResponseFormat', async () => {
      const parsed = await workspace.client.chat.completions.parse({
        model: 'gpt-4o-mini',
        messages: messages('The weather in Paris'),
        response_format: zodResponseFormat(Weather, 'weather'),
      });
      expect(Weather.safeParse(parsed.choices[0].message.parsed).success).toBe(true);
      expect(parsed.choices[0].message.parsed?.city).toContain('simulated');
      await expectChargedAsUsage(parsed.usage, (parsed as unknown as Completion).x_service?.cost_millicents);
    });

    it('json_schema streams an object valid against the schema (chat.completions.stream with zodResponseFormat)', async () => {
      const runner = workspace.client.chat.completions.stream({
        model: 'gpt-4o-mini',
        messages: messages('The weather in Paris'),
        response_format: zodResponseFormat(Weather, 'weather'),
        stream_options: { include_usage: true },
      });
      const final = await runner.finalChatCompletion();
      expect(Weather.safeParse(final.choices[0].message.parsed).success).toBe(true);
    });
  });

  describe('stop', () => {
    it('cuts the answer before the first stop sequence, finish_reason stop, and bills only what was produced', async () => {
      const plain = await create({ messages: messages('Hello there'), stop: ['simulator,', 'comes'] });
      expect(plain.choices[0]).toMatchObject({ message: { content: '[simulator] This answer ' }, finish_reason: 'stop' });
      expect(plain.usage?.completion_tokens).toBe(countTextTokens('[simulator] This answer '));
      await expectChargedAsUsage(plain.usage, plain.x_service?.cost_millicents);

      const chunks = await stream({ messages: messages('Hello there'), stop: 'comes' });
      expect(assemble(chunks)[0]).toMatchObject({ content: '[simulator] This answer ', finish: 'stop' });
      expect(usageOf(chunks)?.completion_tokens).toBe(plain.usage?.completion_tokens);
    });
  });

  describe('n', () => {
    it('gives n choices, each counted in usage and charged, plain and streamed', async () => {
      const one = await create({ messages: messages('Say hello') });
      const three = await create({ messages: messages('Say hello'), n: 3 });
      expect(three.choices.map((choice) => choice.index)).toEqual([0, 1, 2]);
      expect(three.choices.map((choice) => choice.message.content)).toEqual(Array(3).fill(one.choices[0].message.content));
      expect(three.usage?.completion_tokens).toBe(3 * one.usage!.completion_tokens);
      await expectChargedAsUsage(three.usage, three.x_service?.cost_millicents);

      const chunks = await stream({ messages: messages('Say hello'), n: 3 });
      const choices = assemble(chunks);
      expect(choices.map((choice) => [choice.content, choice.finish])).toEqual(Array(3).fill([one.choices[0].message.content, 'stop']));
      expect(usageOf(chunks)).toEqual(three.usage);
      await expectChargedAsUsage(usageOf(chunks), chunks[chunks.length - 1].x_service?.cost_millicents);
    });

    it('gives n tool calls with tool_choice "required"', async () => {
      const completion = await create({ messages: messages('Hi'), tools, tool_choice: 'required', n: 2 });
      expect([toolCall(completion, 0), toolCall(completion, 1)]).toEqual([toolCall(completion, 0), toolCall(completion, 0)]);
      expect(completion.choices.map((choice) => choice.finish_reason)).toEqual(['tool_calls', 'tool_calls']);
      const streamed = assemble(await stream({ messages: messages('Hi'), tools, tool_choice: 'required', n: 2 }));
      expect(streamed.map((choice) => choice.toolCalls[0]?.name)).toEqual(['get_weather', 'get_weather']);
    });
  });

  describe('hostile shapes', () => {
    it('answers recursive, huge or malformed schemas and options without a 5xx, within the output cap', async () => {
      const loop = { $ref: '#/definitions/a', definitions: { a: { $ref: '#/definitions/a' } } };
      const huge = { type: 'array', minItems: 1e9, items: { type: 'array', minItems: 1e9, items: { type: 'string', minLength: 1e6 } } };
      const bodies: Array<Record<string, unknown>> = [
        { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: loop } } },
        { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { rows: huge } } } } },
        { response_format: { type: 'json_schema', json_schema: { name: 'x', schema: JSON.parse('{"type": "object", "properties": {"__proto__": {"type": "string"}}}') } } },
        { response_format: { type: 'json_object' }, messages: [{ role: 'user', content: `${'{"type": "object", '.repeat(20_000)}` }] },
        { tools, tool_choice: { type: 'function', function: { name: 'not_offered' } } },
        { tools: [{ type: 'function', function: { name: 'odd', parameters: huge } }], tool_choice: 'required' },
        { stop: ['', 'never said'], logprobs: true, top_logprobs: 20, n: 2 },
      ];
      for (const body of bodies) {
        for (const streamed of [false, true]) {
          const response = await fetch(`${t.baseUrl}/v1/chat/completions`, {
            method: 'POST',
            headers: { authorization: `Bearer ${workspace.apiKey}`, 'content-type': 'application/json' },
            body: JSON.stringify({ model: 'gpt-4o-mini', messages: messages('Hi'), max_tokens: 300, stream: streamed, ...body }),
          });
          const text = await response.text();
          // Refusing a value is validation's call; failing on one is never right.
          expect([response.status < 500, body]).toEqual([true, body]);
          if (!streamed && response.status === 200) {
            expect((JSON.parse(text) as Completion).usage!.completion_tokens).toBeLessThanOrEqual(300 * ((body.n as number) ?? 1));
          }
        }
      }
    }, 60_000);
  });

  describe('logprobs', () => {
    it('gives one entry per token with top_logprobs of the asked length, plain and streamed', async () => {
      const plain = await create({ messages: messages('Hello'), logprobs: true, top_logprobs: 3 });
      const content = plain.choices[0].logprobs?.content ?? [];
      expect(content).toHaveLength(plain.usage!.completion_tokens);
      expect(content.map((entry) => entry.token).join('')).toBe(plain.choices[0].message.content);
      for (const entry of content) {
        expect(entry.logprob).toBeLessThan(0);
        expect(entry.bytes).toEqual([...Buffer.from(entry.token, 'utf8')]);
        expect(entry.top_logprobs).toHaveLength(3);
        expect(entry.top_logprobs[0].token).toBe(entry.token);
      }

      const chunks = await stream({ messages: messages('Hello'), logprobs: true, top_logprobs: 3 });
      const [streamed] = assemble(chunks);
      expect(streamed.content).toBe(plain.choices[0].message.content);
      expect(streamed.logprobs).toEqual(content);
      // Each chunk carries the log-probabilities of the tokens it carries.
      for (const chunk of chunks) {
        for (const choice of chunk.choices.filter((c) => c.delta.content)) {
          expect(choice.logprobs?.content?.map((entry) => entry.token).join('')).toBe(choice.delta.content);
        }
      }

      const without = await create({ messages: messages('Hello') });
      expect(without.choices[0].logprobs).toBeNull();
    });
  });
});
